"""Recovery: expired claims, attempts, recorded resolutions, and activities left unfinished."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from conversations.models import ConversationEvent, ExecutionClaim, ToolActivity, ToolCall
from conversations.services import recovery
from conversations.services.claims import claim_acquire
from conversations.services.recovery import recover_all, recover_call
from conversations.services.settlement import ClaimGuard, call_settle
from conversations.storage import resolve_workspace

from .helpers import assistant_calls, expire_claim, new_conversation, open_turn

pytestmark = pytest.mark.django_db


def _running(user, tool_name: str, arguments: dict):
    """A call of ``tool_name`` claimed by a worker whose lease has run out."""
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, (tool_name, arguments)).call_ids
    claim = claim_acquire(call_id=call_id, worker="w-dead")
    assert claim is not None
    expire_claim(call_id)
    return call_id, claim


def _response(call_id) -> dict:
    return ConversationEvent.objects.get(tool_call_id=call_id).payload


def test_a_replay_safe_call_goes_back_to_ready_with_the_next_attempt(user):
    call_id, claim = _running(user, "ls", {})
    action = recover_call(call_id=call_id)
    assert str(action) == f"{call_id}: back to ready (attempt 2)"
    call = ToolCall.objects.get(pk=call_id)
    assert (call.state, call.attempt, call.generation) == ("ready", 2, claim.generation)
    assert not ExecutionClaim.objects.filter(call_id=call_id).exists()
    activity = ToolActivity.objects.get(tool_call_id=call_id)
    assert activity.state_json["status"] == "pending"


def test_a_live_claim_is_left_alone(user):
    call_id, _ = _running(user, "ls", {})
    ExecutionClaim.objects.filter(call_id=call_id).update(
        expires_at=timezone.now() + timedelta(seconds=30)
    )
    assert recover_call(call_id=call_id) is None
    assert ToolCall.objects.get(pk=call_id).state == "running"


def test_after_max_attempts_a_replay_safe_call_settles_failed(user, settings):
    settings.TOOLCORE_MAX_ATTEMPTS = 2
    call_id, _ = _running(user, "ls", {})
    assert str(recover_call(call_id=call_id)).endswith("back to ready (attempt 2)")
    claim_acquire(call_id=call_id, worker="w-dead-again")
    expire_claim(call_id)
    action = recover_call(call_id=call_id)
    assert str(action) == f"{call_id}: settled failed (attempts exhausted)"
    payload = _response(call_id)
    assert payload["outcome"] == "failed"
    assert payload["attempts"] == 2
    assert "Gave up after 2 attempts" in payload["modelContent"][0]["text"]


def test_a_call_that_is_not_replay_safe_settles_indeterminate(user):
    call_id, _ = _running(user, "notes_lookup", {"q": "x"})  # a host tool: never replayed
    action = recover_call(call_id=call_id)
    assert str(action) == f"{call_id}: settled indeterminate (claim expired)"
    assert _response(call_id)["outcome"] == "indeterminate"


def test_the_holder_of_an_expired_claim_loses_to_recovery(user):
    call_id, claim = _running(user, "notes_lookup", {"q": "x"})
    recover_call(call_id=call_id)
    from conversations.errors import StaleClaim

    with pytest.raises(StaleClaim):
        call_settle(
            call_id=call_id,
            outcome="completed",
            guard=ClaimGuard(claim.token, claim.generation),
            text="late",
        )
    assert _response(call_id)["outcome"] == "indeterminate"


def test_an_unfinished_activity_of_a_settled_call_takes_its_responses_outcome(user):
    call_id, claim = _running(user, "notes_lookup", {"q": "x"})
    call_settle(
        call_id=call_id,
        outcome="completed",
        guard=ClaimGuard(claim.token, claim.generation),
        text="done",
    )
    # A crash after the commit and before the activity's final state (written by an older
    # release, or by hand): the sweep finishes it from the response.
    ToolActivity.objects.filter(tool_call_id=call_id).update(
        is_final=False, state_json={"status": "in_progress", "toolCallId": str(call_id)}
    )
    actions = [a for a in recover_all() if a.tool_call_id == str(call_id)]
    assert [a.action for a in actions] == ["activity finished (completed)"]
    activity = ToolActivity.objects.get(tool_call_id=call_id)
    assert activity.is_final and activity.state_json["status"] == "completed"
    assert recover_all() == []


def test_an_unfinished_activity_without_call_or_response_reads_cancelled(user):
    call_id, _ = _running(user, "notes_lookup", {"q": "x"})
    ToolCall.objects.filter(pk=call_id).delete()  # gone without a response (a lost row)
    actions = [a for a in recover_all() if a.tool_call_id == str(call_id)]
    assert [a.action for a in actions] == ["activity finished (cancelled)"]
    assert ToolActivity.objects.get(tool_call_id=call_id).state_json["status"] == "cancelled"


def test_the_group_a_dead_holder_left_is_recorded_for_its_host(user):
    from conversations.services.claims import claim_process_record
    from tools.models import LeftProcess

    call_id, claim = _running(user, "notes_lookup", {"q": "x"})
    claim_process_record(
        call_id=call_id,
        token=claim.token,
        generation=claim.generation,
        host="host-b",
        pgid=4321,
        start=98765,
    )
    recover_call(call_id=call_id)
    (left,) = LeftProcess.objects.all()
    assert (left.host, left.pgid, left.process_start) == ("host-b", 4321, 98765)
    assert left.label == f"call {call_id}"


def test_the_runtime_takes_part_in_recovery_deletes_and_purges_in_order():
    """The core never imports the runtime: the runtime registers at start what recovery,
    deleting a conversation and ``purge`` ask of it. Recovery sweeps the lost async runs
    before the lost launches, as it always did, and releases the hosts gone last."""
    from conversations.services import participants
    from tools.runtime.async_runs.services import conversation_runs_kill

    assert [p.noun for p in participants.recovery_participants()] == ["async run", "launch", "host"]
    assert participants.delete_participants() == [conversation_runs_kill]
    assert [p.noun for p in participants.purge_participants()] == ["ended launch(es)"]


# --- each row on its own -------------------------------------------------------------------------


def _left_supervising(user, tool_name: str, arguments: dict):
    """A call a crash left ``supervising`` (its message committed, its supervision not)."""
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, (tool_name, arguments)).call_ids
    ToolCall.objects.filter(pk=call_id).update(state="supervising")
    return conversation, call_id


def test_a_path_that_no_longer_resolves_fails_its_call_and_the_sweep_goes_on(user, other_user):
    """One user's ``ln -s loop loop`` under a call left supervising, and another user's call
    whose worker died: the first settles failed naming the path, the second indeterminate."""
    conversation, broken = _left_supervising(user, "read", {"path": "loop"})
    workspace = resolve_workspace(user.pk, conversation.workspace)
    workspace.mkdir(parents=True)
    (workspace / "loop").symlink_to("loop")
    theirs, _ = _running(other_user, "notes_lookup", {"q": "x"})
    actions = {a.tool_call_id: a.action for a in recover_all()}
    assert actions[str(broken)] == "supervised (failed)"
    assert _response(broken)["supervision"]["reason"] == (
        "Path refused: loop runs into a symlink loop."
    )
    assert actions[str(theirs)] == "settled indeterminate (claim expired)"
    assert _response(theirs)["outcome"] == "indeterminate"


def test_an_unexpected_error_on_one_row_never_stops_the_others(user, other_user, monkeypatch):
    """A broken row of each kind the sweep meets. No real fault breaks a row this way on
    demand, so the errors are raised from the recovery functions of those rows (fault
    injection): a supervising call settles failed with the error's message, a running one is
    left for the next sweep; everything else is recovered as usual."""
    _, unsupervised = _left_supervising(user, "read", {"path": "a.txt"})
    stuck, _ = _running(user, "notes_lookup", {"q": "stuck"})
    theirs, _ = _running(other_user, "notes_lookup", {"q": "x"})
    supervise, recover_running = recovery.call_supervise, recovery._recover_running

    def broken_supervise(*, call_id):
        if str(call_id) == str(unsupervised):
            raise ValueError("a broken row")
        return supervise(call_id=call_id)

    def broken_running(call):
        if call.pk == stuck:
            raise KeyError("lost")
        return recover_running(call)

    monkeypatch.setattr(recovery, "call_supervise", broken_supervise)
    monkeypatch.setattr(recovery, "_recover_running", broken_running)
    actions = {a.tool_call_id: a.action for a in recover_all()}
    assert actions[str(unsupervised)] == "settled failed (supervision raised)"
    assert _response(unsupervised)["supervision"]["reason"] == (
        "The call could not be supervised (ValueError: a broken row)."
    )
    assert actions[str(stuck)] == "left for the next sweep (KeyError: 'lost')"
    assert ToolCall.objects.get(pk=stuck).state == "running"
    assert _response(theirs)["outcome"] == "indeterminate"


def test_manage_py_recover_prints_what_it_did_past_a_broken_row(user, other_user):
    conversation, broken = _left_supervising(user, "ls", {"path": "loop/x"})
    workspace = resolve_workspace(user.pk, conversation.workspace)
    workspace.mkdir(parents=True)
    (workspace / "loop").symlink_to("loop")
    theirs, _ = _running(other_user, "notes_lookup", {"q": "x"})
    out = io.StringIO()
    call_command("recover", stdout=out)
    printed = out.getvalue().splitlines()
    assert f"{broken}: supervised (failed)" in printed
    assert f"{theirs}: settled indeterminate (claim expired)" in printed
    assert printed[-1] == "Recovery done: 2 action(s)."
