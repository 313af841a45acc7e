"""Turns: closing one with ``turn_ended``, cancelling and ending (spec lifecycle.md, "Turns")."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from ..errors import NotFound
from ..models import ConversationEvent, ToolCall, Turn
from .calls import turn_changed
from .events import conversation_lock, event_append
from .publish import Message, publish_on_commit

END_REASONS = ("completed", "stopped", "command")


def turn_close(*, turn: Turn, reason: str, messages: list[Message]) -> ConversationEvent:
    """Append ``turn_ended`` and mark the turn ended. Called in a transaction, nothing open."""
    event = event_append(
        conversation_id=turn.conversation_id,
        type=ConversationEvent.Type.TURN_ENDED,
        payload={"turnId": str(turn.id), "reason": reason},
        turn_id=turn.id,
        messages=messages,
    )
    Turn.objects.filter(pk=turn.pk).update(
        status=Turn.Status.ENDED, ended_at=timezone.now(), end_reason=reason
    )
    turn_changed(turn.id, messages)
    return event


def require_turn(conversation_id: UUID | str, turn_id: UUID | str) -> Turn:
    try:
        return Turn.objects.get(pk=turn_id, conversation_id=conversation_id)
    except (Turn.DoesNotExist, ValueError) as exc:
        raise NotFound("Turn not found.") from exc


def turn_cancel(*, conversation_id: UUID | str, turn_id: UUID | str) -> dict[str, Any]:
    """Settle every open call of the turn by the Cancel rules; the turn stays open (a command's
    turn too: ending it is the client's ``turn_end``)."""
    from .cancel import call_cancel

    turn = require_turn(conversation_id, turn_id)
    results = []
    for call_id in (
        ToolCall.objects.filter(turn_id=turn.pk).order_by("created_at").values_list("id", flat=True)
    ):
        answer = call_cancel(call_id=call_id, close_command_turn=False)
        results.append({"toolCallId": str(call_id), "outcome": answer["outcome"]})
    return {"turnId": str(turn.id), "results": results}


def turn_end(
    *, conversation_id: UUID | str, turn_id: UUID | str, reason: str = "completed"
) -> dict[str, Any]:
    """Settle what is open (Cancel rules), then append one ``turn_ended``; again: nothing."""
    turn = require_turn(conversation_id, turn_id)
    while turn.status == Turn.Status.OPEN:
        turn_cancel(conversation_id=conversation_id, turn_id=turn_id)
        messages: list[Message] = []
        with transaction.atomic():
            conversation_lock(conversation_id)
            turn = Turn.objects.get(pk=turn.pk)
            if turn.status != Turn.Status.OPEN:
                break
            if ToolCall.objects.filter(turn_id=turn.pk).exists():
                continue  # a call appeared meanwhile: cancel it too
            turn_close(turn=turn, reason=reason, messages=messages)
            publish_on_commit(messages)
            break
    return {"turnId": str(turn.id), "status": "ended"}
