"""``/metrics`` (docs/deployment.md, "Metrics"): who may read it, that Prometheus' parser reads
it, and that what it says follows what the services did, read through the real view."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import OperationalError, transaction
from django.test import Client
from django.utils import timezone

from conversations.api.outages import unavailable_response
from conversations.realtime.delivery import HELD_MAX_BYTES, Held
from conversations.services.claims import claim_acquire
from conversations.services.settlement import ClaimGuard, call_settle
from tests.conversations.helpers import assistant_calls, new_conversation, open_turn, settle
from tools.models import PermissionRule, WorkerHeartbeat
from tools.runtime.presence import worker_gone, worker_heartbeat

from .metrics_helpers import parse, scrape, value

OUTSIDE = "203.0.113.9"
TOKEN = "metrics-token-" + "x" * 24


def _ready_calls(user, *calls):
    conversation = new_conversation(user)
    return assistant_calls(conversation, open_turn(conversation), *calls).call_ids


# --- Who may read it ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_loopback_reads_it_whatever_the_host_header(production_hosts):
    response = Client().get("/metrics", HTTP_HOST="10.0.0.5:8001")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")


def test_another_address_is_forbidden_when_no_token_is_set(settings):
    settings.TOOLCORE_METRICS_TOKEN = ""
    response = Client(REMOTE_ADDR=OUTSIDE).get("/metrics")
    assert response.status_code == 403
    assert response.json() == {
        "error": {
            "code": "forbidden",
            "message": "Not allowed from this address (TOOLCORE_METRICS_ALLOW).",
        }
    }


@pytest.mark.django_db
def test_another_address_needs_the_token(settings):
    settings.TOOLCORE_METRICS_TOKEN = TOKEN
    outside = Client(REMOTE_ADDR=OUTSIDE)
    missing = outside.get("/metrics")
    assert missing.status_code == 401 and missing["WWW-Authenticate"] == "Bearer"
    assert missing.json()["error"]["code"] == "unauthorized"
    wrong = outside.get("/metrics", HTTP_AUTHORIZATION="Bearer " + "y" * 38)
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "unauthorized"
    right = outside.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert right.status_code == 200
    parse(right.content.decode())


@pytest.mark.django_db
def test_the_allow_list_is_networks(settings):
    import ipaddress

    settings.TOOLCORE_METRICS_ALLOW = [ipaddress.ip_network("203.0.113.0/24")]
    assert Client(REMOTE_ADDR=OUTSIDE).get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 403


@pytest.mark.django_db
def test_wrong_tokens_lock_the_address_out(settings):
    settings.TOOLCORE_METRICS_TOKEN = TOKEN
    settings.TOOLCORE_LOCKOUT_FAILURES = 2
    outside = Client(REMOTE_ADDR="203.0.113.77", HTTP_AUTHORIZATION="Bearer " + "z" * 30)
    assert outside.get("/metrics").status_code == 401
    locked = outside.get("/metrics")
    assert locked.status_code == 429 and locked.json()["error"]["code"] == "throttled"
    assert int(locked["Retry-After"]) >= 1


# --- What it says ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_calls_by_state_and_ready_gauges_from_the_database(user):
    PermissionRule.objects.create(tool_name="read", decision="allow")
    _ready_calls(
        user, ("notes", {"q": "x"}), ("a-name-the-client-chose", {}), ("read", {"path": "a"})
    )
    samples = scrape()
    assert value(samples, "toolcore_calls", state="ready", tool="host_tool") == 2
    assert value(samples, "toolcore_calls", state="ready", tool="read") == 1
    assert value(samples, "toolcore_ready_calls", waiting_for="host") == 2
    assert value(samples, "toolcore_ready_calls", waiting_for="worker") == 1
    assert value(samples, "toolcore_metrics_database_up") == 1
    text = Client().get("/metrics").content.decode()
    assert "a-name-the-client-chose" not in text and "notes" not in text  # folded to host_tool


def test_tool_labels_are_bounded():
    from conversations.metrics import tool_label

    assert tool_label("bash") == "bash"
    assert tool_label("mcp__time__get_current_time") == "mcp"  # an MCP server's tool
    assert tool_label("mcp__whatever__any") == "mcp"
    assert tool_label("a-name-the-client-chose") == "host_tool"


@pytest.mark.django_db
def test_oldest_ready_age(user):
    from conversations.models import ToolCall

    (call_id,) = _ready_calls(user, ("notes", {"q": "x"}))
    ToolCall.objects.filter(pk=call_id).update(updated_at=timezone.now() - timedelta(minutes=5))
    samples = scrape()
    assert value(samples, "toolcore_ready_oldest_seconds", waiting_for="host") >= 300
    assert value(samples, "toolcore_ready_oldest_seconds", waiting_for="worker") == 0


@pytest.mark.django_db
def test_workers_alive_per_host():
    worker_heartbeat(name="host-a:1:aaaaaa", host="host-a")
    worker_heartbeat(name="host-a:2:bbbbbb", host="host-a")
    worker_heartbeat(name="host-b:3:cccccc", host="host-b")
    WorkerHeartbeat.objects.filter(host="host-b").update(
        heartbeat_at=timezone.now() - timedelta(minutes=5)
    )
    samples = scrape()
    assert value(samples, "toolcore_workers_alive", host="host-a") == 2
    assert ("toolcore_workers_alive", (("host", "host-b"),)) in samples  # dead: shown as 0
    assert value(samples, "toolcore_workers_alive", host="host-b") == 0
    worker_gone(name="host-a:1:aaaaaa")
    assert value(scrape(), "toolcore_workers_alive", host="host-a") == 1


@pytest.mark.django_db(transaction=True)
def test_a_settlement_is_counted_once_it_commits(user):
    call_id, rolled_back_id = _ready_calls(user, ("notes", {"q": "x"}), ("notes", {"q": "y"}))
    before = scrape()
    settle(call_id, "failed")
    claim = claim_acquire(call_id=rolled_back_id, worker="w")
    with pytest.raises(RuntimeError), transaction.atomic():
        call_settle(
            call_id=rolled_back_id,
            outcome="completed",
            guard=ClaimGuard(claim.token, claim.generation),
            result={"content": []},
            text="",
        )
        raise RuntimeError("the caller's transaction rolls back")
    after = scrape()

    def delta(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("toolcore_settlements_total", outcome="failed", tool="host_tool") == 1
    assert delta("toolcore_settlements_total", outcome="completed", tool="host_tool") == 0
    assert delta("toolcore_settle_seconds_count", tool="host_tool") == 1
    assert delta("toolcore_pickup_seconds_count", tool="host_tool") == 2  # both claims committed
    assert delta("toolcore_calls", state="running", tool="host_tool") == 1  # the one rolled back


@pytest.mark.django_db(transaction=True)
def test_a_workers_batch_claim_observes_pickup(user):
    from conversations.services.claims import claim_acquire_batch

    PermissionRule.objects.create(tool_name="read", decision="allow")
    _ready_calls(user, ("read", {"path": "a"}), ("read", {"path": "b"}))
    before = value(scrape(), "toolcore_pickup_seconds_count", tool="read")
    claims = claim_acquire_batch(tool_names=["read"], worker="w", limit=5, announce=False)
    assert len(claims) == 2
    assert value(scrape(), "toolcore_pickup_seconds_count", tool="read") - before == 2


@pytest.mark.django_db
def test_http_answers_by_status_class():
    client = Client()
    before = scrape(client)
    client.get("/healthz")
    client.get("/api/v1/conversations")  # no credentials: 401
    client.get("/api/v1/conversations")
    after = scrape(client)
    assert (
        value(after, "toolcore_http_responses_total", status_class="2xx")
        - value(before, "toolcore_http_responses_total", status_class="2xx")
        == 2
    )  # /healthz and the first scrape's own answer
    assert (
        value(after, "toolcore_http_responses_total", status_class="4xx")
        - value(before, "toolcore_http_responses_total", status_class="4xx")
        == 2
    )


@pytest.mark.django_db
def test_outages_and_dropped_live_messages_are_counted():
    before = scrape()
    unavailable_response(None, OperationalError("connection refused"))
    held = Held()
    for call in range(3):  # three frames of half the budget: the oldest goes
        frame = {"type": "tool.updated", "update": {"outputDelta": "x" * (HELD_MAX_BYTES // 2)}}
        held.put(("tool", "c", call), frame)
    after = scrape()
    outages = ("toolcore_outages_total", {"kind": "database", "where": "http"})
    assert value(after, outages[0], **outages[1]) - value(before, outages[0], **outages[1]) == 1
    dropped = ("toolcore_live_messages_dropped_total", {"reason": "slow_socket"})
    assert value(after, dropped[0], **dropped[1]) - value(before, dropped[0], **dropped[1]) == (
        held.dropped
    )
    assert held.dropped >= 1
