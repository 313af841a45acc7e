"""What Toolcore counts for ``/metrics`` (docs/deployment.md, "Metrics"): the metrics processes
record as things happen, and those read from the database when a scrape asks.

**Recorded** (counters, histograms, the websocket gauge): each process writes them to files of
its own (prometheus_client's multiprocess mode, ``config/metrics_files.py``) and a scrape of any
web process of the host adds up every process's, workers' included. Recording one is a write to
a memory-mapped file: no query, no system call, cheap enough for every settlement and every live
message. What a transaction decides is recorded after its commit (``transaction.on_commit``),
so a rolled-back settlement counts nothing.

**Read at scrape** (``DatabaseCollector``): what the database holds now, whichever process made
it so: unfinished calls by state, the ready ones and how long the oldest has waited, the live
workers of each host. Two aggregate queries a scrape, over small tables (unfinished calls, one
row a worker).

Labels are bounded: states, outcomes, reasons and kinds are fixed lists. A tool is named by
``tool_label``: the catalog's names as they are, every other name (a host tool, which clients
name) as ``host_tool``.
"""

from __future__ import annotations

import logging
from collections import Counter as Tally
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from django.db import DatabaseError
from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tools.catalog import CORE_TOOLS, MCP_PREFIX, tool_spec

from .models import ToolCall
from .selectors import workers_alive_by_host

logger = logging.getLogger(__name__)

HOST_TOOL_LABEL = "host_tool"
MCP_TOOL_LABEL = "mcp"
READY_FOR = ("worker", "host")  # who a ready call waits for: a worker (core tools) or a host
# Seconds. Settle: from the call's creation, so approvals and long commands are in it.
SETTLE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600)
PICKUP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

# registry=None: in multiprocess mode the values live in the files, read by /metrics'
# own registry (config/metrics.py), not the client's default registry.
SETTLEMENTS = Counter(
    "toolcore_settlements_total",
    "Calls settled, by outcome and tool, counted when the settlement commits.",
    ["outcome", "tool"],
    registry=None,
)
SETTLE_SECONDS = Histogram(
    "toolcore_settle_seconds",
    "Seconds from a call's creation to the commit of its settlement.",
    ["tool"],
    buckets=SETTLE_BUCKETS,
    registry=None,
)
PICKUP_SECONDS = Histogram(
    "toolcore_pickup_seconds",
    "Seconds from a call becoming ready to the commit of its claim (a worker's, a host's).",
    ["tool"],
    buckets=PICKUP_BUCKETS,
    registry=None,
)
WEBSOCKETS = Gauge(
    "toolcore_websockets",
    "Open websocket connections, by endpoint.",
    ["endpoint"],
    multiprocess_mode="livesum",  # a process that ended holds none
    registry=None,
)
LIVE_PUBLISHED = Counter(
    "toolcore_live_messages_published_total",
    "Live messages handed to the channel layer after their commit, by message type.",
    ["type"],
    registry=None,
)
LIVE_DROPPED = Counter(
    "toolcore_live_messages_dropped_total",
    "Live messages dropped: the publisher's queue full, a send that failed, or held for a "
    "slow websocket beyond its budget (durable events are read again from the database).",
    ["reason"],
    registry=None,
)
OUTAGES = Counter(
    "toolcore_outages_total",
    "Database and channel-layer errors caught, by kind and where they were caught.",
    ["kind", "where"],
    registry=None,
)
HTTP_RESPONSES = Counter(
    "toolcore_http_responses_total",
    "HTTP answers, by status class.",
    ["status_class"],
    registry=None,
)
# Server-defined message types: anything else (a newer server's) is counted as "other".
LIVE_TYPES = frozenset(
    {
        "conversation.event",
        "tool_call.changed",
        "tool.updated",
        "turn.changed",
        "queue.changed",
        "conversation.live",
        "launch.changed",
        "launch.removed",
    }
)


def tool_label(tool_name: str) -> str:
    """A core tool's name, ``mcp`` for an MCP server's tool (``mcp__<server>__<tool>``), else
    ``host_tool``: a client names its host tools and its MCP tools, and a label value a client
    chooses would let it grow the metrics without bound."""
    if tool_name in CORE_TOOLS:
        return tool_name
    return MCP_TOOL_LABEL if tool_name.startswith(MCP_PREFIX) else HOST_TOOL_LABEL


def status_class(status: int) -> str:
    return f"{status // 100}xx" if 100 <= status < 600 else "other"


def http_answer_counted(status: int) -> None:
    """One HTTP answer sent with ``status``: Django's (``AnswerCountMiddleware``) and the MCP
    endpoint's (``conversations/mcp/transport.py``), counted alike."""
    HTTP_RESPONSES.labels(status_class(status)).inc()


def _seconds_since(then: datetime | None, now: datetime) -> float | None:
    if then is None:
        return None
    if timezone.is_naive(then):  # SQLite's cursors give naive UTC
        then = then.replace(tzinfo=UTC)
    return max(0.0, (now - then).total_seconds())


def settlement_counted(*, outcome: str, tool_name: str, created_at: datetime | None) -> None:
    """One settlement committed (``on_commit``): its outcome, and its time since creation."""
    tool = tool_label(tool_name)
    SETTLEMENTS.labels(outcome, tool).inc()
    seconds = _seconds_since(created_at, timezone.now())
    if seconds is not None:
        SETTLE_SECONDS.labels(tool).observe(seconds)


def pickups_observed(picked: Sequence[tuple[str, datetime | None, datetime]]) -> None:
    """Claims committed (``on_commit``): ``(tool name, ready since, claimed at)`` each."""
    for tool_name, ready_at, claimed_at in picked:
        seconds = _seconds_since(ready_at, claimed_at)
        if seconds is not None:
            PICKUP_SECONDS.labels(tool_label(tool_name)).observe(seconds)


def outage_counted(kind: str, where: str) -> None:
    """A database (``kind="database"``), channel-layer (``"channel_layer"``) or asset-storage
    (``"asset_storage"``) error caught."""
    OUTAGES.labels(kind, where).inc()


def live_published(types: Iterable[str]) -> None:
    """Live messages handed to the channel layer, by type (one increment a type)."""
    for kind, count in Tally(t if t in LIVE_TYPES else "other" for t in types).items():
        LIVE_PUBLISHED.labels(kind).inc(count)


def live_dropped(reason: str, count: int = 1) -> None:
    """``count`` live messages dropped: ``queue_full``, ``send_failed`` or ``slow_socket``."""
    if count > 0:
        LIVE_DROPPED.labels(reason).inc(count)


# --- Read at scrape ------------------------------------------------------------------------


class DatabaseCollector(Collector):
    """The metrics the database holds, read when ``/metrics`` is asked (two queries). When the
    database cannot be read, ``toolcore_metrics_database_up`` is 0 and the rest is left out."""

    def collect(self) -> Iterable[GaugeMetricFamily]:
        up = GaugeMetricFamily(
            "toolcore_metrics_database_up",
            "1 when this scrape could read the database-backed metrics, else 0.",
        )
        try:
            families = list(_database_families())
        except DatabaseError as exc:
            logger.warning("metrics: the database could not be read: %s", exc)
            outage_counted("database", "metrics")
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families


def _database_families() -> Iterable[GaugeMetricFamily]:
    now = timezone.now()
    calls: Tally[tuple[str, str]] = Tally()
    ready: Tally[str] = Tally({waiting: 0 for waiting in READY_FOR})
    oldest: dict[str, float] = dict.fromkeys(READY_FOR, 0.0)
    rows = (
        ToolCall.objects.order_by()
        .values_list("state", "tool_name")
        .annotate(count=Count("pk"), since=Min("updated_at"))
    )
    for state, tool_name, count, since in rows:
        calls[(state, tool_label(tool_name))] += count
        if state == ToolCall.State.READY:
            # A ready call's row last changed when it became ready (nothing writes it while it
            # waits), so its updated_at is when it started waiting.
            waiting = "host" if tool_spec(tool_name).host else "worker"
            ready[waiting] += count
            oldest[waiting] = max(oldest[waiting], _seconds_since(since, now) or 0.0)
    by_state = GaugeMetricFamily(
        "toolcore_calls",
        "Unfinished calls, by state and tool.",
        labels=["state", "tool"],
    )
    for (state, tool), count in sorted(calls.items()):
        by_state.add_metric([state, tool], count)
    yield by_state
    ready_calls = GaugeMetricFamily(
        "toolcore_ready_calls",
        "Calls ready and not claimed yet, by what they wait for (a worker: the core tools and "
        "the registered MCP servers' tools; a host: host tools).",
        labels=["waiting_for"],
    )
    oldest_ready = GaugeMetricFamily(
        "toolcore_ready_oldest_seconds",
        "Seconds the oldest ready call has waited, by what it waits for (0: none waits).",
        labels=["waiting_for"],
    )
    for waiting in READY_FOR:
        ready_calls.add_metric([waiting], ready[waiting])
        oldest_ready.add_metric([waiting], oldest[waiting])
    yield ready_calls
    yield oldest_ready
    yield _workers_alive()


def _workers_alive() -> GaugeMetricFamily:
    """Workers alive per host (``selectors.workers_alive_by_host``; a host whose workers all
    died or stopped shows 0)."""
    family = GaugeMetricFamily(
        "toolcore_workers_alive",
        "Tool workers whose heartbeat is younger than the lease, by host.",
        labels=["host"],
    )
    for host, alive in workers_alive_by_host().items():
        family.add_metric([host], alive)
    return family
