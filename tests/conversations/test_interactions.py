"""Resolving approvals and questions: idempotent by requestId, conflicts named, survives restarts."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from conversations.errors import Forbidden, NotAwaiting, ResolutionConflict, ValidationFailed
from conversations.fields import dumps
from conversations.models import ConversationEvent, ToolActivity, ToolCall
from conversations.services.interactions import call_resolve
from conversations.services.recovery import recover_call
from tools.models import PermissionRule

from .helpers import assistant_calls, new_conversation, open_turn

pytestmark = pytest.mark.django_db

ALLOW = {"kind": "approval", "decision": "allow", "persist": False}
DENY = {"kind": "approval", "decision": "deny", "persist": False}


@pytest.fixture
def runner(user):
    user.user_permissions.add(Permission.objects.get(codename="run_commands"))
    return type(user).objects.get(pk=user.pk)  # fresh permission cache


def _bash(user, command="ls"):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("bash", {"command": command})).call_ids
    return conversation, call_id


def test_approve_moves_to_ready_and_is_idempotent(runner):
    _, call_id = _bash(runner)
    first = call_resolve(call_id=call_id, user=runner, request_id="r1", resolution=ALLOW)
    call = ToolCall.objects.get(pk=call_id)
    assert call.state == "ready" and call.interaction is None
    assert call.resolved_interaction["kind"] == "approval"
    assert first == {
        "toolCallId": str(call_id),
        "requestId": "r1",
        "resolution": ALLOW,
        "resolvedBy": runner.username,
    }
    assert call_resolve(call_id=call_id, user=runner, request_id="r1", resolution=ALLOW) == first
    with pytest.raises(ResolutionConflict) as conflict:
        call_resolve(call_id=call_id, user=runner, request_id="r2", resolution=DENY)
    assert (conflict.value.recorded_request, conflict.value.recorded) == ("r1", ALLOW)
    assert conflict.value.body() == {
        "error": {
            "code": "resolution_conflict",
            "message": 'The call was already resolved differently: request "r1" recorded '
            f"{dumps(ALLOW)}.",
        }
    }


def test_deny_settles_denied_and_the_same_request_answers_after_settlement(runner):
    _, call_id = _bash(runner)
    first = call_resolve(call_id=call_id, user=runner, request_id="r1", resolution=DENY)
    response = ConversationEvent.objects.get(tool_call_id=call_id)
    assert response.payload["outcome"] == "denied"
    assert response.payload["resolvedBy"] == runner.username
    assert (
        response.payload["resolution"] == DENY and response.payload["resolutionRequestId"] == "r1"
    )
    assert response.payload["interaction"]["kind"] == "approval"
    assert "Reason: Approval denied." in response.payload["modelContent"][0]["text"]
    assert call_resolve(call_id=call_id, user=runner, request_id="r1", resolution=DENY) == first
    with pytest.raises(ResolutionConflict):
        call_resolve(call_id=call_id, user=runner, request_id="r1", resolution=ALLOW)


def test_resolving_a_call_not_awaiting_is_refused(runner):
    _, call_id = _bash(runner)
    with pytest.raises(NotAwaiting):
        call_resolve(
            call_id=call_id,
            user=runner,
            request_id="r1",
            resolution={"kind": "input", "value": {"answers": {}}},
        )
    conversation = new_conversation(runner)
    turn_id = open_turn(conversation)
    (ready_id,) = assistant_calls(conversation, turn_id, ("notes", {})).call_ids
    with pytest.raises(NotAwaiting):
        call_resolve(call_id=ready_id, user=runner, request_id="r1", resolution=ALLOW)


def test_approving_a_command_needs_run_commands(user):
    _, call_id = _bash(user)
    with pytest.raises(Forbidden):
        call_resolve(call_id=call_id, user=user, request_id="r1", resolution=ALLOW)
    assert ToolCall.objects.get(pk=call_id).state == "awaiting_approval"


def test_persist_saves_a_conversation_rule_from_the_suggestion(runner):
    conversation, call_id = _bash(runner, "make test")
    call_resolve(
        call_id=call_id, user=runner, request_id="r1", resolution={**ALLOW, "persist": True}
    )
    rule = PermissionRule.objects.get()
    assert (rule.conversation_id, rule.tool_name, rule.pattern, rule.decision, rule.source) == (
        conversation.pk,
        "bash",
        "make test",
        "allow",
        "approval",
    )
    turn_id = open_turn(conversation)
    (again,) = assistant_calls(conversation, turn_id, ("bash", {"command": "make test"})).call_ids
    assert ToolCall.objects.get(pk=again).state == "ready"


def _ask_user(user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    questions = [
        {"id": "color", "question": "Which color?", "options": ["red", "blue"]},
        {"id": "sizes", "question": "Which sizes?", "multiple": True},
    ]
    (call_id,) = assistant_calls(
        conversation, turn_id, ("ask_user", {"questions": questions})
    ).call_ids
    # Its handler ran at once: running → awaiting_input with the questions, claim released.
    call = ToolCall.objects.get(pk=call_id)
    assert call.state == "awaiting_input"
    assert call.interaction == {"kind": "input", "request": {"questions": questions}}
    return call_id


def test_input_answers_settle_completed_and_stay_in_the_response(user):
    call_id = _ask_user(user)
    value = {"answers": {"color": "red", "sizes": ["S", "M"]}}
    call_resolve(
        call_id=call_id, user=user, request_id="q1", resolution={"kind": "input", "value": value}
    )
    payload = ConversationEvent.objects.get(tool_call_id=call_id).payload
    assert payload["outcome"] == "completed"
    assert payload["interaction"]["request"]["questions"][0]["options"] == ["red", "blue"]
    assert payload["resolution"] == {"kind": "input", "value": value}
    assert "color: red" in payload["modelContent"][0]["text"]


@pytest.mark.parametrize(
    ("answers", "field"),
    [
        ({"color": "red"}, "value.answers.sizes"),
        ({"color": ["a", "b"], "sizes": "S"}, "value.answers.color"),
        ({"nope": "x"}, "value.answers.nope"),
    ],
)
def test_bad_answers_are_refused_naming_the_field(user, answers, field):
    call_id = _ask_user(user)
    with pytest.raises(ValidationFailed) as refused:
        call_resolve(
            call_id=call_id,
            user=user,
            request_id="q1",
            resolution={"kind": "input", "value": {"answers": answers}},
        )
    assert refused.value.field == field
    assert ToolCall.objects.get(pk=call_id).resolution is None


def test_recovery_applies_a_recorded_resolution_again(runner):
    _, call_id = _bash(runner)
    # A crash between recording the resolution and applying it:
    ToolCall.objects.filter(pk=call_id).update(
        resolution=DENY, resolution_request_id="r1", resolved_by=runner
    )
    action = recover_call(call_id=call_id)
    assert action is not None and "denied" in action.action
    assert ConversationEvent.objects.get(tool_call_id=call_id).payload["outcome"] == "denied"


def test_without_a_resolution_recovery_keeps_the_question_waiting(runner):
    _, call_id = _bash(runner)
    assert recover_call(call_id=call_id) is None
    assert ToolCall.objects.get(pk=call_id).state == "awaiting_approval"


QUESTION = [{"id": "go", "question": "Proceed?", "options": ["yes", "no"]}]


def test_ask_user_after_an_approval_gets_its_input_slot(user):
    """A rule asks before ``ask_user`` runs: approved, its handler runs at once, and the input
    resolution is not refused as a second resolution of the call."""
    conversation = new_conversation(user)
    PermissionRule.objects.create(
        conversation=conversation, tool_name="ask_user", pattern="", decision="ask"
    )
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(
        conversation, turn_id, ("ask_user", {"questions": QUESTION})
    ).call_ids
    assert ToolCall.objects.get(pk=call_id).state == "awaiting_approval"
    approved = call_resolve(call_id=call_id, user=user, request_id="ok", resolution=ALLOW)
    call = ToolCall.objects.get(pk=call_id)
    assert call.state == "awaiting_input" and call.resolution is None
    assert call.supervision["approval"] == approved  # kept on record
    # The same approval again (its answer was lost) still answers what was recorded.
    assert call_resolve(call_id=call_id, user=user, request_id="ok", resolution=ALLOW) == approved
    assert ToolActivity.objects.get(tool_call_id=call_id).state_json["status"] == "awaiting_input"
    answer = {"kind": "input", "value": {"answers": {"go": "yes"}}}
    call_resolve(call_id=call_id, user=user, request_id="in", resolution=answer)
    payload = ConversationEvent.objects.get(tool_call_id=call_id).payload
    assert payload["outcome"] == "completed"
    assert payload["interaction"] == {"kind": "input", "request": {"questions": QUESTION}}
    assert payload["resolution"] == answer and payload["resolutionRequestId"] == "in"
    assert payload["modelContent"][0]["text"].startswith("go: yes")
    assert payload["supervision"]["approval"]["resolvedBy"] == user.username
    assert call_resolve(call_id=call_id, user=user, request_id="ok", resolution=ALLOW) == approved
    with pytest.raises(ResolutionConflict):
        call_resolve(call_id=call_id, user=user, request_id="ok", resolution=DENY)


def test_an_ask_user_left_ready_by_a_crash_is_run_by_recovery(user, monkeypatch):
    from conversations.services import _in_transaction
    from conversations.services.recovery import recover_all

    monkeypatch.setattr(_in_transaction, "call_ready_run", lambda **kwargs: False)  # "crashed" here
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(
        conversation, turn_id, ("ask_user", {"questions": QUESTION})
    ).call_ids
    assert ToolCall.objects.get(pk=call_id).state == "ready"
    actions = recover_all()
    assert [a.action for a in actions if a.tool_call_id == str(call_id)] == ["handed to its runner"]
    assert ToolCall.objects.get(pk=call_id).state == "awaiting_input"
    assert recover_all() == []  # nothing left to do


def _race(*actions):
    """Run ``actions`` at the same moment, each in its own thread and connection; their
    results (or the domain errors they raised), in order."""
    import threading

    from django.db import connections

    from conversations.errors import DomainError

    start = threading.Barrier(len(actions))
    results: list = [None] * len(actions)

    def run(i, action):
        try:
            start.wait()
            results[i] = action()
        except DomainError as exc:
            results[i] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(actions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", ["deny", "input"])
def test_a_resolution_racing_a_cancel_either_decides_or_leaves_no_trace(runner, kind):
    """Whoever wins, the response is coherent: the resolution's outcome with the resolution,
    or ``cancelled`` without it while the resolver gets ``not_awaiting``. Never a
    ``stale_claim``, never a cancelled response carrying the losing resolution."""
    from conversations.services.cancel import call_cancel

    rounds = 20
    seen = set()
    for n in range(rounds):
        conversation = new_conversation(runner)
        turn_id = open_turn(conversation)
        if kind == "deny":
            tool = ("bash", {"command": f"rm -rf build{n}"})
            resolution = DENY
            decided = "denied"
        else:
            tool = ("ask_user", {"questions": QUESTION})
            resolution = {"kind": "input", "value": {"answers": {"go": "yes"}}}
            decided = "completed"
        (call_id,) = assistant_calls(conversation, turn_id, tool).call_ids
        resolved, cancelled = _race(
            lambda call_id=call_id, resolution=resolution, n=n: call_resolve(
                call_id=call_id, user=runner, request_id=f"r{n}", resolution=resolution
            ),
            lambda call_id=call_id: call_cancel(call_id=call_id),
        )
        payload = ConversationEvent.objects.get(tool_call_id=call_id).payload
        if payload["outcome"] == decided:
            seen.add("resolution won")
            assert resolved["requestId"] == f"r{n}"
            assert payload["resolution"] == resolution
            assert payload["resolutionRequestId"] == f"r{n}"
            assert cancelled == {"outcome": decided, "alreadySettled": True}
        else:
            seen.add("cancel won")
            assert payload["outcome"] == "cancelled"
            assert isinstance(resolved, NotAwaiting), resolved
            assert (payload["resolution"], payload["resolutionRequestId"]) == (None, None)
            assert payload["resolvedBy"] is None
            assert cancelled == {"outcome": "cancelled", "alreadySettled": False}
            # The same request again answers the same refusal: nothing was recorded.
            with pytest.raises(NotAwaiting):
                call_resolve(
                    call_id=call_id, user=runner, request_id=f"r{n}", resolution=resolution
                )
    assert seen  # every round ended one of the two coherent ways


def test_a_cancel_after_a_recorded_but_unapplied_resolution_drops_it(runner):
    """A crash between recording and applying leaves the resolution on the row; a cancel that
    comes first settles without it: it decided nothing."""
    from conversations.services.cancel import call_cancel

    _, call_id = _bash(runner, "rm -rf build")
    ToolCall.objects.filter(pk=call_id).update(
        resolution=DENY, resolution_request_id="r1", resolved_by=runner
    )
    assert call_cancel(call_id=call_id) == {"outcome": "cancelled", "alreadySettled": False}
    payload = ConversationEvent.objects.get(tool_call_id=call_id).payload
    assert (payload["resolution"], payload["resolutionRequestId"], payload["resolvedBy"]) == (
        None,
        None,
        None,
    )
    assert payload["interaction"]["kind"] == "approval"  # the question asked stays
    with pytest.raises(NotAwaiting):
        call_resolve(call_id=call_id, user=runner, request_id="r1", resolution=DENY)


@pytest.mark.django_db(transaction=True)
def test_a_resolution_publishes_the_move_it_led_to_once(runner, settings):
    """The call is published once, moved, with its resolution: recording the resolution does
    not publish the awaiting row again first (it would repeat ``awaiting_approval``), and the
    runner adds nothing (bash stays ready)."""
    import asyncio

    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from conversations.services.publish import conversation_group, unpack

    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    conversation, call_id = _bash(runner, "make build")
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(conversation_group(conversation.pk), channel)
    call_resolve(call_id=call_id, user=runner, request_id="r1", resolution=ALLOW)

    async def drain():
        got = []
        while True:
            try:
                got.extend(unpack(await asyncio.wait_for(layer.receive(channel), 0.3)))
            except TimeoutError:
                return got

    changed = [m["call"] for m in async_to_sync(drain)() if m["type"] == "tool_call.changed"]
    assert [(c["state"], c["resolution"]) for c in changed] == [("ready", ALLOW)]
