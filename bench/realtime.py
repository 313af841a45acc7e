"""Realtime benches: the websockets and the history page beside baselines measured in the same run.

    python bench/realtime.py [--runs N] [--quick] [--only NAME]

Run from the repository root. SQLite by default (a throw-away file database, bench/_setup.py);
PostgreSQL when ``DATABASE_URL`` is set; the fan-out runs on the in-memory channel layer and,
when ``REDIS_URL`` is set, on Redis too. Prints a Markdown table: each figure is the median of
``--runs`` runs (3) with the smallest and largest in brackets, the measured path and its
baseline run in turns; a ratio is the median of the per-run ratios. Always exits 0 once the
benches ran: it is a report, not a test.

- Replay: 100,000 stored events to one client that subscribes with ``after: 0``, through daphne
  serving ``config.asgi:application`` on the bench database. Baseline: a bare ``websockets``
  server sending the same replay frames (those the consumer sent in a warm-up run),
  pre-encoded. Floor: a bare server that reads the rows with the raw driver (1,000 at a time,
  as the consumer does), formats the events and frames, and sends them.
- Fan-out: 200 sockets subscribed to one conversation, daphne serving
  ``bench/realtime_asgi.py`` (Toolcore's application plus ``/ws/bare/``, a bare Channels
  consumer on the same layer: the baseline). Another process POSTs assistant messages through
  daphne's REST (``POST …/messages``) one after the other, as fast as daphne answers, so on the
  in-memory layer they are published in daphne's process. Latency: from the commit
  (``committedAt``, stamped by the bench application) to receipt, p50 and p99 of every
  message; throughput: messages received ÷ the time from the first POST to the last message.
  1,000 events per path and layer, split over the runs (3 × 334: a run of 1,000 events takes
  about a minute here). Sockets open and close 25 at a time (see ``AT_ONCE``).
- History: ``GET /api/v1/conversations/{cid}/history?limit=50`` of a conversation with 10,000
  settled calls (9 in 10 with 16 KiB of output in their activity) against one with 100, in
  the bench process (Django's test client): time and bytes read from the database (see
  ``QueryBytes``). The calls are made through the services, as a worker settles them, which
  takes 1.5–2.5 minutes for 10,000. Skipped while the endpoint answers 404 or 405.
- Memory: daphne's resident set (``VmRSS``) before and after 1,000 sockets connect and
  subscribe (one conversation each), per socket; baseline: the bare consumer. A fresh daphne
  each run. Then the CPU daphne uses over 10 s while they idle: one period of the sockets'
  credential re-check (``TOOLCORE_WS_AUTH_CHECK_SECONDS``); the head checks (every 30 s) fall
  outside it.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import json
import logging
import math
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _report import Report, ratio_text, spread
from realtime_peers import Child, Daphne, cpu_seconds, free_port, raise_fd_limit

MS = 1000.0
KIB = 1024


# --- the table ---------------------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    """The ``p``-th percentile (0–100), nearest rank."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(p / 100 * len(ordered))))
    return ordered[rank - 1]


def rate(value: float) -> str:
    return f"{value:,.0f}/s"


def millis(value: float) -> str:
    return f"{value * MS:.2f} ms" if value < 0.01 else f"{value * MS:.1f} ms"


def micros(value: float) -> str:
    return f"{value * 1e6:.0f} µs"


def kib(value: float) -> str:
    return f"{value / KIB:.1f} KiB"


class Table:
    def __init__(self, report: Report) -> None:
        self.report = report
        self.verdicts: list[bool] = []
        self.notes: list[str] = []

    def add(
        self,
        figure: str,
        measured_text: str,
        baseline_text: str = "",
        ratios: list[float] | None = None,
        goal: str = "",
        ok: bool | None = None,
        verdict: str = "",
        **values: Any,
    ) -> None:
        """A row; ``values`` are the numbers behind its texts (bench/_report.py)."""
        verdict = verdict or ("" if ok is None else ("PASS" if ok else "FAIL"))
        if ok is not None:
            self.verdicts.append(ok)
        ratio = "" if not ratios else spread(ratios, ratio_text)
        print(
            f"| {figure} | {measured_text} | {baseline_text} | {ratio} | {goal} | {verdict} |",
            flush=True,
        )
        self.report.row(
            figure=figure,
            measured=measured_text,
            baseline=baseline_text,
            ratio=ratio,
            goal=goal,
            ok=ok,
            values={**values, "ratio": ratios},
        )

    def skip(self, figure: str, reason: str) -> None:
        print(f"| {figure} | skipped: {reason} | | | | |", flush=True)
        self.report.skip(figure, reason)

    def note(self, text: str) -> None:
        self.notes.append(text)


def in_turns(runs: int, *fns: Callable[[], Any]) -> list[list[Any]]:
    """Each of ``fns`` run ``runs`` times, in turns; their answers per function."""
    answers: list[list[Any]] = [[] for _ in fns]
    for _ in range(runs):
        for fn, got in zip(fns, answers, strict=True):
            gc.collect()
            got.append(fn())
    return answers


def per_run(a: list[float], b: list[float]) -> list[float]:
    return [x / y for x, y in zip(a, b, strict=True)]


# --- Django, the bench database and daphne -----------------------------------------------------


class Bench:
    """Django on a throw-away database (bench/_setup.py), the bench user and its token, and the
    environment of the daphne processes (same database, no embedded tool workers)."""

    def __init__(self, folder: Path, quick: bool) -> None:
        from _setup import django_on_bench_database

        self.folder = folder
        self.quick = quick
        self.connection = django_on_bench_database()
        from django.contrib.auth import get_user_model  # once Django is set up

        from conversations.api.auth import token_create

        self.vendor = self.connection.vendor
        self.user = get_user_model().objects.create(username="bench")
        _, self.token = token_create(user=self.user, name="bench")
        self.redis_url = os.environ.get("REDIS_URL", "").strip()

    def database_url(self) -> str:
        db = self.connection.settings_dict
        if self.vendor == "sqlite":
            return f"sqlite:///{Path(db['NAME']).resolve()}"
        from urllib.parse import quote

        auth = quote(db["USER"] or "postgres", safe="")
        if db.get("PASSWORD"):
            auth += ":" + quote(db["PASSWORD"], safe="")
        return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"

    def daphne(self, app: str, *, redis: bool = False) -> Daphne:
        from django.conf import settings

        env = dict(os.environ)
        env.update(
            DATABASE_URL=self.database_url(),
            DATA_DIR=str(settings.DATA_DIR),
            TOOLCORE_WORKSPACE_ROOT=str(settings.TOOLCORE_WORKSPACE_ROOT),
            TOOLCORE_WORKERS="0",  # the realtime path only: no tool worker in the process
            ALLOWED_HOSTS="127.0.0.1,localhost",
            DEBUG="0",
            LOG_LEVEL="WARNING",
            PYTHONUNBUFFERED="1",
        )
        if redis:
            env["REDIS_URL"] = self.redis_url
        else:
            env.pop("REDIS_URL", None)
        log = self.folder / f"daphne-{uuid.uuid4().hex[:8]}.log"
        return Daphne(app, env, log)

    def layers(self) -> list[tuple[str, bool]]:
        return [("in-memory", False)] + ([("Redis", True)] if self.redis_url else [])

    def close(self) -> None:
        from _setup import drop_bench_database
        from django.db import connections

        connections.close_all()
        if self.vendor == "postgresql":
            self.connection.close_pool()
        drop_bench_database(self.connection)


def stopped(daphne: Daphne) -> None:
    """Stop daphne; its stderr must hold no traceback."""
    errors = daphne.stop()
    if "Traceback" in errors:
        raise RuntimeError(f"daphne logged an error:\n{errors[-4000:]}")


def _conversation(bench: Bench, title: str) -> tuple[Any, str]:
    """A conversation of the bench user with an open turn."""
    from conversations.services.conversations import conversation_create
    from conversations.services.messages import message_post

    conversation = conversation_create(owner=bench.user, title=title)
    posted = message_post(
        conversation_id=conversation.pk,
        message_id=f"u-{uuid.uuid4().hex}",
        role="user",
        content=[{"type": "text", "text": "bench"}],
    )
    return conversation, posted.body["turnId"]


# --- websocket clients -------------------------------------------------------------------------


async def ws_open(url: str, token: str | None = None) -> Any:
    from websockets.asyncio.client import connect

    headers = {"Authorization": f"Bearer {token}"} if token else None
    return await connect(
        url,
        additional_headers=headers,
        compression=None,  # daphne does not compress; neither does any server here
        max_size=None,
        open_timeout=60,
        ping_interval=None,
    )


async def subscribed(url: str, token: str | None, cid: str) -> Any:
    """A socket subscribed to ``cid``: on ``/ws/conversations/`` with ``after: null`` (its
    ``snapshot`` frame read), on ``/ws/bare/`` its ``subscribed`` frame read."""
    ws = await ws_open(url, token)
    await ws.send(json.dumps({"type": "subscribe", "conversationId": cid, "after": None}))
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), 60))
        if frame["type"] in ("snapshot", "subscribed"):
            return ws
        if frame["type"] != "hello":
            raise RuntimeError(f"unexpected frame {frame}")


# Sockets open and close at most this many at once: with Redis, a burst of ~100 subscriptions or
# disconnections exhausts the channel layer's connection pool (redis-py's default of 100
# connections, which then refuses instead of waiting) and some of them fail.
AT_ONCE = 25


async def open_many(url: str, token: str | None, cids: list[str]) -> list:
    sockets: list[Any] = []
    for start in range(0, len(cids), AT_ONCE):
        batch = cids[start : start + AT_ONCE]
        sockets += await asyncio.gather(*(subscribed(url, token, cid) for cid in batch))
    return sockets


async def close_all(sockets: list[Any]) -> None:
    for start in range(0, len(sockets), AT_ONCE):
        batch = sockets[start : start + AT_ONCE]
        await asyncio.gather(*(ws.close() for ws in batch), return_exceptions=True)


# --- replay ------------------------------------------------------------------------------------

REPLAY_EVENTS = 100_000
_TO = re.compile(r'"to":(\d+)')


def _stored_events(bench: Bench, n: int) -> Any:
    """A conversation with ``n`` stored events of ~300 B (bulk-inserted, as bench/core.py)."""
    from django.db import transaction

    from conversations.models import Conversation, ConversationEvent
    from conversations.services.conversations import conversation_create

    conversation = conversation_create(owner=bench.user, title="replay")
    with transaction.atomic():
        ConversationEvent.objects.bulk_create(
            (
                ConversationEvent(
                    conversation=conversation,
                    sequence=i + 1,
                    type="user_message",
                    payload={
                        "messageId": f"m{i}",
                        "content": [{"type": "text", "text": "x" * 220}],
                    },
                )
                for i in range(n)
            ),
            batch_size=2000,
        )
        Conversation.objects.filter(pk=conversation.pk).update(last_sequence=n)
    return conversation


async def _replay(url: str, token: str | None, cid: str, n: int, keep: list | None) -> float:
    """Seconds from the subscription (``after: 0``) to the replay frame reaching ``n``."""
    ws = await ws_open(url, token)
    try:
        if token is not None:
            json.loads(await ws.recv())  # hello
        started = time.perf_counter()
        await ws.send(json.dumps({"type": "subscribe", "conversationId": cid, "after": 0}))
        to = 0
        while to < n:
            frame = await asyncio.wait_for(ws.recv(), 60)
            if not frame.startswith('{"type":"replay"'):
                raise RuntimeError(f"unexpected frame {frame[:200]}")
            to = int(_TO.search(frame, 0, 200).group(1))
            if keep is not None:
                keep.append(frame)
        return time.perf_counter() - started
    finally:
        await ws.close()


def _check_frames(frames: list[str], n: int) -> None:
    sequences = []
    for frame in frames:
        parsed = json.loads(frame)
        got = [e["sequence"] for e in parsed["events"]]
        assert got == list(range(parsed["from"] + 1, parsed["to"] + 1)), parsed["from"]
        sequences += got
    assert sequences == list(range(1, n + 1)), (len(sequences), n)


def _floor_spec(bench: Bench, conversation: Any) -> dict[str, Any]:
    """How the floor server reads the rows: the raw driver on the bench database, the same
    columns and time format as the consumer's read."""
    from conversations.models import ConversationEvent

    table = ConversationEvent._meta.db_table
    if bench.vendor == "postgresql":
        from psycopg.conninfo import make_conninfo

        params = bench.connection.get_connection_params()
        keep = {"dbname", "user", "password", "host", "port"}
        conninfo = make_conninfo(
            **{k: v for k, v in params.items() if k in keep and v not in (None, "")}
        )
        sql = (
            "SELECT sequence, type, turn_id::text, tool_call_id::text, payload::text, "
            "to_char(date_trunc('milliseconds', created_at AT TIME ZONE 'UTC'), "
            '\'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"\') '
            f"FROM {table} WHERE conversation_id = ? AND sequence > ? ORDER BY sequence LIMIT ?"
        )
        return {
            "vendor": "postgresql",
            "conninfo": conninfo,
            "sql": sql,
            "conversation": str(conversation.pk),
            "conversation_id": str(conversation.pk),
        }
    sql = (
        "SELECT sequence, type, turn_id, tool_call_id, payload, "
        "substr(created_at, 1, 10) || 'T' || substr(created_at, 12, 8) || '.' || "
        "substr(substr(created_at, 21) || '000', 1, 3) || 'Z' "
        f"FROM {table} WHERE conversation_id = ? AND sequence > ? ORDER BY sequence LIMIT ?"
    )
    return {
        "vendor": "sqlite",
        "path": str(Path(bench.connection.settings_dict["NAME"]).resolve()),
        "sql": sql,
        "conversation": conversation.pk.hex,
        "conversation_id": str(conversation.pk),
    }


def bench_replay(bench: Bench, table: Table, runs: int) -> None:
    n = REPLAY_EVENTS // 5 if bench.quick else REPLAY_EVENTS
    conversation = _stored_events(bench, n)
    cid = str(conversation.pk)
    daphne = bench.daphne("config.asgi:application")
    servers: list[Child] = []
    try:
        url = daphne.url("/ws/conversations/", "ws")
        frames: list[str] = []
        asyncio.run(_replay(url, bench.token, cid, n, frames))  # warm-up; its frames kept
        _check_frames(frames, n)
        path = bench.folder / "replay-frames.txt"
        path.write_text("".join(f + "\n" for f in frames), encoding="utf-8")
        del frames
        bare_port, floor_port = free_port(), free_port()
        servers.append(Child("frames", str(path), str(bare_port)))
        servers.append(
            Child("floor", json.dumps(_floor_spec(bench, conversation)), str(floor_port))
        )

        def over(port_or_url: Any, token: str | None) -> Callable[[], float]:
            target = (
                port_or_url if isinstance(port_or_url, str) else f"ws://127.0.0.1:{port_or_url}/"
            )
            return lambda: n / asyncio.run(_replay(target, token, cid, n, None))

        consumer, bare, floor = (
            over(url, bench.token),
            over(bare_port, None),
            over(floor_port, None),
        )
        bare(), floor()  # their warm-up
        got, base, low = in_turns(runs, consumer, bare, floor)
    finally:
        for server in servers:
            server.stop()
        stopped(daphne)
    figure = f"replay of {n:,} stored events to one client, events/s"
    ratios = per_run(got, base)
    floor_ratios = per_run(low, base)
    ok = statistics.median(ratios) >= 0.5
    table.add(
        f"{figure}: `/ws/conversations/` on daphne (baseline: a bare `websockets` server sending "
        "the same replay frames, pre-encoded)",
        spread(got, rate),
        spread(base, rate),
        ratios,
        "≥ 0.5",
        ok,
        "FAIL (goal above the floor)" if not ok and statistics.median(floor_ratios) < 0.5 else "",
        measured=got,
        baseline=base,
        unit="events/s",
        floor=statistics.median(floor_ratios),
    )
    table.add(
        f"  floor: a bare server reading the rows with the raw driver ({bench.vendor}, 1,000 at "
        "a time), formatting events and frames, sending them (baseline: the bare server)",
        spread(low, rate),
        spread(base, rate),
        floor_ratios,
        measured=low,
        baseline=base,
        unit="events/s",
    )
    table.add(
        "  the consumer against that floor",
        spread(got, rate),
        spread(low, rate),
        per_run(got, low),
    )
    if statistics.median(floor_ratios) < 0.5:
        table.note(
            f"Replay: the floor reaches {statistics.median(floor_ratios):.2f} of the bare "
            "server: the 0.5 goal is beyond what any server reading the database reaches here."
        )


# --- fan-out -----------------------------------------------------------------------------------

FANOUT_SOCKETS = 200
FANOUT_EVENTS = 1000
FANOUT_TIMEOUT_SECONDS = 240
_EVENT = '{"type":"conversation.event"'
_REPLAYED = '{"type":"replay"'
_STAMP = '"committedAt":'
_SEQUENCE = '"sequence":'


class Receipts:
    """What the sockets received: durable events counted, commit → receipt latencies of the
    live ones, the time of the last."""

    def __init__(self, sockets: int) -> None:
        self.each = [0] * sockets
        self.disorder = 0
        self.count = 0
        self.target = 0
        self.reached = asyncio.Event()
        self.latencies: list[float] = []
        self.replayed = 0
        self.last = 0.0

    def expect(self, target: int) -> None:
        self.target = target
        if self.count >= target:
            self.reached.set()
        else:
            self.reached.clear()


async def _read(ws: Any, receipts: Receipts, index: int) -> None:
    """Count what socket ``index`` receives; ``receipts.disorder`` counts sequences that do
    not follow the previous one (the exactly-once, in-order promise)."""
    last = None
    try:
        async for raw in ws:
            now = time.time()
            if raw.startswith(_EVENT):
                at = raw.rfind(_STAMP) + len(_STAMP)
                receipts.latencies.append(now - float(raw[at : raw.index("}", at)]))
                at = raw.index(_SEQUENCE) + len(_SEQUENCE)
                first = to = int(raw[at : raw.index(",", at)])
                events = 1
            elif raw.startswith(_REPLAYED):  # a gap filled from the database: no stamp
                frame = json.loads(raw)
                first, to, events = frame["from"] + 1, frame["to"], len(frame["events"])
                receipts.replayed += events
            else:
                continue
            if last is not None and first != last + 1:
                receipts.disorder += 1
            last = to
            receipts.each[index] += events
            receipts.count += events
            receipts.last = now
            if receipts.count >= receipts.target:
                receipts.reached.set()
    except Exception:  # noqa: BLE001 - the socket closed at the end of the run
        pass


async def _all_received(receipts: Receipts, poster: Any) -> None:
    """Until every message arrived; an error if the poster fails or time runs out."""
    arrived = asyncio.ensure_future(receipts.reached.wait())
    exited = asyncio.ensure_future(poster.wait())
    try:
        await asyncio.wait(
            {arrived, exited}, timeout=FANOUT_TIMEOUT_SECONDS, return_when=asyncio.FIRST_COMPLETED
        )
        if exited.done() and poster.returncode != 0:
            raise RuntimeError(f"the REST poster failed (exit status {poster.returncode})")
        await asyncio.wait_for(asyncio.shield(arrived), FANOUT_TIMEOUT_SECONDS)
    except TimeoutError as exc:
        raise RuntimeError(
            f"{receipts.count:,} of {receipts.target:,} messages in {FANOUT_TIMEOUT_SECONDS} s"
        ) from exc
    finally:
        arrived.cancel()


async def _fanout(
    daphne: Daphne, path: str, token: str, cid: str, turn: str, events: int, sockets: int
) -> dict[str, Any]:
    """``sockets`` sockets subscribed to ``cid`` on ``path``; ``events`` assistant messages
    POSTed one after the other, as fast as daphne answers, by another process (this one only
    reads). Commit → receipt latencies; messages received ÷ the time from the first POST to the
    last message; daphne's CPU a message."""
    opened = await open_many(
        daphne.url(path, "ws"), token if path != "/ws/bare/" else None, [cid] * sockets
    )
    receipts = Receipts(sockets)
    receipts.expect(sockets * events)
    readers = [asyncio.create_task(_read(ws, receipts, i)) for i, ws in enumerate(opened)]
    spec = {"port": daphne.port, "token": token, "conversation": cid, "turn": turn}
    spec.update(prefix=uuid.uuid4().hex, count=events)
    try:
        cpu = cpu_seconds(daphne.pid)
        poster = await asyncio.create_subprocess_exec(
            sys.executable,
            str(Path(__file__).with_name("realtime_peers.py")),
            "post",
            json.dumps(spec),
            stdout=asyncio.subprocess.PIPE,
        )
        await _all_received(receipts, poster)
        used = cpu_seconds(daphne.pid) - cpu
        out, _ = await poster.communicate()
        sent = json.loads(out)
        await asyncio.sleep(0.2)  # anything beyond the count (a duplicate) arrives too
        if set(receipts.each) != {events} or receipts.disorder:
            raise RuntimeError(
                f"{path}: each socket should have {events} events in order; got "
                f"{min(receipts.each)}–{max(receipts.each)}, {receipts.disorder} out of order"
            )
    finally:
        for reader in readers:
            reader.cancel()
        await close_all(opened)
    messages = sockets * events
    return {
        "p50": percentile(receipts.latencies, 50),
        "p99": percentile(receipts.latencies, 99),
        "rate": messages / (receipts.last - sent[0]),
        "appends": events / (sent[-1] - sent[0]),
        "replayed": receipts.replayed,
        "daphne_cpu": used / messages,
    }


def bench_fanout(bench: Bench, table: Table, runs: int) -> None:
    """Per layer: the consumer and the bare one in turns, ``FANOUT_EVENTS`` events for each in
    all, split over the runs (each run's figures come from its share: a run of 1,000 events to
    200 sockets takes about a minute here, and three of them per path and layer would take the
    bench past ten minutes)."""
    total = FANOUT_EVENTS // 5 if bench.quick else FANOUT_EVENTS
    events = math.ceil(total / runs)
    for layer, redis in bench.layers():
        got, base = _fanout_layer(bench, runs, events, redis, layer)
        _fanout_rows(table, layer, f"{runs} × {events:,}" if runs > 1 else f"{events:,}", got, base)


def _fanout_layer(
    bench: Bench, runs: int, events: int, redis: bool, layer: str
) -> tuple[list[dict], list[dict]]:
    conversation, turn = _conversation(bench, f"fan-out {layer}")
    cid = str(conversation.pk)
    daphne = bench.daphne("bench.realtime_asgi:application", redis=redis)
    try:

        def fanout(path: str, n: int = events) -> Callable[[], dict[str, Any]]:
            return lambda: asyncio.run(
                _fanout(daphne, path, bench.token, cid, turn, n, FANOUT_SOCKETS)
            )

        fanout("/ws/conversations/", 20)(), fanout("/ws/bare/", 20)()  # warm-up
        got, base = in_turns(runs, fanout("/ws/conversations/"), fanout("/ws/bare/"))
    finally:
        stopped(daphne)
    return got, base


def _fanout_rows(table: Table, layer: str, events: str, got: list[dict], base: list[dict]) -> None:
    def column(runs: list[dict], key: str) -> list[float]:
        return [r[key] for r in runs]

    def latency(runs: list[dict]) -> str:
        return (
            f"p50 {spread(column(runs, 'p50'), millis)}, p99 {spread(column(runs, 'p99'), millis)}"
        )

    figure = (
        f"fan-out, {layer} layer, {FANOUT_SOCKETS} sockets on one conversation, {events} events "
        "POSTed as fast as daphne answers"
    )
    tails = [r["p99"] / r["p50"] for r in got]
    table.add(
        f"{figure}: commit → receipt (baseline: the bare Channels consumer; ratio: the "
        "consumer's p99 ÷ its p50)",
        latency(got),
        latency(base),
        tails,
        "p99 ≤ 10× p50",
        statistics.median(tails) <= 10,
        measured=column(got, "p99"),
        baseline=column(base, "p99"),
        unit="s (p99)",
    )
    ratios = per_run(column(got, "rate"), column(base, "rate"))
    table.add(
        "  messages/s received by the sockets (baseline: the bare Channels consumer)",
        spread(column(got, "rate"), rate),
        spread(column(base, "rate"), rate),
        ratios,
        "≥ 0.7",
        statistics.median(ratios) >= 0.7,
        measured=column(got, "rate"),
        baseline=column(base, "rate"),
        unit="messages/s",
    )
    table.add(
        "  daphne's CPU a message (ratio: the consumer's ÷ the bare's)",
        spread(column(got, "daphne_cpu"), micros),
        spread(column(base, "daphne_cpu"), micros),
        per_run(column(got, "daphne_cpu"), column(base, "daphne_cpu")),
    )
    table.add(
        "  appends (POSTs answered) a second meanwhile",
        spread(column(got, "appends"), rate),
        spread(column(base, "appends"), rate),
    )
    replayed = sum(r["replayed"] for r in got)
    if replayed:
        table.note(
            f"Fan-out ({layer}): {replayed:,} events reached the consumer's clients as replay "
            "frames (gaps filled from the database); counted in the rate, not in the latencies."
        )


# --- history -----------------------------------------------------------------------------------

HISTORY_URL = "/api/v1/conversations/{cid}/history"
HISTORY_CALLS = 10_000
HISTORY_SMALL_CALLS = 100
HISTORY_OUTPUT_CHARS = 16_000  # 16 KiB of output in the activity (a delta costs ≤ 16,384)
HISTORY_CALLS_A_MESSAGE = 50
HISTORY_REQUESTS = 20  # GETs of each conversation per run, in turns


class QueryBytes:
    """Bytes read from the database by the queries run inside the block.

    ``rows``: every ``SELECT`` is recorded (``connection.execute_wrapper``) and, after the
    block, run again with the same parameters; the sizes of the values it returns are summed
    (text in UTF-8, binary as is, 8 bytes a number, other values as their text): the rows
    fetched. ``buffers`` (PostgreSQL with ``pg_stat_statements`` loaded, else None): the shared
    buffers the statements of the bench database touched, hit or read, ``block_size`` each
    (table, index and TOAST pages)."""

    def __init__(self, connection: Any, *, stats: bool) -> None:
        self.connection = connection
        self.stats = stats
        self.statements: list[tuple[str, Any]] = []
        self.rows = 0
        self.buffers: int | None = None

    def _record(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if not many and sql.lstrip()[:6].upper() == "SELECT":
            self.statements.append((sql, params))
        return execute(sql, params, many, context)

    def __enter__(self) -> QueryBytes:
        if self.stats:
            with self.connection.cursor() as cursor:
                cursor.execute(f"SELECT pg_stat_statements_reset(0, {_THIS_DATABASE}, 0)")
        self._wrapper = self.connection.execute_wrapper(self._record)
        self._wrapper.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._wrapper.__exit__(*exc)
        if exc[0] is not None:
            return
        with self.connection.cursor() as cursor:
            if self.stats:
                cursor.execute(
                    "SELECT coalesce(sum(shared_blks_hit + shared_blks_read), 0) * "
                    "current_setting('block_size')::int FROM pg_stat_statements WHERE dbid = "
                    f"{_THIS_DATABASE} AND query NOT LIKE '%pg_stat_statements%'"
                )
                self.buffers = int(cursor.fetchone()[0])
            for sql, params in self.statements:
                cursor.execute(sql, params)
                self.rows += sum(_size(v) for row in cursor.fetchall() for v in row)


_THIS_DATABASE = "(SELECT oid FROM pg_database WHERE datname = current_database())"


def _size(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    if isinstance(value, bool | int | float):
        return 8
    return len(str(value).encode("utf-8"))


def _pg_stat_statements(connection: Any) -> bool:
    """Whether ``pg_stat_statements`` can be read here (created in the throw-away database
    when the server preloads it)."""
    from django.db import DatabaseError, transaction

    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            cursor.execute("SELECT count(*) FROM pg_stat_statements")
        return True
    except DatabaseError:
        return False


def _history_url(cid: str) -> str:
    return HISTORY_URL.format(cid=cid)


def _settled_calls(bench: Bench, n: int) -> Any:
    """A conversation with ``n`` calls of ``notes`` (50 to an assistant message, one turn),
    settled the way a worker settles them: claimed 50 at a time (``claim_acquire_batch``), 9 in
    10 given 16 KiB of output (an ``outputDelta`` folded into their activity), then
    ``call_settle`` (completed)."""
    from conversations.services import publish
    from conversations.services.activity import activity_fold
    from conversations.services.claims import claim_acquire_batch
    from conversations.services.messages import message_post
    from conversations.services.settlement import ClaimGuard, call_settle

    conversation, turn = _conversation(bench, f"history {n}")
    output = "".join(f"line {i:05}: some tool output\n" for i in range(600))[:HISTORY_OUTPUT_CHARS]
    done = 0
    for batch in range(math.ceil(n / HISTORY_CALLS_A_MESSAGE)):
        count = min(HISTORY_CALLS_A_MESSAGE, n - done)
        message_post(
            conversation_id=conversation.pk,
            message_id=f"a{batch}",
            role="assistant",
            turn_id=turn,
            content=[{"type": "text", "text": f"calling {count} tools"}]
            + [
                {"type": "tool_call", "id": f"p{batch}-{i}", "name": "notes", "arguments": {"q": i}}
                for i in range(count)
            ],
        )
        claims = claim_acquire_batch(
            tool_names=["notes"], worker="bench", limit=count, owner_id=bench.user.pk
        )
        assert len(claims) == count, len(claims)
        for claim in claims:
            if done % 10:
                with publish.atomic():  # the fold locks the activity row
                    activity_fold(
                        tool_call_id=claim.call_id,
                        update={
                            "toolCallId": str(claim.call_id),
                            "turnId": turn,
                            "outputDelta": output,
                        },
                    )
            call_settle(
                call_id=claim.call_id,
                outcome="completed",
                guard=ClaimGuard(claim.token, claim.generation),
                result={"content": [{"type": "text", "text": "ok"}]},
            )
            done += 1
    return conversation


def bench_history(bench: Bench, table: Table, runs: int) -> None:
    from django.test import Client

    figure = f"history page (`limit=50`) of {HISTORY_CALLS:,} calls"
    client = Client(HTTP_AUTHORIZATION=f"Bearer {bench.token}")
    probe, _ = _conversation(bench, "history probe")
    refusals = logging.getLogger("conversations.api.middleware")  # logs each 404 as a warning
    level = refusals.level
    refusals.setLevel(logging.ERROR)
    try:
        status = client.get(_history_url(str(probe.pk)), {"limit": 50}).status_code
    finally:
        refusals.setLevel(level)
    if status in (404, 405):
        table.skip(figure, f"`GET …/history` answers {status} (the endpoint is not there yet)")
        return
    stats = bench.vendor == "postgresql" and _pg_stat_statements(bench.connection)
    big = str(_settled_calls(bench, HISTORY_CALLS).pk)
    small = str(_settled_calls(bench, HISTORY_SMALL_CALLS).pk)

    urls = [_history_url(big), _history_url(small)]

    def get(url: str) -> float:
        started = time.perf_counter()
        answer = client.get(url, {"limit": 50})
        spent = time.perf_counter() - started
        assert answer.status_code == 200, answer.content[:500]
        return spent

    def run() -> list[dict[str, Any]]:
        """One run: ``HISTORY_REQUESTS`` GETs of each page in turns (big, small, big, …), the
        median time of each; then the bytes of one GET of each."""
        spent = in_turns(HISTORY_REQUESTS, *(lambda u=u: get(u) for u in urls))
        answers = []
        for url, times in zip(urls, spent, strict=True):
            with QueryBytes(bench.connection, stats=stats) as read:
                client.get(url, {"limit": 50})
            answers.append(
                {"seconds": statistics.median(times), "rows": read.rows, "buffers": read.buffers}
            )
        return answers

    run()  # warm-up
    got, base = (list(side) for side in zip(*(run() for _ in range(runs)), strict=True))
    times = per_run([g["seconds"] for g in got], [b["seconds"] for b in base])
    table.add(
        f"{figure} (baseline: the same of {HISTORY_SMALL_CALLS} calls), time of one GET "
        f"(median of {HISTORY_REQUESTS})",
        spread([g["seconds"] for g in got], millis),
        spread([b["seconds"] for b in base], millis),
        times,
        "≤ 1.5",
        statistics.median(times) <= 1.5,
        measured=[g["seconds"] for g in got],
        baseline=[b["seconds"] for b in base],
        unit="s",
    )
    measures = [("rows", "rows fetched: the captured `SELECT`s run again, their values' sizes")]
    if stats:  # the goal is on the buffers when PostgreSQL can say
        measures.insert(0, ("buffers", "`pg_stat_statements`: shared buffers hit + read"))
    for i, (key, what) in enumerate(measures):
        sizes = per_run([g[key] for g in got], [b[key] for b in base])
        table.add(
            f"  bytes read from the database by one GET ({what})",
            spread([g[key] for g in got], kib),
            spread([b[key] for b in base], kib),
            sizes,
            "≤ 1.5" if i == 0 else "",
            statistics.median(sizes) <= 1.5 if i == 0 else None,
            measured=[g[key] / KIB for g in got],
            baseline=[b[key] / KIB for b in base],
            unit="KiB",
        )


# --- memory ------------------------------------------------------------------------------------

MEMORY_SOCKETS = 1000
IDLE_SECONDS = 10


async def _idle_sockets(daphne: Daphne, path: str, token: str | None, cids: list[str]) -> dict:
    """Daphne's resident set before and after ``len(cids)`` sockets subscribe, one a
    conversation; then its CPU over ``IDLE_SECONDS`` while they idle (consumer only)."""
    url = daphne.url(path, "ws")
    await close_all(await open_many(url, token, cids[:10]))  # warm-up: lazy imports, pools
    await asyncio.sleep(1)
    before = daphne.rss_kib()
    sockets = await open_many(url, token, cids)
    try:
        await asyncio.sleep(2)
        after = daphne.rss_kib()
        idle = None
        if path != "/ws/bare/":
            cpu = cpu_seconds(daphne.pid)
            await asyncio.sleep(IDLE_SECONDS)
            idle = (cpu_seconds(daphne.pid) - cpu) / IDLE_SECONDS
    finally:
        await close_all(sockets)
    return {"per_socket": (after - before) * KIB / len(cids), "idle": idle}


def bench_memory(bench: Bench, table: Table, runs: int) -> None:
    from conversations.services.conversations import conversation_create

    n = MEMORY_SOCKETS
    cids = [str(conversation_create(owner=bench.user, title=f"idle {i}").pk) for i in range(n)]

    def fresh(app: str, path: str, token: str | None) -> Callable[[], dict]:
        def run() -> dict:
            daphne = bench.daphne(app)
            try:
                return asyncio.run(_idle_sockets(daphne, path, token, cids))
            finally:
                stopped(daphne)

        return run

    got, base = in_turns(
        runs,
        fresh("config.asgi:application", "/ws/conversations/", bench.token),
        fresh("bench.realtime_asgi:application", "/ws/bare/", None),
    )
    each = [g["per_socket"] for g in got]
    table.add(
        f"{n:,} idle subscribed sockets (one conversation each): daphne's RSS growth a socket "
        "(baseline: the bare Channels consumer)",
        spread(each, kib),
        spread([b["per_socket"] for b in base], kib),
        per_run(each, [b["per_socket"] for b in base]),
        "≤ 64 KiB",
        statistics.median(each) <= 64 * KIB,
        measured=[e / KIB for e in each],
        baseline=[b["per_socket"] / KIB for b in base],
        unit="KiB",
    )
    table.add(
        f"  daphne's CPU while they idle ({IDLE_SECONDS} s; share of one core)",
        spread([g["idle"] for g in got], lambda v: f"{v:.1%}"),
    )


# --- main --------------------------------------------------------------------------------------

BENCHES: list[Callable[[Bench, Table, int], None]] = [
    bench_replay,
    bench_fanout,
    bench_history,
    bench_memory,
]


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f}"


def main() -> None:
    report = Report("realtime")  # takes ``--json PATH`` off the command line
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--quick", action="store_true", help="1 run per figure, smaller sizes")
    parser.add_argument("--only", metavar="NAME", help="only the benches whose name has NAME")
    args = parser.parse_args()
    runs = 1 if args.quick else max(1, args.runs)
    raise_fd_limit()
    import _setup  # noqa: F401  (the benches' environment: DATA_DIR, DEBUG off, …)

    data_dir = Path(os.environ["DATA_DIR"])
    started = time.perf_counter()
    table = Table(report)
    try:
        with tempfile.TemporaryDirectory(prefix="toolcore-bench-") as tmp:
            bench = Bench(Path(tmp), args.quick)
            try:
                layers = ", ".join(layer for layer, _ in bench.layers())
                report.header = (
                    f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; Python "
                    f"{platform.python_version()}; {os.cpu_count()} cores; {_load()} at the "
                    f"start; database {bench.vendor}; channel layers: {layers}; medians of "
                    f"{runs} runs (smallest–largest)."
                )
                print(report.header + "\n")
                print("| figure | measured | baseline | ratio | goal | result |")
                print("|---|---|---|---|---|---|")
                for fn in BENCHES:
                    if args.only is None or args.only in fn.__name__:
                        fn(bench, table, runs)
            finally:
                bench.close()
    finally:
        if data_dir.name.startswith("toolcore-bench-") and data_dir.parent == Path(
            tempfile.gettempdir()
        ):
            shutil.rmtree(data_dir, ignore_errors=True)  # the one bench/_setup.py made
    print()
    for note in table.notes:
        print(note)
    footer = (
        f"{sum(table.verdicts)} of {len(table.verdicts)} goals met; "
        f"{time.perf_counter() - started:.0f} s in all; {_load()} at the end."
    )
    print(footer)
    report.write(" ".join([*table.notes, footer]))


if __name__ == "__main__":
    main()
