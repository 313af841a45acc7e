"""Turns, commands, cancel and end: nothing of a turn is left open after turn_ended."""

from __future__ import annotations

import pytest

from conversations.errors import CommandConflict, MessageConflict, NotFound, TurnNotOpen, TurnOpen
from conversations.models import Conversation, ConversationEvent, ToolActivity, ToolCall, Turn
from conversations.services.cancel import call_cancel, turn_cancel, turn_end
from conversations.services.claims import claim_acquire
from conversations.services.conversations import conversation_delete
from conversations.services.messages import command_post, message_post
from conversations.services.settlement import ClaimGuard, call_settle
from conversations.storage import conversation_dir

from .api_helpers import grant_run_commands
from .helpers import assistant_calls, new_conversation, open_turn

pytestmark = pytest.mark.django_db


def _events(conversation):
    return list(
        ConversationEvent.objects.filter(conversation=conversation)
        .order_by("sequence")
        .values_list("type", flat=True)
    )


def test_a_user_message_while_a_turn_is_open_is_refused(user):
    conversation = new_conversation(user)
    open_turn(conversation)
    with pytest.raises(TurnOpen):
        message_post(conversation_id=conversation.pk, message_id="x", role="user", content=[])


def test_an_assistant_message_needs_the_open_turn(user):
    conversation = new_conversation(user)
    with pytest.raises(TurnNotOpen):
        message_post(conversation_id=conversation.pk, message_id="a", role="assistant", content=[])
    turn_id = open_turn(conversation)
    turn_end(conversation_id=conversation.pk, turn_id=turn_id)
    with pytest.raises(TurnNotOpen):
        message_post(
            conversation_id=conversation.pk,
            message_id="a",
            role="assistant",
            turn_id=turn_id,
            content=[],
        )


def test_message_posting_is_idempotent_by_message_id(user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    content = [
        {"type": "text", "text": "hi"},
        {"type": "tool_call", "id": "p1", "name": "notes", "arguments": {"a": 1}},
    ]
    first = message_post(
        conversation_id=conversation.pk,
        message_id="m",
        role="assistant",
        turn_id=turn_id,
        content=content,
    )
    again = message_post(
        conversation_id=conversation.pk,
        message_id="m",
        role="assistant",
        turn_id=turn_id,
        content=content,
    )
    assert first.created and not again.created
    assert again.body == first.body
    assert first.body["toolCalls"] == [
        {
            "id": str(first.call_ids[0]),
            "providerCallId": "p1",
            "contentIndex": 1,
            "toolName": "notes",
            "state": "supervising",
        }
    ]
    assert ToolCall.objects.filter(turn_id=turn_id).count() == 1
    with pytest.raises(MessageConflict):
        message_post(
            conversation_id=conversation.pk,
            message_id="m",
            role="assistant",
            turn_id=turn_id,
            content=[{"type": "text", "text": "other"}],
        )
    assert _events(conversation) == ["user_message", "assistant_message"]


def test_cancel_rules_running_becomes_indeterminate_others_cancelled(user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    running, ready, awaiting = assistant_calls(
        conversation, turn_id, ("notes", {}), ("notes", {"b": 1}), ("bash", {"command": "ls"})
    ).call_ids
    claim_acquire(call_id=running, worker="w")
    answer = turn_cancel(conversation_id=conversation.pk, turn_id=turn_id)
    outcomes = {r["toolCallId"]: r["outcome"] for r in answer["results"]}
    assert outcomes == {
        str(running): "indeterminate",
        str(ready): "cancelled",
        str(awaiting): "cancelled",
    }
    assert Turn.objects.get(pk=turn_id).status == "open"
    text = ConversationEvent.objects.get(tool_call_id=running).payload["modelContent"][0]["text"]
    assert text.startswith("Tool call outcome unknown: it was stopped while running")
    assert call_cancel(call_id=running) == {"outcome": "indeterminate", "alreadySettled": True}


def test_ending_a_turn_settles_what_is_open_then_appends_one_turn_ended(user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("bash", {"command": "ls"})).call_ids
    assert turn_end(conversation_id=conversation.pk, turn_id=turn_id, reason="stopped") == {
        "turnId": turn_id,
        "status": "ended",
    }
    assert _events(conversation) == [
        "user_message",
        "assistant_message",
        "tool_call_response",
        "turn_ended",
    ]
    ended = ConversationEvent.objects.get(conversation=conversation, type="turn_ended")
    assert ended.payload == {"turnId": turn_id, "reason": "stopped"}
    assert not ToolCall.objects.filter(turn_id=turn_id).exists()
    assert ToolActivity.objects.get(tool_call_id=call_id).state_json["status"] == "cancelled"
    turn_end(conversation_id=conversation.pk, turn_id=turn_id)
    assert _events(conversation).count("turn_ended") == 1


def test_a_command_opens_its_turn_and_ends_it_when_its_call_settles(user):
    grant_run_commands(user)
    conversation = new_conversation(user)
    posted = command_post(
        conversation_id=conversation.pk,
        user=user,
        input_id="in1",
        command="echo hi",
        include_in_context=False,
    )
    turn = Turn.objects.get(pk=posted.body["turnId"])
    assert (turn.origin, turn.status, turn.include_in_context) == ("command", "open", False)
    assert (
        command_post(
            conversation_id=conversation.pk, user=user, input_id="in1", command="echo hi"
        ).body
        == posted.body
    )
    with pytest.raises(CommandConflict):
        command_post(conversation_id=conversation.pk, user=user, input_id="in1", command="rm -rf /")
    with pytest.raises(TurnOpen):
        command_post(conversation_id=conversation.pk, user=user, input_id="in2", command="ls")
    claim = claim_acquire(call_id=posted.call_ids[0], worker="w")
    call_settle(
        call_id=posted.call_ids[0],
        outcome="completed",
        guard=ClaimGuard(claim.token, claim.generation),
        result={"exitCode": 0},
        text="hi\n",
    )
    turn.refresh_from_db()
    assert (turn.status, turn.end_reason) == ("ended", "command")
    assert _events(conversation) == ["tool_call_response", "turn_ended"]
    assert (
        ConversationEvent.objects.get(type="turn_ended", conversation=conversation).payload[
            "reason"
        ]
        == "command"
    )


def test_deleting_a_conversation_cancels_then_removes_everything(user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("notes", {})).call_ids
    claim = claim_acquire(call_id=call_id, worker="w")
    folder = conversation_dir(conversation.pk)
    conversation_delete(conversation_id=conversation.pk)
    assert not Conversation.objects.filter(pk=conversation.pk).exists()
    assert not ConversationEvent.objects.filter(conversation_id=conversation.pk).exists()
    assert not folder.exists()
    assert claim is not None
    with pytest.raises(NotFound):
        conversation_delete(conversation_id=conversation.pk)


def test_cancelling_a_command_turn_ends_it_with_reason_command(user):
    """A command's turn is its one call: it ends when the call settles, whatever settled it;
    ending it afterwards appends nothing more."""
    grant_run_commands(user)
    conversation = new_conversation(user)
    posted = command_post(
        conversation_id=conversation.pk, user=user, input_id="in1", command="sleep 100"
    )
    turn_id = posted.body["turnId"]
    answer = turn_cancel(conversation_id=conversation.pk, turn_id=turn_id)
    assert answer["results"] == [{"toolCallId": str(posted.call_ids[0]), "outcome": "cancelled"}]
    turn = Turn.objects.get(pk=turn_id)
    assert (turn.status, turn.end_reason) == ("ended", "command")
    assert turn_end(conversation_id=conversation.pk, turn_id=turn_id, reason="stopped") == {
        "turnId": turn_id,
        "status": "ended",
    }
    ended = ConversationEvent.objects.get(conversation=conversation, type="turn_ended")
    assert ended.payload == {"turnId": turn_id, "reason": "command"}
    response = ConversationEvent.objects.get(conversation=conversation, type="tool_call_response")
    assert response.sequence < ended.sequence
    assert response.payload["includeInContext"] is True
