"""What both databases' SQL shares: the settlement read, the rows written with it, the
activity compare-and-set.

Explicit SQL because settlement is the hottest write path: a 4-way ``select_related`` read cost
~5 ms here against ~0.7 ms for ``SETTLING_CALL_SQL`` (docs/performance.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Model

from ..models import (
    Asset,
    Conversation,
    ConversationEvent,
    ExecutionClaim,
    ToolActivity,
    ToolCall,
    Turn,
)

CALLS = ToolCall._meta.db_table
CLAIMS = ExecutionClaim._meta.db_table
CONVERSATIONS = Conversation._meta.db_table
EVENTS = ConversationEvent._meta.db_table
ASSETS = Asset._meta.db_table
ACTIVITY = ToolActivity._meta.db_table

EVENT_COLUMNS = (
    "conversation_id, type, turn_id, tool_call_id, message_id, payload, created_at, sequence"
)

GUARD_LOST = "This claim no longer holds the call, or the call changed meanwhile."


def prep(model: type[Model], field: str, value: Any) -> Any:
    """``value`` as the database driver takes it for ``model.field``."""
    return model._meta.get_field(field).get_db_prep_value(value, connection)


def json_column(value: Any) -> Any:
    """A JSON column read by a cursor: text on SQLite, already decoded by psycopg."""
    return json.loads(value) if isinstance(value, str) else value


def uuid_column(value: Any) -> UUID | None:
    """A UUID column read by a cursor: a ``UUID`` from psycopg, hex text from SQLite."""
    if value is None or isinstance(value, UUID):
        return value
    return UUID(value)


def maybe_uuid(value: Any) -> UUID | None:
    try:
        return UUID(str(value))
    except ValueError:
        return None


@dataclass
class SettlingCall:
    """What settlement needs of an unfinished call, its claim, turn, message, resolver and
    activity, read in one statement."""

    id: UUID
    conversation_id: UUID
    turn_id: UUID
    state: str
    generation: int
    attempt: int
    tool_name: str
    arguments: Any
    provider_call_id: str
    content_index: int | None
    origin: str
    supervision: Any
    interaction: Any
    resolved_interaction: Any
    resolution: Any
    resolution_request_id: str | None
    permission_refused: bool
    claim_token: UUID | None
    turn_origin: str
    include_in_context: bool
    assistant_sequence: int | None
    resolved_by_name: str | None
    activity_rev: int | None
    activity_state: dict[str, Any] | None


_USER = get_user_model()
_USERNAME = _USER._meta.get_field(_USER.USERNAME_FIELD).column
SETTLING_CALL_SQL = (
    "SELECT c.id, c.conversation_id, c.turn_id, c.state, c.generation, c.attempt, c.tool_name, "
    "c.arguments, c.provider_call_id, c.content_index, c.origin, c.supervision, c.interaction, "
    "c.resolved_interaction, c.resolution, c.resolution_request_id, c.permission_refused, "
    f"cl.token, t.origin, t.include_in_context, e.sequence, u.{_USERNAME}, a.rev, a.state_json, "
    f"a.payload_json FROM {CALLS} c JOIN {Turn._meta.db_table} t ON t.id = c.turn_id "
    f"LEFT JOIN {CLAIMS} cl ON cl.call_id = c.id "
    f"LEFT JOIN {EVENTS} e ON e.id = c.assistant_event_id "
    f"LEFT JOIN {_USER._meta.db_table} u ON u.{_USER._meta.pk.column} = c.resolved_by_id "
    f"LEFT JOIN {ACTIVITY} a ON a.tool_call_id = c.id "
    "WHERE c.id = %s"
)


def settling_call_load(call_id: Any) -> SettlingCall | None:
    """The unfinished call ``call_id`` as settlement reads it; None when there is none."""
    try:
        pk = prep(ToolCall, "id", call_id)
    except (ValueError, TypeError):
        return None
    with connection.cursor() as cursor:
        cursor.execute(SETTLING_CALL_SQL, [pk])
        row = cursor.fetchone()
    if row is None:
        return None
    (cid, conversation_id, turn_id, state, generation, attempt, tool_name, arguments,
     provider_call_id, content_index, origin, supervision, interaction, resolved_interaction,
     resolution, request_id, refused, token, turn_origin, include_in_context, sequence, by_name,
     rev, small, payload) = row  # fmt: skip
    return SettlingCall(
        id=uuid_column(cid),
        conversation_id=uuid_column(conversation_id),
        turn_id=uuid_column(turn_id),
        state=state,
        generation=generation,
        attempt=attempt,
        tool_name=tool_name,
        arguments=json_column(arguments),
        provider_call_id=provider_call_id,
        content_index=content_index,
        origin=origin,
        supervision=json_column(supervision),
        interaction=json_column(interaction),
        resolved_interaction=json_column(resolved_interaction),
        resolution=json_column(resolution),
        resolution_request_id=request_id,
        permission_refused=bool(refused),
        claim_token=uuid_column(token),
        turn_origin=turn_origin,
        include_in_context=bool(include_in_context),
        assistant_sequence=sequence,
        resolved_by_name=by_name,
        activity_rev=rev,
        activity_state=None if rev is None else {**json_column(small), **json_column(payload)},
    )


@dataclass(slots=True)
class AssetRow:
    """An ``Asset`` row to insert with the response event (no model instance on the hot path)."""

    id: UUID
    kind: str
    path: str
    size: int
    sha256: str
    media_type: str
    truncated: bool


@dataclass(frozen=True)
class FoldWrite:
    """The compare-and-set write of a folded activity state: valid only while the row's rev is
    still ``rev`` (the write makes it ``rev + 1``)."""

    rev: int
    state_json: str
    payload_json: str
    payload_bytes: int
    is_final: bool


@dataclass(frozen=True)
class SettledRow:
    """What a settlement's write produced: the response event, and whether the activity fold
    it carried was written (its compare-and-set held)."""

    event_id: int
    sequence: int
    activity_written: bool


ACTIVITY_CAS_SQL = (
    f"UPDATE {ACTIVITY} SET rev = rev + 1, state_json = %s, payload_json = %s, "
    f"payload_bytes = %s, is_final = %s, updated_at = %s WHERE tool_call_id = %s AND rev = %s"
)


def activity_cas(write: FoldWrite, *, tool_call_id: Any, now: Any) -> bool:
    """Write ``write`` if the activity's rev is still ``write.rev``; True when it was."""
    with connection.cursor() as cursor:
        cursor.execute(
            ACTIVITY_CAS_SQL,
            [
                write.state_json,
                write.payload_json,
                write.payload_bytes,
                write.is_final,
                prep(ToolActivity, "updated_at", now),
                prep(ToolActivity, "tool_call_id", tool_call_id),
                write.rev,
            ],
        )
        return cursor.rowcount == 1
