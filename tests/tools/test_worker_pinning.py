"""A worker with pinned workspaces (docs/deployment.md, "Pinned workspaces"): it runs the calls
of its host's conversations and pins the new ones, leaves those of other hosts, and settles the
first call of a conversation whose host is gone ``failed``, naming the lost workspace."""

from __future__ import annotations

import pytest

from conversations.models import Conversation, ToolCall
from tests.conversations.helpers import assistant_calls, new_conversation, open_turn
from tools.models import WorkerHeartbeat
from tools.runtime.base import CallContext, HandlerResult
from tools.runtime.presence import hosts_gone, worker_heartbeat

from .worker_helpers import response_of, running_worker, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _pinned(settings):
    settings.TOOLCORE_SHARED_WORKSPACES = False
    settings.TOOLCORE_HOST_NAME = "here"


async def _listing(ctx: CallContext) -> HandlerResult:
    return HandlerResult(items=["a.txt"], result={"entries": ["a.txt"]})


def _ready(conversation):
    (call_id,) = assistant_calls(conversation, open_turn(conversation), ("ls", {})).call_ids
    return call_id


def test_a_worker_pins_new_conversations_runs_its_own_and_leaves_other_hosts(user):
    fresh, elsewhere = new_conversation(user), new_conversation(user)
    Conversation.objects.filter(pk=elsewhere.pk).update(host="there")
    worker_heartbeat(name="there:1", host="there")  # alive: never released
    with running_worker(handlers={"ls": _listing}, poll_seconds=60):
        mine, theirs = _ready(fresh), _ready(elsewhere)
        assert wait_for(lambda: response_of(mine))["outcome"] == "completed"
    assert Conversation.objects.get(pk=fresh.pk).host == "here"
    assert ToolCall.objects.get(pk=theirs).state == "ready"  # waits for its host


def test_the_first_call_after_its_host_was_released_fails_naming_the_lost_workspace(user):
    released = new_conversation(user)
    Conversation.objects.filter(pk=released.pk).update(lost_host="gone-host")
    with running_worker(handlers={"ls": _listing}, poll_seconds=60):
        first = _ready(released)
        payload = wait_for(lambda: response_of(first))
        assert payload["outcome"] == "failed"
        reason = payload["modelContent"][0]["text"]
        assert "'gone-host'" in reason and "files are lost" in reason and "'here'" in reason
        second = _ready(released)  # the turn of the first ended with it
        assert wait_for(lambda: response_of(second))["outcome"] == "completed"
    row = Conversation.objects.get(pk=released.pk)
    assert (row.host, row.lost_host) == ("here", "")


def test_a_worker_stopped_in_order_leaves_its_host_alive_for_the_grace(user, settings):
    """A restart in order (a deploy) is not a lost host: the stopped worker's row stays, marked
    stopped, and another host's sweep finds its host within the grace."""
    settings.TOOLCORE_HOST_GRACE = 60
    conversation = new_conversation(user)
    with running_worker(handlers={"ls": _listing}, poll_seconds=60) as worker:
        call_id = _ready(conversation)
        assert wait_for(lambda: response_of(call_id))["outcome"] == "completed"
    assert Conversation.objects.get(pk=conversation.pk).host == "here"
    row = WorkerHeartbeat.objects.get(name=worker.name)
    assert row.host == "here" and row.stopped_at is not None
    settings.TOOLCORE_HOST_NAME = "another"  # the sweep of another host
    assert hosts_gone() == []


def test_a_worker_is_alive_before_its_first_claim_pins_a_conversation(user, monkeypatch):
    """Its first heartbeat is written before it claims: a conversation it pins at once is
    never pinned to a host with no sign of life, which another host's sweep would release."""
    from tools.runtime import worker as worker_module

    seen = []
    claim = worker_module.claim_acquire_batch

    def claim_seeing_the_heartbeat(**kwargs):
        seen.append(WorkerHeartbeat.objects.filter(name=kwargs["worker"]).exists())
        return claim(**kwargs)

    monkeypatch.setattr(worker_module, "claim_acquire_batch", claim_seeing_the_heartbeat)
    call_id = _ready(new_conversation(user))
    with running_worker(handlers={"ls": _listing}, poll_seconds=60):
        assert wait_for(lambda: response_of(call_id))["outcome"] == "completed"
    assert seen and seen[0] is True
