"""Reads for the API, the web pages, the admin and the services: owner-scoped lookups, pages,
details, turn results, and a settled call's response.

Another owner's resource raises ``NotFound``, exactly like a missing one. Nothing here writes,
and nothing here imports a service: services read through these functions.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce

from projections.frames import REPLAY_MAX_EVENTS, replay_page
from tools.models import AsyncRun, Launch, WorkerHeartbeat

from .errors import CursorAhead, NotFound, ValidationFailed, found
from .exits import exit_of, exit_wire
from .models import (
    Asset,
    Conversation,
    ConversationEvent,
    McpSession,
    ToolActivity,
    ToolCall,
    Turn,
)
from .shapes import (
    activity_state,
    asset_wire,
    call_wire,
    conversation_wire,
    event_wire,
    settled_call_wire,
)
from .sql import vendor_sql
from .sql.interface import ReplayPage, ReplayRow
from .storage import asset_store


def _uuid(value: Any, what: str) -> UUID:
    try:
        return UUID(str(value))
    except ValueError as exc:
        raise NotFound(f"{what} not found.") from exc


def conversation_for(user: Any, conversation_id: Any) -> Conversation:
    return found(Conversation.objects.filter(owner_id=user.pk), conversation_id, "Conversation")


def _encode_cursor(created_at: datetime, pk: Any) -> str:
    raw = f"{created_at.isoformat()}|{pk}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, pk = raw.split("|", 1)
        moment = datetime.fromisoformat(stamp)
        if moment.tzinfo is None:
            raise ValueError("naive time")
        return moment, str(UUID(pk))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValidationFailed("The cursor is not valid.", field="cursor") from exc


def conversations_page(user: Any, *, cursor: str | None, limit: int) -> dict[str, Any]:
    """The user's conversations, newest first."""
    rows = Conversation.objects.filter(owner_id=user.pk).order_by("-created_at", "-id")
    if cursor:
        stamp, pk = _decode_cursor(cursor)
        rows = rows.filter(created_at__lte=stamp).exclude(created_at=stamp, id__gte=pk)
    page = list(rows[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    next_cursor = _encode_cursor(page[-1].created_at, page[-1].pk) if more and page else None
    return {"items": [conversation_wire(c) for c in page], "nextCursor": next_cursor}


_WAITING_STATES = (ToolCall.State.AWAITING_APPROVAL, ToolCall.State.AWAITING_INPUT)


def conversations_overview(user: Any, *, cursor: str | None, limit: int) -> dict[str, Any]:
    """The user's conversations for the home page, newest first: each with its last activity
    (its last event's time, else its creation), whether a turn is open, and how many calls wait
    on the user (awaiting approval or input). One query for the page; ``nextCursor`` as the
    API's list has it."""
    last_event = ConversationEvent.objects.filter(
        conversation_id=OuterRef("pk"), sequence=OuterRef("last_sequence")
    ).values("created_at")[:1]
    waiting = (
        ToolCall.objects.filter(conversation_id=OuterRef("pk"), state__in=_WAITING_STATES)
        .order_by()
        .values("conversation_id")
        .annotate(n=Count("pk"))
        .values("n")
    )
    rows = (
        Conversation.objects.filter(owner_id=user.pk)
        .order_by("-created_at", "-id")
        .annotate(
            last_event_at=Subquery(last_event),
            open_turn=Exists(Turn.objects.filter(conversation_id=OuterRef("pk"), status="open")),
            waiting=Coalesce(Subquery(waiting), 0),
        )
    )
    if cursor:
        stamp, pk = _decode_cursor(cursor)
        rows = rows.filter(created_at__lte=stamp).exclude(created_at=stamp, id__gte=pk)
    page = list(rows[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    items = [
        {
            "id": str(c.pk),
            "title": c.title,
            "lastActivity": c.last_event_at or c.created_at,
            "openTurn": c.open_turn,
            "waiting": c.waiting,
        }
        for c in page
    ]
    next_cursor = _encode_cursor(page[-1].created_at, page[-1].pk) if more and page else None
    return {"items": items, "nextCursor": next_cursor}


_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _replay_rows(user: Any, conversation_id: Any, after: int, limit: int) -> ReplayPage:
    """The head and up to ``limit`` event rows after ``after``; owner-scoped (404). Stored
    payload text passes through, times come formatted by the database: no model instances and
    no JSON decoding (decoding is what dominates replay reads)."""
    page = vendor_sql().replay_rows(
        conversation_id=_uuid(conversation_id, "Conversation"),
        owner_id=user.pk,
        after=after,
        limit=limit,
    )
    if page is None:
        raise NotFound("Conversation not found.")
    return page


def _wire_uuid(value: str | None) -> str:
    """A stored UUID as a JSON string: PostgreSQL's text is canonical, SQLite stores hex."""
    if value is None:
        return "null"
    return f'"{value}"' if len(value) == 36 else f'"{UUID(hex=value)}"'


def event_texts(rows: list[ReplayRow]) -> list[tuple[int, str]]:
    """``(sequence, compact JSON text)`` of replay rows, as the wire carries them."""
    return [
        (
            sequence,
            f'{{"sequence":{sequence},"type":{_ENCODE(type_)},"turnId":{_wire_uuid(turn_id)},'
            f'"toolCallId":{_wire_uuid(call_id)},"payload":{payload},"createdAt":"{created_at}"}}',
        )
        # The cursor's tuples, in ReplayRow's order (interface.py: why not a NamedTuple).
        for sequence, type_, turn_id, call_id, payload, created_at in rows
    ]


def replay_read(
    user: Any, conversation_id: Any, *, after: int, limit: int
) -> tuple[int, list[tuple[int, str]]]:
    """The head and up to ``limit`` events after ``after``, encoded; owner-scoped (404)."""
    page = _replay_rows(user, conversation_id, after, limit)
    return page.last_sequence, event_texts(page.events)


def events_page_json(user: Any, conversation_id: Any, *, after: int, limit: int) -> str:
    """``{events, lastSequence, nextAfter}`` as JSON text, ≤ ``limit`` events and ≤ 512 KiB.

    The stored payload text is passed through without decoding; the first event always goes
    in. ``nextAfter`` is null only when the page reaches ``lastSequence``; ``after`` beyond it
    is ``cursor_ahead``.
    """
    last, events = replay_read(
        user, conversation_id, after=after, limit=min(limit, REPLAY_MAX_EVENTS)
    )
    if after > last:
        raise CursorAhead(f"after={after} is beyond the last sequence {last}.", field="after")
    texts = [text for _, text in events]
    count = replay_page(texts)
    reached = events[count - 1][0] if count else after
    next_after = None if reached >= last else reached
    return (
        f'{{"events":[{",".join(texts[:count])}],"lastSequence":{last},'
        f'"nextAfter":{"null" if next_after is None else next_after}}}'
    )


def call_response(call_id: Any) -> QuerySet[ConversationEvent]:
    """The response event of the call ``call_id`` (its ``tool_call_response``) as a queryset of
    at most one row (``event_one_response_per_call``): the caller takes ``.first()``,
    ``.exists()`` or only the values it needs (a response's payload can be large). ``call_id``
    may be an ``OuterRef``."""
    return ConversationEvent.objects.filter(
        tool_call_id=call_id, type=ConversationEvent.Type.TOOL_CALL_RESPONSE
    )


def call_responses(call_ids: Iterable[Any]) -> QuerySet[ConversationEvent]:
    """The response events of those of ``call_ids`` that settled, as a queryset."""
    return ConversationEvent.objects.filter(
        tool_call_id__in=list(call_ids), type=ConversationEvent.Type.TOOL_CALL_RESPONSE
    )


def call_response_payload(call_id: Any) -> dict[str, Any] | None:
    """The payload of the call's response; None while it has none."""
    return call_response(call_id).values_list("payload", flat=True).first()


def call_for(user: Any, call_id: Any) -> tuple[ToolCall | None, ConversationEvent | None]:
    """The unfinished call, or else its response event; owner-scoped."""
    pk = _uuid(call_id, "Tool call")
    call = (
        ToolCall.objects.select_related("claim", "conversation")
        .filter(pk=pk, conversation__owner_id=user.pk)
        .first()
    )
    if call is not None:
        return call, None
    event = call_response(pk).filter(conversation__owner_id=user.pk).first()
    if event is None:
        raise NotFound("Tool call not found.")
    return None, event


def call_detail(user: Any, call_id: Any) -> dict[str, Any]:
    call, event = call_for(user, call_id)
    if call is not None:
        return call_wire(call)
    assert event is not None
    return settled_call_wire(event)


def call_details(user: Any, call_id: Any) -> dict[str, Any]:
    """On demand: model and transcript projections, the ``tool.updated`` state, the assets, and
    how its command ended (``exit``, null while it runs or for a call that ran none)."""
    call, event = call_for(user, call_id)
    pk = call.pk if call is not None else event.tool_call_id  # type: ignore[union-attr]
    activity = ToolActivity.objects.filter(tool_call_id=pk).first()
    ended = exit_of(pk) if call is None else None
    assets = Asset.objects.filter(tool_call_id=pk).order_by("created_at")
    payload = event.payload if event is not None else None
    return {
        "id": str(pk),
        "state": call.state if call is not None else None,
        "outcome": payload["outcome"] if payload else None,
        "modelContent": payload["modelContent"] if payload else None,
        "userProjection": payload["userProjection"] if payload else None,
        "toolUpdate": activity_state(activity) if activity is not None else None,
        "assets": [asset_wire(a, asset_store().location(a.path)) for a in assets],
        "exit": exit_wire(ended) if ended is not None else None,
    }


def asset_for(user: Any, asset_id: Any) -> Asset:
    return found(Asset.objects.filter(conversation__owner_id=user.pk), asset_id, "Asset")


def turn_for(conversation: Conversation, turn_id: Any) -> Turn:
    return found(Turn.objects.filter(conversation_id=conversation.pk), turn_id, "Turn")


def queue_notices(conversation_id: UUID | str) -> list[dict[str, Any]]:
    """Unacknowledged ``async_bash_event`` events, oldest first, as wire events."""
    sequences = AsyncRun.objects.filter(
        conversation_id=conversation_id, acknowledged=False, notice_sequence__isnull=False
    ).values_list("notice_sequence", flat=True)
    events = ConversationEvent.objects.filter(
        conversation_id=conversation_id,
        type=ConversationEvent.Type.ASYNC_BASH_EVENT,
        sequence__in=list(sequences),
    ).order_by("sequence")
    return [event_wire(e) for e in events]


def _result(call_id: Any, payload: dict[str, Any]) -> dict[str, Any]:
    result = {
        "toolCallId": str(call_id),
        "providerCallId": payload["providerCallId"],
        "contentIndex": payload["contentIndex"],
        "toolName": payload["toolName"],
        "outcome": payload["outcome"],
        "modelContent": payload["modelContent"],
    }
    if "includeInContext" in payload:
        result["includeInContext"] = payload["includeInContext"]
    return result


def turn_results(conversation_id: Any, turn_id: Any) -> dict[str, Any]:
    """The turn barrier's answer now: the pending calls, or the settled results of the turn's
    latest assistant message in ``contentIndex`` order (of a command's turn: its one call, with
    ``includeInContext``)."""
    pending = list(
        ToolCall.objects.filter(turn_id=turn_id).order_by("created_at").values_list("id", "state")
    )
    if pending:
        return {
            "settled": False,
            "pending": [{"toolCallId": str(i), "state": s} for i, s in pending],
        }
    E = ConversationEvent.Type
    latest = (
        ConversationEvent.objects.filter(turn_id=turn_id, type=E.ASSISTANT_MESSAGE)
        .order_by("-sequence")
        .values_list("sequence", flat=True)
        .first()
    )
    responses = ConversationEvent.objects.filter(
        turn_id=turn_id, type=E.TOOL_CALL_RESPONSE
    ).values_list("tool_call_id", "payload")
    results = [
        _result(call_id, payload)
        for call_id, payload in responses
        # A command's call has no assistant message: its sequence is null like the latest's.
        if payload.get("assistantSequence") == latest
    ]
    results.sort(key=lambda r: (r["contentIndex"] is not None, r["contentIndex"] or 0))
    return {"settled": True, "results": results, "queue": queue_notices(conversation_id)}


# Ids a query of ``unfinished_marks`` names at most (SQLite's bound on a statement's variables
# is far above; a long list is cut into such queries).
MARKS_CHUNK = 500


def unfinished_marks(
    turn_ids: Iterable[Any], call_ids: Iterable[Any]
) -> dict[tuple[str, str], frozenset[tuple[str, str, int]]]:
    """What the waiters of a process watch, in one query per ``MARKS_CHUNK`` ids: for each turn
    ``("turn", id)`` and each call ``("call", id)``, the ``(call id, state, generation)`` of its
    unfinished calls (empty once none is left: settled calls leave the table). Any change of a
    mark is news to its waiters."""
    turns = [str(t) for t in turn_ids]
    calls = [str(c) for c in call_ids]
    marks: dict[tuple[str, str], set[tuple[str, str, int]]] = {
        **{("turn", t): set() for t in turns},
        **{("call", c): set() for c in calls},
    }
    for start in range(0, max(len(turns), len(calls)), MARKS_CHUNK):
        some_turns, some_calls = (
            turns[start : start + MARKS_CHUNK],
            calls[start : start + MARKS_CHUNK],
        )
        rows = ToolCall.objects.filter(
            Q(turn_id__in=some_turns) | Q(pk__in=some_calls)
        ).values_list("pk", "turn_id", "state", "generation")
        for pk, turn_id, state, generation in rows:
            mark = (str(pk), state, generation)
            for key in (("turn", str(turn_id)), ("call", str(pk))):
                if key in marks:
                    marks[key].add(mark)
    return {key: frozenset(value) for key, value in marks.items()}


def async_run_for(user: Any, run_id: Any) -> AsyncRun:
    """The async run of one of the user's conversations; another owner's answers 404."""
    return found(AsyncRun.objects.filter(conversation__owner_id=user.pk), run_id, "Async run")


def launches_page(user: Any, *, cursor: str | None, limit: int) -> tuple[list[Launch], str | None]:
    """The user's launches, newest first, and the cursor of the next page."""
    rows = Launch.objects.filter(owner_id=user.pk).order_by("-created_at", "-id")
    if cursor:
        stamp, pk = _decode_cursor(cursor)
        rows = rows.filter(created_at__lte=stamp).exclude(created_at=stamp, id__gte=pk)
    page = list(rows[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    return page, (_encode_cursor(page[-1].created_at, page[-1].pk) if more and page else None)


def mcp_session_for(user: Any, session_id: str) -> McpSession:
    """The user's MCP session of that ``Mcp-Session-Id``; another user's answers ``NotFound``
    exactly as an unknown one (docs/mcp.md)."""
    hit = list(McpSession.objects.filter(pk=session_id, user_id=user.pk).order_by()[:1])
    if not hit:
        raise NotFound("Session not found.")
    return hit[0]


def call_progress(call_id: Any) -> dict[str, Any]:
    """Where a call stands, for a waiter: ``{"settled": False, "state", "interaction",
    "resolutionRequestId"}`` while it is unfinished, ``{"settled": True, "payload"}`` (its response's) once it settled;
    ``NotFound`` when neither exists."""
    row = (
        ToolCall.objects.filter(pk=call_id)
        .values_list("state", "interaction", "resolution_request_id")
        .first()
    )
    if row is not None:
        state, interaction, request_id = row
        return {
            "settled": False,
            "state": state,
            "interaction": interaction,
            "resolutionRequestId": request_id,
        }
    payload = call_response_payload(call_id)
    if payload is None:
        raise NotFound("Tool call not found.")
    return {"settled": True, "payload": payload}


def assets_of(asset_ids: Iterable[Any]) -> list[Asset]:
    """The asset rows of ``asset_ids``, in that order (those that exist)."""
    ids = [UUID(str(i)) for i in asset_ids]
    rows = {a.pk: a for a in Asset.objects.filter(pk__in=ids)}
    return [rows[i] for i in ids if i in rows]


def async_run_id_of(call_id: Any) -> str | None:
    """The async run the ``bash`` call ``call_id`` started (gone to the background), if any."""
    run_id = AsyncRun.objects.filter(tool_call_id=call_id).values_list("pk", flat=True).first()
    return None if run_id is None else str(run_id)


def workers_alive_by_host() -> dict[str, int]:
    """Tool workers running whose heartbeat is younger than the lease, per host; a host whose
    workers all died or stopped (their rows are kept a day, ``tools/runtime/presence.py``)
    shows 0. ``/metrics`` and ``/readyz`` both read it."""
    cutoff = vendor_sql().now(-timedelta(seconds=settings.TOOLCORE_CLAIM_LEASE))
    rows = (
        WorkerHeartbeat.objects.order_by()
        .values_list("host")
        .annotate(alive=Count("pk", filter=Q(heartbeat_at__gte=cutoff, stopped_at__isnull=True)))
    )
    return dict(rows)
