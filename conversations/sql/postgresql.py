"""PostgreSQL's SQL (``interface.VendorSQL``): one statement wherever a write takes several
steps.

Lock order, as every writer takes them: the conversation row (sequence), then the call row,
then its claim. A step that finds nothing to do stops the statement's later steps, so a refused
guard takes no sequence and writes nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import DateTimeField, ExpressionWrapper, Value
from django.db.models.functions import Now

from ..errors import StaleClaim
from ..models import ConversationEvent
from .common import (
    ACTIVITY,
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
    maybe_uuid,
)
from .interface import ClaimedRow, InsertedEvent, ReplayPage

# The UPDATE takes the sequence and locks the conversation row; the INSERT uses it.
_EVENT_INSERT = (
    f"WITH s AS (UPDATE {CONVERSATIONS} SET last_sequence = last_sequence + 1, "
    f"updated_at = %(now)s WHERE id = %(conversation)s::uuid RETURNING last_sequence) "
    f"INSERT INTO {EVENTS} ({EVENT_COLUMNS}) SELECT %(conversation)s::uuid, %(type)s, "
    f"%(turn)s::uuid, %(call)s::uuid, %(message)s::text, %(payload)s::json, "
    f"%(now)s::timestamptz, s.last_sequence FROM s RETURNING id, sequence"
)


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
    """``VendorSQL.event_insert``: the sequence taken and the event inserted in one
    statement."""
    params = {
        "conversation": conversation_id,
        "type": type,
        "turn": turn_id,
        "call": tool_call_id,
        "message": message_id,
        "payload": payload_text,
        "now": now,
    }
    with connection.cursor() as cursor:
        cursor.execute(_EVENT_INSERT, params)
        row = cursor.fetchone()
    return None if row is None else InsertedEvent._make(row)


def _settle_sql(held: bool, n_assets: int, fold: bool) -> str:
    # Held: the row goes only while the claim (token, generation) is still the caller's.
    claim_guard = (
        f"AND EXISTS (SELECT 1 FROM {CLAIMS} WHERE call_id = %(call)s AND token = %(token)s "
        f"AND generation = %(generation)s)"
        if held
        else ""
    )
    parts = [
        f"conv AS (SELECT id FROM {CONVERSATIONS} WHERE id = %(conversation)s FOR UPDATE)",
        f"gone AS (DELETE FROM {CALLS} WHERE id = %(call)s AND generation = %(generation)s "
        f"AND state = %(state)s AND EXISTS (SELECT 1 FROM conv) {claim_guard} RETURNING id)",
        # Reads gone, so the claim row is locked after the call row, as every writer does.
        f"claim AS (DELETE FROM {CLAIMS} WHERE call_id IN (SELECT id FROM gone))",
        f"seq AS (UPDATE {CONVERSATIONS} SET last_sequence = last_sequence + 1, "
        f"updated_at = %(now)s WHERE id = %(conversation)s AND EXISTS (SELECT 1 FROM gone) "
        f"RETURNING last_sequence)",
        f"ev AS (INSERT INTO {EVENTS} ({EVENT_COLUMNS}) SELECT %(conversation)s, %(type)s, "
        f"%(turn)s, %(call)s, NULL, %(payload)s::json, %(now)s, last_sequence FROM seq "
        f"RETURNING id, sequence)",
    ]
    if n_assets:
        rows = ", ".join(
            f"(%(a{i}_id)s::uuid, %(a{i}_kind)s::text, %(a{i}_path)s::text, %(a{i}_size)s::bigint, "
            f"%(a{i}_sha256)s::text, %(a{i}_media_type)s::text, %(a{i}_truncated)s::boolean)"
            for i in range(n_assets)
        )
        parts.append(
            f"assets AS (INSERT INTO {ASSETS} (id, conversation_id, tool_call_id, event_id, "
            f"kind, path, size, sha256, media_type, truncated, created_at) "
            f"SELECT v.id, %(conversation)s, %(call)s, ev.id, v.kind, v.path, v.size, v.sha256, "
            f"v.media_type, v.truncated, %(now)s FROM ev CROSS JOIN (VALUES {rows}) "
            f"AS v (id, kind, path, size, sha256, media_type, truncated))"
        )
    if fold:
        parts.append(
            f"act AS (UPDATE {ACTIVITY} SET rev = rev + 1, state_json = %(state_json)s::json, "
            f"payload_json = %(payload_json)s::json, payload_bytes = %(payload_bytes)s, "
            f"is_final = %(is_final)s, updated_at = %(now)s WHERE tool_call_id = %(call)s "
            f"AND rev = %(rev)s AND EXISTS (SELECT 1 FROM ev) RETURNING rev)"
        )
    written = "EXISTS (SELECT 1 FROM act)" if fold else "false"
    return f"WITH {', '.join(parts)} SELECT ev.id, ev.sequence, {written} FROM ev"


_SETTLE_SQL: dict[tuple[bool, int, bool], str] = {}


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
    """``VendorSQL.settlement_write`` as one statement: lock the conversation, delete the row
    and its claim under the guard, append the ``tool_call_response``, insert its assets,
    compare-and-set the activity; each step only when the one before produced its row."""
    held = token is not None
    key = (held, len(assets), fold is not None)
    sql = _SETTLE_SQL.get(key)
    if sql is None:
        sql = _SETTLE_SQL[key] = _settle_sql(*key)
    params: dict[str, Any] = {
        "conversation": call.conversation_id,
        "call": call.id,
        "turn": call.turn_id,
        "generation": generation,
        "state": state,
        "type": ConversationEvent.Type.TOOL_CALL_RESPONSE.value,
        "payload": payload_text,
        "now": now,
    }
    if held:
        params["token"] = maybe_uuid(token)
    for i, asset in enumerate(assets):
        params.update(
            {
                f"a{i}_id": asset.id,
                f"a{i}_kind": asset.kind,
                f"a{i}_path": asset.path,
                f"a{i}_size": asset.size,
                f"a{i}_sha256": asset.sha256,
                f"a{i}_media_type": asset.media_type,
                f"a{i}_truncated": asset.truncated,
            }
        )
    if fold is not None:
        params.update(
            state_json=fold.state_json,
            payload_json=fold.payload_json,
            payload_bytes=fold.payload_bytes,
            is_final=fold.is_final,
            rev=fold.rev,
        )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        raise StaleClaim(GUARD_LOST)
    return SettledRow(event_id=row[0], sequence=row[1], activity_written=bool(row[2]))


_TIME = (
    "to_char(date_trunc('milliseconds', e.created_at AT TIME ZONE 'UTC'), "
    '\'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"\')'
)
# The owner check, the head and the page in one statement; the page is a LATERAL subquery so a
# conversation without events still answers its head. Payloads stay text: no JSON decoding.
_REPLAY = (
    f"SELECT c.last_sequence, e.sequence, e.type, e.turn_id::text, e.tool_call_id::text, "
    f"e.payload::text, {_TIME} "
    f"FROM {CONVERSATIONS} c LEFT JOIN LATERAL (SELECT * FROM {EVENTS} x "
    f"WHERE x.conversation_id = c.id AND x.sequence > %s AND x.sequence <= c.last_sequence "
    f"ORDER BY x.sequence LIMIT %s) e ON true WHERE c.id = %s AND c.owner_id = %s "
    f"ORDER BY e.sequence"
)


def replay_rows(
    *, conversation_id: Any, owner_id: Any, after: int, limit: int
) -> ReplayPage | None:
    """``VendorSQL.replay_rows`` in one statement: each row is the head, then the event."""
    with connection.cursor() as cursor:
        cursor.execute(_REPLAY, [after, limit, conversation_id, owner_id])
        rows = cursor.fetchall()
    if not rows:
        return None
    return ReplayPage(rows[0][0], [row[1:] for row in rows if row[1] is not None])


def repeatable_read() -> None:
    """``VendorSQL.repeatable_read``: ``REPEATABLE READ``."""
    with connection.cursor() as cursor:
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")


def notify(channel: str, payload: str) -> None:
    """``VendorSQL.notify``: ``pg_notify``, which PostgreSQL delivers at commit."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [channel, payload])


# --- the clock ------------------------------------------------------------------------------
# Leases and heartbeats are written and judged by the database server's clock, the one clock
# every process shares: a worker whose own clock is wrong neither keeps a claim past its lease
# nor takes one before it ran out.


def now(offset: timedelta = timedelta(0)) -> Any:
    """``VendorSQL.now``: an expression, evaluated by the server."""
    if not offset:
        return Now()
    return ExpressionWrapper(Now() + Value(offset), output_field=DateTimeField())


def clock() -> datetime:
    """``VendorSQL.clock``: the server's ``statement_timestamp()``."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]


_RENEW = (
    f"UPDATE {CLAIMS} SET heartbeat_at = statement_timestamp(), "
    f"expires_at = statement_timestamp() + %(lease)s * interval '1 second' "
    f"WHERE call_id = %(call)s AND token = %(token)s AND generation = %(generation)s "
    f"AND EXISTS (SELECT 1 FROM {CALLS} WHERE id = %(call)s AND state = 'running') "
    f"RETURNING expires_at"
)


def claim_renew(
    *, call_id: Any, token: Any, generation: int, lease_seconds: float
) -> datetime | None:
    """``VendorSQL.claim_renew`` in one statement that returns the new end."""
    params = {
        "call": maybe_uuid(call_id),
        "token": maybe_uuid(token),
        "generation": generation,
        "lease": lease_seconds,
    }
    with connection.cursor() as cursor:
        cursor.execute(_RENEW, params)
        row = cursor.fetchone()
    return None if row is None else row[0]


def _claim_sql(by_owner: bool, pinned: bool) -> str:
    owner = (
        f"AND c.conversation_id IN (SELECT id FROM {CONVERSATIONS} WHERE owner_id = %(owner)s) "
        if by_owner
        else ""
    )
    # Pinned: the conversation's host, read by its primary key for each call the pick looks
    # at. A scalar subquery, not a join: with the tables' statistics either costs the same, but
    # without them (freshly filled tables) the planner loops a join over every ready call,
    # which measured twice the subquery's cost. Only the calls are locked, so a conversation
    # busy appending an event is no reason to pass its calls over.
    pin = (
        f"AND (SELECT p.host FROM {CONVERSATIONS} p WHERE p.id = c.conversation_id) "
        f"IN ('', %(host)s) "
        if pinned
        else ""
    )
    return (
        f"WITH picked AS (SELECT c.id, c.updated_at FROM {CALLS} c WHERE c.state = 'ready' "
        f"AND c.tool_name = ANY(%(tools)s) {owner}{pin}ORDER BY c.created_at LIMIT %(limit)s "
        f"FOR UPDATE OF c SKIP LOCKED), "
        f"moved AS (UPDATE {CALLS} c SET state = 'running', generation = c.generation + 1, "
        f"updated_at = statement_timestamp() FROM picked WHERE c.id = picked.id "
        f"RETURNING c.id, c.generation, c.created_at, c.conversation_id, c.turn_id, c.tool_name, "
        f"c.arguments, picked.updated_at AS ready_at), "
        f"claimed AS (INSERT INTO {CLAIMS} (call_id, token, worker, generation, acquired_at, "
        f"heartbeat_at, expires_at, host, created_at) SELECT id, gen_random_uuid(), %(worker)s, "
        f"generation, statement_timestamp(), statement_timestamp(), "
        f"statement_timestamp() + %(lease)s * interval '1 second', '', statement_timestamp() "
        f"FROM moved RETURNING call_id, token, expires_at) "
        f"SELECT m.id, cl.token, m.generation, cl.expires_at, m.conversation_id, m.turn_id, "
        f"m.tool_name, m.arguments::text, v.owner_id, v.workspace, m.ready_at, v.host, "
        f"v.lost_host FROM moved m JOIN claimed cl "
        f"ON cl.call_id = m.id "
        f"JOIN {CONVERSATIONS} v ON v.id = m.conversation_id ORDER BY m.created_at"
    )


_CLAIM_SQL = {
    (by_owner, pinned): _claim_sql(by_owner, pinned)
    for by_owner in (False, True)
    for pinned in (False, True)
}


def claim_ready(
    *,
    tool_names: list[str],
    worker: str,
    limit: int,
    owner_id: Any,
    lease_seconds: float,
    host: str | None = None,
) -> list[ClaimedRow]:
    """``VendorSQL.claim_ready`` in one statement: the pick is ``FOR UPDATE SKIP LOCKED``, so
    concurrent claimers take different calls instead of waiting on the same ones."""
    params = {
        "tools": list(tool_names),
        "limit": limit,
        "owner": owner_id,
        "lease": lease_seconds,
        "worker": worker,
        "host": host,
    }
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_SQL[owner_id is not None, host is not None], params)
        return list(map(ClaimedRow._make, cursor.fetchall()))


# SKIP LOCKED: see VendorSQL.conversations_pin (lock order).
_PIN = (
    f"UPDATE {CONVERSATIONS} SET host = %(host)s, lost_host = '' WHERE id IN (SELECT id FROM "
    f"{CONVERSATIONS} WHERE id = ANY(%(ids)s) AND host = '' FOR UPDATE SKIP LOCKED) RETURNING id"
)


def conversations_pin(*, conversation_ids: list[Any], host: str) -> set[str]:
    """``VendorSQL.conversations_pin`` in one statement."""
    with connection.cursor() as cursor:
        cursor.execute(_PIN, {"ids": [maybe_uuid(i) for i in conversation_ids], "host": host})
        return {str(row[0]) for row in cursor.fetchall()}
