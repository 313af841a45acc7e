"""Appending to the event log: sequences 1, 2, 3 … per conversation, no gaps, no duplicates."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db import connection
from django.utils import timezone

from ..errors import NotFound
from ..fields import dumps
from ..models import Conversation, ConversationEvent
from ..shapes import event_wire
from .publish import Message, conversation_group

_TABLE = Conversation._meta.db_table
_PK = Conversation._meta.pk
_UPDATED_AT = Conversation._meta.get_field("updated_at")


def conversation_lock(conversation_id: UUID | str) -> Conversation:
    """Lock and return the conversation row. Call inside ``transaction.atomic()``.

    PostgreSQL takes a row lock (``SELECT … FOR UPDATE``); SQLite's IMMEDIATE transaction has
    already serialised writers at ``BEGIN``.
    """
    try:
        return Conversation.objects.select_for_update().get(pk=conversation_id)
    except (Conversation.DoesNotExist, ValueError) as exc:
        raise NotFound("Conversation not found.") from exc


def next_sequence(conversation_id: UUID | str) -> int:
    """Take the next sequence: one ``UPDATE … RETURNING`` that also locks the conversation row."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_TABLE} SET last_sequence = last_sequence + 1, updated_at = %s "
            f"WHERE id = %s RETURNING last_sequence",
            [
                _UPDATED_AT.get_db_prep_value(timezone.now(), connection),
                _PK.get_db_prep_value(conversation_id, connection),
            ],
        )
        row = cursor.fetchone()
    if row is None:
        raise NotFound("Conversation not found.")
    return int(row[0])


_EVENTS = ConversationEvent._meta.db_table
_EVENT_FIELD = ConversationEvent._meta.get_field


def _insert_event(
    conversation_id: Any,
    type: str,
    payload: dict[str, Any],
    turn_id: Any,
    tool_call_id: Any,
    message_id: str | None,
) -> ConversationEvent:
    """Take the next sequence and insert the event: one statement on PostgreSQL (a CTE whose
    UPDATE locks the conversation row), two on SQLite (whose writers are already serialised)."""
    now = timezone.now()

    def prep(name: str, value: Any) -> Any:
        return _EVENT_FIELD(name).get_db_prep_value(value, connection)

    values = [
        prep("conversation", conversation_id),
        type,
        prep("turn", turn_id),
        prep("tool_call_id", tool_call_id),
        message_id,
        dumps(payload),
        prep("created_at", now),
    ]
    columns = (
        "conversation_id, type, turn_id, tool_call_id, message_id, payload, created_at, sequence"
    )
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"WITH s AS (UPDATE {_TABLE} SET last_sequence = last_sequence + 1, updated_at = %s "
                f"WHERE id = %s RETURNING last_sequence) "
                f"INSERT INTO {_EVENTS} ({columns}) "
                f"SELECT %s::uuid, %s, %s::uuid, %s::uuid, %s, %s::json, %s::timestamptz, s.last_sequence "
                f"FROM s RETURNING id, sequence",
                [prep("created_at", now), prep("conversation", conversation_id), *values],
            )
            row = cursor.fetchone()
            if row is None:
                raise NotFound("Conversation not found.")
            pk, sequence = row
        else:
            sequence = next_sequence(conversation_id)
            cursor.execute(
                f"INSERT INTO {_EVENTS} ({columns}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                [*values, sequence],
            )
            pk = cursor.lastrowid
    return event_instance(
        pk=pk,
        conversation_id=conversation_id,
        sequence=sequence,
        type=type,
        payload=payload,
        turn_id=turn_id,
        tool_call_id=tool_call_id,
        message_id=message_id,
        created_at=now,
    )


def event_instance(*, pk: int, created_at: Any, **fields: Any) -> ConversationEvent:
    """The saved ``ConversationEvent`` of a row inserted with explicit SQL."""
    event = ConversationEvent(id=pk, created_at=created_at, **fields)
    event._state.adding = False
    event._state.db = "default"
    return event


def event_published(event: ConversationEvent, messages: list[Message] | None) -> None:
    """Add the ``conversation.event`` publication of ``event`` to ``messages`` (if given)."""
    if messages is not None:
        messages.append(
            (
                conversation_group(event.conversation_id),
                {
                    "type": "conversation.event",
                    "conversationId": str(event.conversation_id),
                    "event": event_wire(event),
                },
            )
        )


def event_append(
    *,
    conversation_id: UUID | str,
    type: str,
    payload: dict[str, Any],
    turn_id: UUID | str | None = None,
    tool_call_id: UUID | str | None = None,
    message_id: str | None = None,
    messages: list[Message] | None = None,
) -> ConversationEvent:
    """Append one event with ``sequence = last_sequence + 1``. Called inside a transaction.

    When ``messages`` is given, the ``conversation.event`` publication is added to it for the
    caller to publish after commit.
    """
    event = _insert_event(conversation_id, type, payload, turn_id, tool_call_id, message_id)
    event_published(event, messages)
    return event
