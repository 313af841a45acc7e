"""SQLite's SQL (``interface.VendorSQL``): one statement a step. ``BEGIN IMMEDIATE`` already
serialises writers, so the steps of one transaction cannot interleave with another's, and a
refused guard rolls the transaction back (sequence included)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db import connection
from django.utils import timezone

from ..errors import StaleClaim
from ..models import Asset, Conversation, ConversationEvent, ExecutionClaim, ToolCall
from .common import (
    ASSETS,
    CALLS,
    CLAIMS,
    CONVERSATIONS,
    EVENT_COLUMNS,
    EVENTS,
    GUARD_LOST,
    AssetRow,
    FoldWrite,
    SettledRow,
    SettlingCall,
    activity_cas,
    prep,
    uuid_column,
)
from .interface import ClaimedRow, InsertedEvent, ReplayPage

_NEXT_SEQUENCE = (
    f"UPDATE {CONVERSATIONS} SET last_sequence = last_sequence + 1, updated_at = %s "
    f"WHERE id = %s RETURNING last_sequence"
)
_EVENT_INSERT = f"INSERT INTO {EVENTS} ({EVENT_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"


def event_insert(
    *,
    conversation_id: Any,
    type: str,
    payload_text: str,
    turn_id: Any,
    tool_call_id: Any,
    message_id: str | None,
    now: Any,
) -> InsertedEvent | None:
    """``VendorSQL.event_insert``: take the conversation's next sequence, then insert the
    event."""
    conversation = prep(Conversation, "id", conversation_id)
    with connection.cursor() as cursor:
        cursor.execute(_NEXT_SEQUENCE, [prep(Conversation, "updated_at", now), conversation])
        row = cursor.fetchone()
        if row is None:
            return None
        sequence = int(row[0])
        cursor.execute(
            _EVENT_INSERT,
            [
                conversation,
                type,
                prep(ConversationEvent, "turn", turn_id),
                prep(ConversationEvent, "tool_call_id", tool_call_id),
                message_id,
                payload_text,
                prep(ConversationEvent, "created_at", now),
                sequence,
            ],
        )
        return InsertedEvent(cursor.lastrowid, sequence)


_DELETE_HELD = (
    f"DELETE FROM {CALLS} WHERE id = %s AND generation = %s AND state = %s AND EXISTS "
    f"(SELECT 1 FROM {CLAIMS} WHERE call_id = %s AND token = %s AND generation = %s)"
)
_DELETE_READ = f"DELETE FROM {CALLS} WHERE id = %s AND generation = %s AND state = %s"
_DELETE_CLAIM = f"DELETE FROM {CLAIMS} WHERE call_id = %s"


def _call_delete_guarded(call_id: Any, *, token: Any, generation: int, state: str) -> None:
    """Delete the row (and its claim) only while the guard holds: settlement's compare-and-set.
    ``StaleClaim`` otherwise, which rolls the whole settlement back."""
    pk = prep(ToolCall, "id", call_id)
    with connection.cursor() as cursor:
        if token is None:
            cursor.execute(_DELETE_READ, [pk, generation, state])
        else:
            claim = [pk, prep(ExecutionClaim, "token", token), generation]
            cursor.execute(_DELETE_HELD, [pk, generation, state, *claim])
        if cursor.rowcount != 1:
            raise StaleClaim(GUARD_LOST)
        cursor.execute(_DELETE_CLAIM, [pk])


_ASSET_COLUMNS = (
    "id",
    "conversation",
    "tool_call_id",
    "event",
    "kind",
    "path",
    "size",
    "sha256",
    "media_type",
    "truncated",
    "created_at",
)
_ASSET_FIELDS = tuple(Asset._meta.get_field(name) for name in _ASSET_COLUMNS)
_ASSET_ROW = "(" + ", ".join(["%s"] * len(_ASSET_COLUMNS)) + ")"
_ASSET_INSERT = (
    f"INSERT INTO {ASSETS} (id, conversation_id, tool_call_id, event_id, kind, path, size, "
    f"sha256, media_type, truncated, created_at) VALUES "
)


def _assets_insert(
    assets: list[AssetRow], *, conversation_id: Any, call_id: Any, event_id: int, now: Any
) -> None:
    """The attempt's asset rows in one statement (``bulk_create`` costs ~3x here)."""
    if not assets:
        return
    params: list[Any] = []
    for asset in assets:
        values = (
            asset.id,
            conversation_id,
            call_id,
            event_id,
            asset.kind,
            asset.path,
            asset.size,
            asset.sha256,
            asset.media_type,
            asset.truncated,
            now,
        )
        params.extend(
            f.get_db_prep_value(v, connection) for f, v in zip(_ASSET_FIELDS, values, strict=True)
        )
    with connection.cursor() as cursor:
        cursor.execute(_ASSET_INSERT + ", ".join([_ASSET_ROW] * len(assets)), params)


def settlement_write(
    call: SettlingCall,
    *,
    token: Any,
    generation: int,
    state: str,
    payload_text: str,
    now: Any,
    assets: list[AssetRow],
    fold: FoldWrite | None,
) -> SettledRow:
    """``VendorSQL.settlement_write``, a statement a step: append the ``tool_call_response``,
    delete the row and its claim under the guard (a refusal rolls the transaction back, the
    sequence with it), insert the assets, compare-and-set the activity."""
    inserted = event_insert(
        conversation_id=call.conversation_id,
        type=ConversationEvent.Type.TOOL_CALL_RESPONSE,
        payload_text=payload_text,
        turn_id=call.turn_id,
        tool_call_id=call.id,
        message_id=None,
        now=now,
    )
    if inserted is None:
        raise StaleClaim(GUARD_LOST)  # the conversation is gone, and the call with it
    _call_delete_guarded(call.id, token=token, generation=generation, state=state)
    _assets_insert(
        assets,
        conversation_id=call.conversation_id,
        call_id=call.id,
        event_id=inserted.event_id,
        now=now,
    )
    written = fold is not None and activity_cas(fold, tool_call_id=call.id, now=now)
    return SettledRow(
        event_id=inserted.event_id, sequence=inserted.sequence, activity_written=written
    )


# Stored as 'YYYY-MM-DD HH:MM:SS[.ffffff]' (UTC); strftime('%f') would round, not truncate.
_TIME = (
    "substr(created_at, 1, 10) || 'T' || substr(created_at, 12, 8) || '.' || "
    "substr(substr(created_at, 21) || '000', 1, 3) || 'Z'"
)
_HEAD = f"SELECT last_sequence FROM {CONVERSATIONS} WHERE id = %s AND owner_id = %s"
_REPLAY = (
    f"SELECT sequence, type, turn_id, tool_call_id, payload, {_TIME} "
    f"FROM {EVENTS} WHERE conversation_id = %s AND sequence > %s AND sequence <= %s "
    f"ORDER BY sequence LIMIT %s"
)


def replay_rows(
    *, conversation_id: Any, owner_id: Any, after: int, limit: int
) -> ReplayPage | None:
    """``VendorSQL.replay_rows``: the head, then the page."""
    pk = prep(Conversation, "id", conversation_id)
    with connection.cursor() as cursor:
        cursor.execute(_HEAD, [pk, owner_id])
        head = cursor.fetchone()
        if head is None:
            return None
        last = head[0]
        if after >= last:  # nothing to read; also keeps huge numbers away from SQLite integers
            return ReplayPage(last, [])
        cursor.execute(_REPLAY, [pk, after, last, limit])
        return ReplayPage(last, cursor.fetchall())


class _Ready(NamedTuple):
    """A ready call ``_PICK`` read, as stored (UUIDs as hex text)."""

    id: str
    generation: int
    conversation_id: str
    turn_id: str
    tool_name: str
    arguments: str
    owner_id: int
    workspace: str
    updated_at: Any
    host: str
    lost_host: str


_PICK = (
    f"SELECT c.id, c.generation, c.conversation_id, c.turn_id, c.tool_name, c.arguments, "
    f"v.owner_id, v.workspace, c.updated_at, v.host, v.lost_host "
    f"FROM {CALLS} c JOIN {CONVERSATIONS} v ON v.id = c.conversation_id "
    f"WHERE c.state = 'ready' AND c.tool_name IN ({{tools}}) {{owner}}{{pin}}"
    f"ORDER BY c.created_at LIMIT %s"
)
_MOVE = (
    f"UPDATE {CALLS} SET state = 'running', generation = generation + 1, updated_at = %s "
    f"WHERE id = %s AND state = 'ready' AND generation = %s"
)
_CLAIM = (
    f"INSERT INTO {CLAIMS} (call_id, token, worker, generation, acquired_at, heartbeat_at, "
    f"expires_at, host, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, '', %s)"
)


def claim_ready(
    *,
    tool_names: list[str],
    worker: str,
    limit: int,
    owner_id: Any,
    lease_seconds: float,
    host: str | None = None,
) -> list[ClaimedRow]:
    """``VendorSQL.claim_ready``: a read, then a compare-and-set a call; the caller's
    transaction's ``BEGIN IMMEDIATE`` keeps other claimers out meanwhile."""
    if not tool_names:
        return []
    now = clock()
    expires = now + timedelta(seconds=lease_seconds)
    owner = "AND v.owner_id = %s " if owner_id is not None else ""
    pin = "AND v.host IN ('', %s) " if host is not None else ""
    sql = _PICK.format(tools=", ".join(["%s"] * len(tool_names)), owner=owner, pin=pin)
    params = [
        *tool_names,
        *([owner_id] if owner_id is not None else []),
        *([host] if host is not None else []),
        limit,
    ]
    at, until = (
        prep(ExecutionClaim, "acquired_at", now),
        prep(ExecutionClaim, "expires_at", expires),
    )
    claimed = []
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for ready in map(_Ready._make, cursor.fetchall()):
            cursor.execute(_MOVE, [at, ready.id, ready.generation])
            if cursor.rowcount != 1:
                continue
            token = uuid.uuid4()
            token_db = prep(ExecutionClaim, "token", token)
            generation = ready.generation + 1
            cursor.execute(_CLAIM, [ready.id, token_db, worker, generation, at, at, until, at])
            claimed.append(
                ClaimedRow(
                    call_id=uuid_column(ready.id),
                    token=token,
                    generation=generation,
                    expires_at=expires,
                    conversation_id=uuid_column(ready.conversation_id),
                    turn_id=uuid_column(ready.turn_id),
                    tool_name=ready.tool_name,
                    arguments=ready.arguments,
                    owner_id=ready.owner_id,
                    workspace=ready.workspace,
                    ready_at=ready.updated_at,
                    host=ready.host,
                    lost_host=ready.lost_host,
                )
            )
    return claimed


_PIN = f"UPDATE {CONVERSATIONS} SET host = %s, lost_host = '' WHERE id = %s AND host = ''"


def conversations_pin(*, conversation_ids: list[Any], host: str) -> set[str]:
    """``VendorSQL.conversations_pin``: the caller's ``BEGIN IMMEDIATE`` already keeps every
    other writer out, so there is nothing to pass over."""
    pinned = set()
    with connection.cursor() as cursor:
        for conversation_id in conversation_ids:
            cursor.execute(_PIN, [host, prep(Conversation, "id", conversation_id)])
            if cursor.rowcount == 1:
                pinned.add(str(uuid_column(conversation_id)))
    return pinned


# --- the clock ------------------------------------------------------------------------------
# SQLite has no server: every process reading the file asks its own clock (SQLite's ``'now'``
# is the process's too), and the processes of one file share one machine's clock. So the
# database's clock is this process's.


def now(offset: timedelta = timedelta(0)) -> datetime:
    """``VendorSQL.now``: a value, this process's clock (see above)."""
    return timezone.now() + offset


def clock() -> datetime:
    """``VendorSQL.clock``: this process's clock (see above)."""
    return timezone.now()


_RENEW = (
    f"UPDATE {CLAIMS} SET heartbeat_at = %s, expires_at = %s WHERE call_id = %s AND token = %s "
    f"AND generation = %s AND EXISTS (SELECT 1 FROM {CALLS} WHERE id = %s AND state = 'running')"
)


def claim_renew(
    *, call_id: Any, token: Any, generation: int, lease_seconds: float
) -> datetime | None:
    """``VendorSQL.claim_renew``; the new end is computed here, from this process's clock."""
    try:
        pk, token_db = prep(ToolCall, "id", call_id), prep(ExecutionClaim, "token", token)
    except (ValueError, TypeError):
        return None
    at = clock()
    expires = at + timedelta(seconds=lease_seconds)
    stamp = prep(ExecutionClaim, "expires_at", at)
    until = prep(ExecutionClaim, "expires_at", expires)
    with connection.cursor() as cursor:
        cursor.execute(_RENEW, [stamp, until, pk, token_db, generation, pk])
        return expires if cursor.rowcount == 1 else None


def repeatable_read() -> None:
    """Nothing: the transaction's ``BEGIN IMMEDIATE`` keeps every writer out until it ends, so
    its reads see one state already."""


def notify(channel: str, payload: str) -> None:
    """Nothing: SQLite serves one process, whose own listeners hear it (runners.py)."""
