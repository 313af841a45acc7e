"""The worker: picks up ready calls when they commit, runs handlers, renews leases, settles under
its claim, stops a run whose claim was taken. Real database, real threads; the handlers here
stand for the tools (each test says what it stands for)."""

from __future__ import annotations

import asyncio
import io
import threading
import time

import pytest
from django.db import OperationalError
from django.utils import timezone

from conversations.models import ExecutionClaim, ToolActivity, ToolCall
from conversations.services.cancel import call_cancel
from tests.conversations.helpers import assistant_calls, new_conversation, open_turn
from tools.models import PermissionRule
from tools.runtime.base import CallContext, HandlerResult, ToolError
from tools.runtime.registry import HANDLERS

from .worker_helpers import response_of, running_worker, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _ready(user, *calls):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    return assistant_calls(conversation, turn_id, *calls).call_ids


async def _listing(ctx: CallContext) -> HandlerResult:
    """Stands for ``ls``: answers at once."""
    return HandlerResult(items=["a.txt", "b/"], result={"entries": ["a.txt", "b/"]})


def test_a_ready_call_is_picked_up_on_commit_run_and_settled(user):
    with running_worker(handlers={"ls": _listing}, poll_seconds=60) as worker:
        started = time.monotonic()
        (call_id,) = _ready(user, ("ls", {}))
        payload = wait_for(lambda: response_of(call_id), timeout=30)
        # Woken by the commit, not by the 60 s poll (the bound is room for a loaded machine).
        assert time.monotonic() - started < 30
    assert payload["outcome"] == "completed"
    assert "a.txt" in payload["modelContent"][0]["text"]
    activity = ToolActivity.objects.get(tool_call_id=call_id)
    assert activity.is_final and activity.state_json["status"] == "completed"
    assert not ToolCall.objects.filter(pk=call_id).exists()
    assert worker.name.count(":") == 2


def test_a_run_is_in_progress_once_underway_and_a_quick_one_still_records_its_start(user):
    """The claim is published after the run starts: a run going on past ANNOUNCE_AFTER shows
    ``in_progress`` while it runs; one that ends sooner goes from ``pending`` to its end, which
    carries its ``startedAt``. Either way the activity ends with both times."""
    release = threading.Event()

    async def slow(ctx: CallContext) -> HandlerResult:  # stands for a long ``grep``
        await asyncio.to_thread(release.wait, 10)
        return HandlerResult(items=["done"], result={})

    with running_worker(handlers={"ls": _listing, "grep": slow}, poll_seconds=60):
        quick, long = _ready(user, ("ls", {}), ("grep", {"pattern": "x"}))
        wait_for(lambda: response_of(quick))
        wait_for(
            lambda: (
                ToolActivity.objects.get(tool_call_id=long).state_json["status"] == "in_progress"
            )
        )
        release.set()
        wait_for(lambda: response_of(long))
    for call_id in (quick, long):
        state = ToolActivity.objects.get(tool_call_id=call_id).state_json
        assert state["status"] == "completed"
        assert state["startedAt"] <= state["finishedAt"]


async def _refusing(ctx: CallContext) -> HandlerResult:
    """Stands for ``read`` of a path outside the workspace."""
    raise ToolError("The path /etc/passwd is outside the workspace.", field="path")


async def _broken(ctx: CallContext) -> HandlerResult:
    raise ValueError("a bug")


@pytest.mark.parametrize(
    ("handler", "reason"),
    [
        (_refusing, "The path /etc/passwd is outside the workspace."),
        (_broken, "The tool failed unexpectedly (ValueError)."),
    ],
)
def test_a_handler_that_fails_settles_failed_with_its_reason(user, handler, reason):
    with running_worker(handlers={"read": handler}):
        (call_id,) = _ready(user, ("read", {"path": "x"}))
        payload = wait_for(lambda: response_of(call_id))
    assert payload["outcome"] == "failed"
    assert reason in payload["modelContent"][0]["text"]


def test_cancelling_a_running_call_stops_its_handler_at_once(user):
    """Stands for ``bash``: the handler runs until stopped; the cancel settles the call and the
    worker stops the run (the handler sees its cancellation: there it kills its process)."""
    entered, stopped = threading.Event(), threading.Event()

    async def endless(ctx: CallContext) -> HandlerResult:
        entered.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            stopped.set()
            raise
        raise AssertionError("never")

    with running_worker(handlers={"bash": endless}):
        PermissionRule.objects.create(tool_name="bash", pattern="", decision="allow")
        (call_id,) = _ready(user, ("bash", {"command": "sleep 1h"}))
        assert entered.wait(30)
        assert ToolCall.objects.get(pk=call_id).state == "running"
        answer = call_cancel(call_id=call_id)
        assert answer == {"outcome": "indeterminate", "alreadySettled": False}
        # At once: the handler would sleep an hour otherwise (the bound only catches that).
        assert stopped.wait(30), "the run was not stopped"
    assert response_of(call_id)["outcome"] == "indeterminate"


def test_a_long_call_keeps_its_claim_by_renewing_the_lease(user, settings):
    settings.TOOLCORE_CLAIM_LEASE = 1  # renewed every 1/3 s
    renewed = []

    async def slow(ctx: CallContext) -> HandlerResult:
        first = await ctx.sync(lambda: ExecutionClaim.objects.get(call_id=ctx.call_id).expires_at)
        await asyncio.sleep(2.5)  # more than two leases
        last = await ctx.sync(lambda: ExecutionClaim.objects.get(call_id=ctx.call_id).expires_at)
        renewed.append(last > first)
        return HandlerResult(text="done")

    with running_worker(handlers={"grep": slow}):
        (call_id,) = _ready(user, ("grep", {"pattern": "x"}))
        payload = wait_for(lambda: response_of(call_id), timeout=30)
    assert renewed == [True]
    assert payload["outcome"] == "completed"  # not recovered meanwhile


def test_a_worker_runs_at_most_its_concurrency_at_once(user):
    running, peak = [0], [0]
    lock = threading.Lock()
    both = threading.Event()  # two ran at once

    async def measured(ctx: CallContext) -> HandlerResult:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            if running[0] == 2:
                both.set()
        # A worker of concurrency 2 runs two at once: the first two wait for each other (the
        # deadline only bounds one that never does), however late a loaded machine starts one.
        await asyncio.to_thread(both.wait, 30)
        # Room for a third, were it allowed: a slow machine can only make "at most" easier.
        await asyncio.sleep(0.3)
        with lock:
            running[0] -= 1
        return HandlerResult(text="ok")

    with running_worker(handlers={"find": measured}, concurrency=2):
        call_ids = _ready(user, *[("find", {"pattern": f"*{n}"}) for n in range(5)])
        for call_id in call_ids:
            wait_for(lambda call_id=call_id: response_of(call_id))
    assert peak[0] == 2
    assert all(response_of(c)["outcome"] == "completed" for c in call_ids)


def test_a_call_made_ready_while_the_worker_was_down_is_found_at_start(user):
    (call_id,) = _ready(user, ("ls", {}))
    assert ToolCall.objects.get(pk=call_id).state == "ready"
    with running_worker(handlers={"ls": _listing}, poll_seconds=60):
        assert wait_for(lambda: response_of(call_id))["outcome"] == "completed"


def test_ask_user_left_ready_is_run_by_a_worker(user, monkeypatch):
    from conversations.services import _in_transaction

    monkeypatch.setattr(_in_transaction, "call_ready_run", lambda **kwargs: False)  # "crashed"
    questions = [{"id": "go", "question": "Proceed?"}]
    (call_id,) = _ready(user, ("ask_user", {"questions": questions}))
    assert ToolCall.objects.get(pk=call_id).state == "ready"
    with running_worker(handlers=HANDLERS):
        call = wait_for(lambda: ToolCall.objects.filter(pk=call_id, state="awaiting_input").first())
    assert call.interaction == {"kind": "input", "request": {"questions": questions}}
    assert not ExecutionClaim.objects.filter(call_id=call_id).exists()
    assert response_of(call_id) is None  # it waits for the person


def test_an_expired_claim_is_swept_by_a_starting_worker(user):
    """A worker died holding a claim: the next worker's sweep at start takes the call back
    (``ls`` is read-only, so it runs again) and runs it."""
    from conversations.services.claims import claim_acquire

    (call_id,) = _ready(user, ("ls", {}))
    claim_acquire(call_id=call_id, worker="dead")
    ExecutionClaim.objects.filter(call_id=call_id).update(expires_at=timezone.now())
    with running_worker(handlers={"ls": _listing}):
        payload = wait_for(lambda: response_of(call_id))
    assert payload["outcome"] == "completed" and payload["attempts"] == 2


def _failing_once(real, failures: list):
    """``real``, raising a real ``OperationalError`` the first time (fault injection: a
    connection cut at that precise step cannot be produced on demand on every database)."""

    def once(*args, **kwargs):
        failures.append(time.monotonic())
        if len(failures) == 1:
            raise OperationalError("terminating connection due to administrator command")
        return real(*args, **kwargs)

    return once


def test_a_failed_pickup_is_tried_again_at_once_not_after_the_poll(user, monkeypatch):
    from tools.runtime import worker as worker_module

    tries: list[float] = []
    monkeypatch.setattr(
        worker_module,
        "claim_acquire_batch",
        _failing_once(worker_module.claim_acquire_batch, tries),
    )
    (call_id,) = _ready(user, ("ls", {}))
    with running_worker(handlers={"ls": _listing}, poll_seconds=60):
        payload = wait_for(lambda: response_of(call_id), timeout=45)
    assert payload["outcome"] == "completed"
    # Tried again at once, not after the 60 s poll (the bound is room for a loaded machine).
    assert tries[1] - tries[0] < 30


def test_a_failed_sweep_is_tried_again_at_once_not_after_the_lease(monkeypatch, settings):
    from tools.runtime import worker as worker_module

    settings.TOOLCORE_CLAIM_LEASE = 30
    sweeps: list[float] = []
    monkeypatch.setattr(
        worker_module, "recover_all", _failing_once(worker_module.recover_all, sweeps)
    )
    with running_worker(handlers={"ls": _listing}, poll_seconds=60):
        wait_for(lambda: len(sweeps) >= 2, timeout=25)
    # Tried again at once, not after the 30 s lease (the bound is room for a loaded machine).
    assert sweeps[1] - sweeps[0] < 15


def test_the_demo_calls_run_in_a_worker(settings):
    """What `make run` shows: the worker runs the demo's path tools; bash waits for approval."""
    from django.core.management import call_command

    from conversations.models import Conversation

    settings.DEBUG = True
    call_command("seed_demo", "--no-token", stdout=io.StringIO())
    conversation = Conversation.objects.get(owner__username="demo")
    with running_worker(handlers=HANDLERS):
        wait_for(lambda: ToolCall.objects.filter(conversation=conversation).count() == 1)
    from conversations.models import ConversationEvent

    texts = {
        e.payload["toolName"]: e.payload["modelContent"][0]["text"]
        for e in ConversationEvent.objects.filter(
            conversation=conversation, type="tool_call_response"
        )
    }
    assert set(texts) == {"notes_lookup", "ls", "read", "grep"}
    assert "notes.md" in texts["ls"] and "src/" in texts["ls"]
    assert "1\t# Demo project" in texts["read"]
    assert "notes.md:5:TODO: add tests" in texts["grep"]
    assert ToolCall.objects.get(conversation=conversation).state == "awaiting_approval"
