"""Turn rows: opening one, closing one with ``turn_ended``, finding the open one.

Settling what a turn leaves open (turn cancel, turn end) follows the Cancel rules and lives
beside them in ``cancel.py``.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Max
from django.utils import timezone

from ..models import ConversationEvent, Turn
from .events import event_append
from .publish import publish_turn_changed


def turn_open_find(conversation_id: Any) -> Turn | None:
    """The conversation's open turn, if any."""
    return Turn.objects.filter(conversation_id=conversation_id, status=Turn.Status.OPEN).first()


def turn_create(*, conversation_id: Any, **fields: Any) -> Turn:
    """A new open turn numbered after the last one. Called with the conversation locked."""
    last = Turn.objects.filter(conversation_id=conversation_id).aggregate(m=Max("ordinal"))["m"]
    return Turn.objects.create(conversation_id=conversation_id, ordinal=(last or 0) + 1, **fields)


def turn_close(*, conversation_id: Any, turn_id: Any, reason: str) -> ConversationEvent | None:
    """End the turn if it is open: mark it ended and append its ``turn_ended``; None when it
    was not open. Called with the conversation locked, when nothing of the turn is open."""
    closed = Turn.objects.filter(pk=turn_id, status=Turn.Status.OPEN).update(
        status=Turn.Status.ENDED, ended_at=timezone.now(), end_reason=reason
    )
    if not closed:
        return None
    event = event_append(
        conversation_id=conversation_id,
        type=ConversationEvent.Type.TURN_ENDED,
        payload={"turnId": str(turn_id), "reason": reason},
        turn_id=turn_id,
    )
    publish_turn_changed(turn_id)
    return event
