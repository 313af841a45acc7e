"""Appending to the event log: sequences 1, 2, 3 … per conversation, no gaps, no duplicates."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.utils import timezone

from ..errors import NotFound
from ..fields import dumps
from ..models import Conversation, ConversationEvent
from ..shapes import event_wire
from ..sql import vendor_sql
from .publish import conversation_group, later


def conversation_lock(conversation_id: UUID | str) -> Conversation:
    """Lock and return the conversation row. Call inside a transaction.

    PostgreSQL takes a row lock (``SELECT … FOR UPDATE``); SQLite's IMMEDIATE transaction has
    already serialised writers at ``BEGIN``.
    """
    try:
        return Conversation.objects.select_for_update().get(pk=conversation_id)
    except (Conversation.DoesNotExist, ValueError) as exc:
        raise NotFound("Conversation not found.") from exc


def event_inserted(*, pk: int, created_at: Any, **fields: Any) -> ConversationEvent:
    """The saved ``ConversationEvent`` of a row inserted with explicit SQL, sent to the
    conversation's live subscribers after commit."""
    event = ConversationEvent(id=pk, created_at=created_at, **fields)
    event._state.adding = False
    event._state.db = "default"
    later(
        conversation_group(event.conversation_id),
        {
            "type": "conversation.event",
            "conversationId": str(event.conversation_id),
            "event": event_wire(event),
        },
    )
    return event


def event_append(
    *,
    conversation_id: UUID | str,
    type: str,
    payload: dict[str, Any],
    turn_id: UUID | str | None = None,
    tool_call_id: UUID | str | None = None,
    message_id: str | None = None,
) -> ConversationEvent:
    """Append one event with ``sequence = last_sequence + 1`` and publish it after commit.
    Called inside a transaction; the sequence's ``UPDATE`` locks the conversation row."""
    now = timezone.now()
    inserted = vendor_sql().event_insert(
        conversation_id=conversation_id,
        type=type,
        payload_text=dumps(payload),
        turn_id=turn_id,
        tool_call_id=tool_call_id,
        message_id=message_id,
        now=now,
    )
    if inserted is None:
        raise NotFound("Conversation not found.")
    return event_inserted(
        pk=inserted.event_id,
        conversation_id=conversation_id,
        sequence=inserted.sequence,
        type=type,
        payload=payload,
        turn_id=turn_id,
        tool_call_id=tool_call_id,
        message_id=message_id,
        created_at=now,
    )
