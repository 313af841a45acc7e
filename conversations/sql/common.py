"""What both databases' SQL shares: the settlement read, the rows written with it, the
activity compare-and-set, the hosts conversations are pinned to.

Explicit SQL because settlement is the hottest write path: a 4-way ``select_related`` read cost
~5 ms here against ~0.7 ms for ``SETTLING_CALL_SQL`` (docs/performance.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple
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


@dataclass(frozen=True, slots=True)
class SettlingCall:
    """What settlement needs of an unfinished call, its claim, turn, message, resolver and
    activity, read in one statement (``SettlingRow``) and decoded: a frozen dataclass, built
    once a settlement by keyword (the row it is built from is the ``NamedTuple``)."""

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
    created_at: datetime  # for toolcore_settle_seconds (conversations/metrics.py)


class SettlingRow(NamedTuple):
    """The settlement read's row as the cursor gives it (``SettlingRow._make(row)``): columns
    not decoded yet (JSON as text on SQLite, UUIDs as hex text). ``SETTLING_CALL_SQL`` selects
    ``SETTLING_COLUMNS[field]`` for each field, in this order."""

    id: Any
    conversation_id: Any
    turn_id: Any
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
    permission_refused: Any
    claim_token: Any
    turn_origin: str
    include_in_context: Any
    assistant_sequence: int | None
    resolved_by_name: str | None
    activity_rev: int | None
    activity_state: Any  # the activity's small state (``state_json``)
    activity_payload: Any  # and its large part (``payload_json``)
    created_at: Any  # a datetime (naive UTC from SQLite)


_USER = get_user_model()
_USERNAME = _USER._meta.get_field(_USER.USERNAME_FIELD).column
# Aliases: c the call, t its turn, cl its claim, e its assistant message, u its resolver, a its
# activity.
SETTLING_COLUMNS = {
    "id": "c.id",
    "conversation_id": "c.conversation_id",
    "turn_id": "c.turn_id",
    "state": "c.state",
    "generation": "c.generation",
    "attempt": "c.attempt",
    "tool_name": "c.tool_name",
    "arguments": "c.arguments",
    "provider_call_id": "c.provider_call_id",
    "content_index": "c.content_index",
    "origin": "c.origin",
    "supervision": "c.supervision",
    "interaction": "c.interaction",
    "resolved_interaction": "c.resolved_interaction",
    "resolution": "c.resolution",
    "resolution_request_id": "c.resolution_request_id",
    "permission_refused": "c.permission_refused",
    "claim_token": "cl.token",
    "turn_origin": "t.origin",
    "include_in_context": "t.include_in_context",
    "assistant_sequence": "e.sequence",
    "resolved_by_name": f"u.{_USERNAME}",
    "activity_rev": "a.rev",
    "activity_state": "a.state_json",
    "activity_payload": "a.payload_json",
    "created_at": "c.created_at",
}
SETTLING_CALL_SQL = (
    f"SELECT {', '.join(SETTLING_COLUMNS[name] for name in SettlingRow._fields)} "
    f"FROM {CALLS} c JOIN {Turn._meta.db_table} t ON t.id = c.turn_id "
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
    r = SettlingRow._make(row)
    return SettlingCall(
        id=uuid_column(r.id),
        conversation_id=uuid_column(r.conversation_id),
        turn_id=uuid_column(r.turn_id),
        state=r.state,
        generation=r.generation,
        attempt=r.attempt,
        tool_name=r.tool_name,
        arguments=json_column(r.arguments),
        provider_call_id=r.provider_call_id,
        content_index=r.content_index,
        origin=r.origin,
        supervision=json_column(r.supervision),
        interaction=json_column(r.interaction),
        resolved_interaction=json_column(r.resolved_interaction),
        resolution=json_column(r.resolution),
        resolution_request_id=r.resolution_request_id,
        permission_refused=bool(r.permission_refused),
        claim_token=uuid_column(r.claim_token),
        turn_origin=r.turn_origin,
        include_in_context=bool(r.include_in_context),
        assistant_sequence=r.assistant_sequence,
        resolved_by_name=r.resolved_by_name,
        activity_rev=r.activity_rev,
        activity_state=(
            None
            if r.activity_rev is None
            else {**json_column(r.activity_state), **json_column(r.activity_payload)}
        ),
        created_at=r.created_at,
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


# The distinct hosts of pinned conversations by a loose index scan of ``conv_pinned_host``: one
# index probe a host (the next host after the last), not one row a conversation. Its condition
# is written as the index's (``NOT (host = '')``) so that SQLite uses the partial index too.
# Run by every worker's sweep, once a lease. Measured on PostgreSQL, a table of 1,000,000 rows
# (900,000 pinned to 4 hosts) with the same partial index: 0.14 ms, against 283 ms for
# ``SELECT DISTINCT host`` (an index-only scan of every entry).
PINNED_HOSTS_SQL = (
    f"WITH RECURSIVE pinned(host) AS ("
    f"SELECT (SELECT host FROM {CONVERSATIONS} WHERE NOT (host = '') ORDER BY host LIMIT 1) "
    f"UNION ALL SELECT (SELECT c.host FROM {CONVERSATIONS} c WHERE NOT (c.host = '') "
    f"AND c.host > p.host ORDER BY c.host LIMIT 1) FROM pinned p WHERE p.host IS NOT NULL) "
    f"SELECT host FROM pinned WHERE host IS NOT NULL"
)


def pinned_hosts() -> list[str]:
    """The hosts some conversation is pinned to (``Conversation.host``), in order."""
    with connection.cursor() as cursor:
        cursor.execute(PINNED_HOSTS_SQL)
        return [host for (host,) in cursor.fetchall()]
