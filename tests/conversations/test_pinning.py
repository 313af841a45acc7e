"""Workspaces pinned to a host: the claim pins a conversation to its claimer's host and passes
over the calls of conversations pinned elsewhere; recovery releases the conversations of a host
gone longer than ``TOOLCORE_HOST_GRACE`` (docs/deployment.md, "Pinned workspaces"). On both
databases: the claim's pick is vendor SQL (``SKIP LOCKED`` on PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from conversations.errors import HostUnavailable
from conversations.models import Conversation, ToolCall
from conversations.services.claims import claim_acquire_batch
from conversations.services.recovery import recover_all
from conversations.sql.common import PINNED_HOSTS_SQL, pinned_hosts
from tools.models import Launch, WorkerHeartbeat
from tools.runtime.host_pages import page_asked
from tools.runtime.launches.services import launch_create, launches_waiting
from tools.runtime.presence import hosts_gone, worker_gone, worker_heartbeat

from .helpers import assistant_calls, new_conversation, open_turn

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _pinned(settings):
    settings.TOOLCORE_SHARED_WORKSPACES = False
    settings.TOOLCORE_HOST_NAME = "sweeper"
    settings.TOOLCORE_HOST_GRACE = 60


def _ready(conversation, *names):
    turn_id = open_turn(conversation)
    return assistant_calls(conversation, turn_id, *[(n, {"i": i}) for i, n in enumerate(names)])


def _claim(host, limit=10):
    return claim_acquire_batch(tool_names=["notes"], worker=f"{host}:1", limit=limit, host=host)


def test_the_first_claim_pins_the_conversation_and_other_hosts_pass_its_calls_over(user):
    conversation = new_conversation(user)
    first, second = _ready(conversation, "notes", "notes").call_ids
    (claim,) = _claim("a", limit=1)
    assert str(claim.call_id) == str(first)
    assert Conversation.objects.get(pk=conversation.pk).host == "a"
    assert _claim("b") == []  # pinned to a: b never takes it
    assert ToolCall.objects.get(pk=second).state == "ready"
    (again,) = _claim("a")
    assert str(again.call_id) == str(second)


def test_each_host_takes_the_conversations_pinned_to_it_or_to_none(user):
    at_a, at_b, free = (new_conversation(user) for _ in range(3))
    Conversation.objects.filter(pk=at_a.pk).update(host="a")
    Conversation.objects.filter(pk=at_b.pk).update(host="b")
    calls = {c.pk: _ready(c, "notes").call_ids[0] for c in (at_a, at_b, free)}
    taken_by_b = {str(c.call_id) for c in _claim("b")}
    assert taken_by_b == {str(calls[at_b.pk]), str(calls[free.pk])}
    assert Conversation.objects.get(pk=free.pk).host == "b"
    assert [str(c.call_id) for c in _claim("a")] == [str(calls[at_a.pk])]


def test_without_a_host_nothing_is_pinned_and_every_call_is_taken(user):
    """Shared workspaces (and the host tool port): the claim of old."""
    pinned = new_conversation(user)
    Conversation.objects.filter(pk=pinned.pk).update(host="elsewhere")
    free = new_conversation(user)
    _ready(pinned, "notes")
    _ready(free, "notes")
    claims = claim_acquire_batch(tool_names=["notes"], worker="w", limit=10)
    assert len(claims) == 2
    assert Conversation.objects.get(pk=free.pk).host == ""


def test_the_pinned_hosts_are_read_one_index_probe_a_host(user):
    for host in ("b", "a", "b", "", "c", "a", "b"):
        conversation = new_conversation(user)
        Conversation.objects.filter(pk=conversation.pk).update(host=host)
    assert pinned_hosts() == ["a", "b", "c"]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")  # a tiny table: show it is usable
            cursor.execute(f"EXPLAIN {PINNED_HOSTS_SQL}")
        else:
            cursor.execute(f"EXPLAIN QUERY PLAN {PINNED_HOSTS_SQL}")
        plan = " ".join(str(row) for row in cursor.fetchall())
    assert "conv_pinned_host" in plan, plan


def _heartbeat(host, age_seconds):
    worker_heartbeat(name=f"{host}:1", host=host)
    WorkerHeartbeat.objects.filter(name=f"{host}:1").update(
        heartbeat_at=timezone.now() - timedelta(seconds=age_seconds)
    )


def test_recovery_releases_a_host_gone_longer_than_the_grace_and_its_next_call_names_it(user):
    gone, alive = new_conversation(user), new_conversation(user)
    Conversation.objects.filter(pk=gone.pk).update(host="b")
    Conversation.objects.filter(pk=alive.pk).update(host="a")
    _heartbeat("b", age_seconds=61)
    _heartbeat("a", age_seconds=5)
    assert hosts_gone() == ["b"]
    waiting = _ready(gone, "notes").call_ids[0]
    actions = [str(a) for a in recover_all()]
    assert any(
        a.startswith("host b: gone for over 60 s: 1 conversation(s) released") for a in actions
    )
    row = Conversation.objects.get(pk=gone.pk)
    assert (row.host, row.lost_host) == ("", "b")
    assert Conversation.objects.get(pk=alive.pk).host == "a"
    (claim,) = _claim("a")
    assert str(claim.call_id) == str(waiting)
    assert claim.taken.lost_host == "b"  # the worker settles it failed, naming b
    row = Conversation.objects.get(pk=gone.pk)
    assert (row.host, row.lost_host) == ("a", "")  # the next ones run on a


def test_a_host_within_its_grace_and_the_sweepers_own_host_are_never_released(user, settings):
    within, own = new_conversation(user), new_conversation(user)
    Conversation.objects.filter(pk=within.pk).update(host="b")
    Conversation.objects.filter(pk=own.pk).update(host="sweeper")  # no heartbeat at all
    _heartbeat("b", age_seconds=59)
    assert hosts_gone() == []
    recover_all()
    assert set(Conversation.objects.values_list("host", flat=True)) == {"b", "sweeper"}
    settings.TOOLCORE_SHARED_WORKSPACES = True
    _heartbeat("b", age_seconds=600)
    assert hosts_gone() == []  # shared workspaces: nothing is pinned, nothing released


def test_a_host_whose_workers_stopped_in_order_keeps_its_conversations_for_the_grace(user):
    """A deploy restarts every worker of b in order: b's stop is its last sign of life, so no
    sweep releases its conversations before the grace has run from it."""
    pinned = new_conversation(user)
    Conversation.objects.filter(pk=pinned.pk).update(host="b")
    worker_heartbeat(name="b:1", host="b")
    worker_gone(name="b:1")
    row = WorkerHeartbeat.objects.get(name="b:1")
    assert row.stopped_at is not None and row.channel == ""
    assert hosts_gone() == []
    recover_all()
    assert Conversation.objects.get(pk=pinned.pk).host == "b"
    long_ago = timezone.now() - timedelta(seconds=61)  # b never came back
    WorkerHeartbeat.objects.filter(name="b:1").update(heartbeat_at=long_ago, stopped_at=long_ago)
    assert hosts_gone() == ["b"]
    recover_all()
    row = Conversation.objects.get(pk=pinned.pk)
    assert (row.host, row.lost_host) == ("", "b")


def test_a_worker_that_starts_again_under_its_name_is_running_again(user):
    worker_heartbeat(name="b:1", host="b", channel="chan-1")
    worker_gone(name="b:1")
    worker_heartbeat(name="b:1", host="b", channel="chan-2")
    row = WorkerHeartbeat.objects.get(name="b:1")
    assert (row.stopped_at, row.channel) == (None, "chan-2")


def test_a_worker_stopped_in_order_is_not_asked_for_log_pages():
    worker_heartbeat(name="b:1", host="b", channel="chan-1")
    worker_gone(name="b:1")
    with pytest.raises(HostUnavailable, match="No worker of host 'b'"):
        page_asked("b", {"kind": "launch"})


def test_a_launch_in_a_pinned_workspace_waits_for_its_host_and_is_lost_with_it(user):
    conversation = new_conversation(user)
    Conversation.objects.filter(pk=conversation.pk).update(host="b")
    user.user_permissions.add(*_run_commands())
    launch = launch_create(owner=user, name="dev", command="true", cwd=conversation.workspace)
    anywhere = launch_create(owner=user, name="root", command="true")
    assert (launch.workspace_host, anywhere.workspace_host) == ("b", "")
    assert set(launches_waiting("a")) == {anywhere.pk}
    assert set(launches_waiting("b")) == {launch.pk, anywhere.pk}
    _heartbeat("b", age_seconds=61)
    recover_all()
    assert Launch.objects.get(pk=launch.pk).status == "lost"
    assert Launch.objects.get(pk=anywhere.pk).status == "running"


def _run_commands():
    from django.contrib.auth.models import Permission

    return Permission.objects.filter(codename="run_commands")
