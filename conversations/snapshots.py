"""What a client following a conversation reads when it (re)connects, and what it streams.

- ``snapshot_read``: the current state in one consistent read, within the frame budgets.
- ``history_page``: messages and tool cards, newest first, in conversation order, keyset-paged.
- ``live_publish``: an ephemeral piece of the assistant's reply, published, never stored.

The websocket consumer calls these functions too (in a thread; it closes its connections
itself). docs/subsystems/api.md, "Snapshot", "History" and "Live", says what clients get.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from itertools import chain, repeat
from typing import Any
from uuid import UUID

from django.db import transaction

from projections.frames import MAX_ITEMS, frame_page
from projections.json_cost import json_cost, json_size
from projections.units import clean_text
from tools.models import AsyncRun, ProcessStatus

from .errors import TurnNotOpen, ValidationFailed
from .exits import exits_by_call
from .models import Conversation, ConversationEvent, ToolActivity, ToolCall, Turn
from .selectors import conversation_for, queue_notices
from .services import publish
from .shapes import async_run_wire, call_wire, conversation_wire, event_wire, turn_wire
from .sql import vendor_sql

# What the snapshot's lists other than ``tools`` may take of the frame (JSON bytes); what they
# leave out is counted in ``omitted``. Together with the conversation they stay far below the
# frame budget, so the tool cards always have room for their 256 KiB of payloads.
CALLS_BUDGET_BYTES = 262_144
QUEUE_BUDGET_BYTES = 131_072
ASYNC_RUNS_BUDGET_BYTES = 65_536
# A bounded call takes at least ~400 bytes of JSON, so the calls budget cuts well before this
# many; reading no more keeps the read bounded even then.
UNFINISHED_READ_MAX = 1_000

# History: the events that are messages (the only ones with a messageId, see the index
# ``event_messages``), read in chunks that grow, so a page of a few large messages reads
# little more than it sends, and a page of small ones takes few queries.
HISTORY_MESSAGE_TYPES = (
    ConversationEvent.Type.USER_MESSAGE,
    ConversationEvent.Type.ASSISTANT_MESSAGE,
)
_MESSAGE_CHUNKS = (8, 16)
_MESSAGE_CHUNK_MAX = 32
_EVENT_COLUMNS = ("sequence", "type", "turn_id", "tool_call_id", "payload", "created_at")
_ACTIVITY_COLUMNS = (
    "tool_call_id",
    "ordinal",
    "after_sequence",
    "rev",
    "state_json",
    "payload_bytes",
)

_CURSOR = re.compile(r"h1:(\d{1,19}):(\d{1,19})")
_BOUND_MAX = 2**63 - 1  # a database integer

LIVE_KINDS = ("text", "arguments")
LIVE_DELTA_MAX_BYTES = 16_384
PROVIDER_CALL_ID_MAX_CHARS = 255


@contextmanager
def consistent_read() -> Iterator[None]:
    """A transaction whose queries all see one state of the database: REPEATABLE READ on
    PostgreSQL (set as its first statement), and on SQLite the transaction itself, which holds
    writers out. Nested in a caller's transaction it is a savepoint of that one, whose isolation
    is the caller's."""
    outermost = not transaction.get_connection().in_atomic_block
    with transaction.atomic():
        if outermost:
            vendor_sql().repeatable_read()
        yield


# --- the snapshot ----------------------------------------------------------------------------


def snapshot_read(user: Any, conversation_id: Any, *, envelope_bytes: int = 0) -> dict[str, Any]:
    """The conversation's current state, read consistently: ``lastSequence`` is exactly the
    last event the rest reflects. ``NotFound`` for a missing or another owner's conversation.

    ``{conversation, lastSequence, openTurn, calls, tools, queue, asyncRuns}`` (plus
    ``omitted`` when a list was cut to its budget). ``envelope_bytes``: the JSON bytes a frame
    adds around the snapshot (the websocket's ``{"type": "snapshot", …, "snapshot": …}``
    without the snapshot itself), so that the whole frame stays within 917,504 bytes.
    """
    with consistent_read():
        conversation = conversation_for(user, conversation_id)
        latest = Turn.objects.filter(conversation_id=conversation.pk).order_by("-ordinal").first()
        unfinished = ToolCall.objects.filter(conversation_id=conversation.pk)
        calls = list(
            unfinished.select_related("claim").order_by("created_at", "id")[:UNFINISHED_READ_MAX]
        )
        snapshot = _snapshot_lists(conversation, latest, calls)
        if len(calls) == UNFINISHED_READ_MAX:  # more may wait unread: count them all
            left = unfinished.count() - len(snapshot["calls"])
            snapshot.setdefault("omitted", {})["calls"] = left
        page = frame_page(
            _snapshot_records(latest, calls),
            loader=_load_payloads,
            limit=MAX_ITEMS,
            frame_overhead_bytes=json_size(snapshot) + envelope_bytes,
        )
    snapshot["tools"] = page.items
    return snapshot


def _snapshot_lists(
    conversation: Conversation, latest: Turn | None, calls: list[ToolCall]
) -> dict[str, Any]:
    """The snapshot with ``tools`` empty, each other list cut to its budget."""
    runs = AsyncRun.objects.filter(conversation_id=conversation.pk, status=ProcessStatus.RUNNING)
    omitted: dict[str, int] = {}
    open_turn = latest if latest is not None and latest.status == Turn.Status.OPEN else None
    snapshot = {
        "conversation": conversation_wire(conversation),
        "lastSequence": conversation.last_sequence,
        "openTurn": turn_wire(open_turn) if open_turn is not None else None,
        "calls": _within(
            [call_wire(c, bounded=True) for c in calls], CALLS_BUDGET_BYTES, "calls", omitted
        ),
        "tools": [],
        "queue": _within(queue_notices(conversation.pk), QUEUE_BUDGET_BYTES, "queue", omitted),
        "asyncRuns": _within(
            [async_run_wire(r) for r in runs.order_by("started_at", "id")],
            ASYNC_RUNS_BUDGET_BYTES,
            "asyncRuns",
            omitted,
        ),
    }
    if omitted:
        snapshot["omitted"] = omitted
    return snapshot


def _within(
    items: list[dict[str, Any]], budget: int, name: str, omitted: dict[str, int]
) -> list[dict[str, Any]]:
    """The first ``items`` whose JSON (commas included) fits ``budget``; how many were left
    out is recorded in ``omitted[name]``."""
    used = 0
    for count, item in enumerate(items):
        used += json_size(item) + (1 if count else 0)
        if used > budget:
            omitted[name] = len(items) - count
            return items[:count]
    return items


def _activity_rows(rows: Any) -> Any:
    """Activity rows without their payload, newest first (``payload_json`` is never read here:
    the loader reads the payloads that are sent)."""
    return rows.order_by("-ordinal").values(*_ACTIVITY_COLUMNS)


def _snapshot_records(latest: Turn | None, unfinished: list[ToolCall]) -> list[dict[str, Any]]:
    """The cards of the latest turn's calls and of unfinished calls of other turns (a turn
    settles its calls before it ends, so normally there are none), newest first."""
    rows = []
    if latest is not None:
        rows = list(_activity_rows(ToolActivity.objects.filter(turn_id=latest.pk))[: MAX_ITEMS + 1])
    elsewhere = [c.pk for c in unfinished if latest is None or c.turn_id != latest.pk]
    if elsewhere:
        rows.extend(_activity_rows(ToolActivity.objects.filter(tool_call_id__in=elsewhere)))
        rows.sort(key=lambda r: r["ordinal"], reverse=True)
    return [_tool_record(row) for row in rows[: MAX_ITEMS + 1]]


def _tool_record(row: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    """A frame record of an activity row: its small state with ``rev`` (``extra`` keys first)."""
    return {
        "tool_call_id": row["tool_call_id"],
        "payload_bytes": row["payload_bytes"],
        "state": {**extra, **row["state_json"], "rev": row["rev"]},
    }


def _load_payloads(ids: list[Any]) -> dict[Any, Any]:
    """The stored payloads of the cards sent, by their call ids (from the conversation's own
    rows): one query through the unique ``tool_call_id``, whatever the conversation's size."""
    rows = ToolActivity.objects.filter(tool_call_id__in=ids).order_by()
    return dict(rows.values_list("tool_call_id", "payload_json"))


# --- history ---------------------------------------------------------------------------------


def history_page(
    user: Any, conversation_id: Any, *, before: str | None, limit: int
) -> dict[str, Any]:
    """``{items, nextCursor}``: at most ``limit`` (1…100) messages and tool cards, newest
    first, in conversation order, within the frame budgets; ``nextCursor`` (null at the
    beginning of the conversation) is passed as ``before`` for the older page.

    A card comes right after the event its call followed: a model call's after the assistant
    message that asked for it, a ``!command``'s after the last event before its turn began.
    Older cards than the payload budget reaches carry ``payloadOmitted`` (their payloads are
    not read from the database). A card whose command ended carries its ``exit``. A page reads
    at most ``limit + 1`` cards (and their exits, in one query) and, in chunks, at most one
    chunk of messages more than it holds, through indexes, whatever the size of the
    conversation.
    """
    if not 1 <= limit <= MAX_ITEMS:
        raise ValidationFailed(f"limit: must be 1…{MAX_ITEMS}.", field="limit")
    with consistent_read():
        conversation = conversation_for(user, conversation_id)
        message_bound, tool_bound = _cursor_decode(before) if before else (None, None)
        records = _history_records(conversation.pk, message_bound, tool_bound, limit)
        page = frame_page(records, loader=_load_payloads, limit=limit)
    return page.as_history()


def _history_records(
    conversation_id: Any, message_bound: int | None, tool_bound: int | None, limit: int
) -> Iterator[dict[str, Any]]:
    """The merge of the two streams, newest first. Each record's ``cursor`` holds both
    streams' positions before it, so a page starts exactly at its first record.

    In conversation order an item sits at (sequence, 0) for a message and (after_sequence, 1,
    ordinal) for a card: a card follows the message it came after. ``frame_page`` takes at
    most ``limit + 1`` records, so ``limit + 1`` card rows always leave a head to name."""
    activities = ToolActivity.objects.filter(conversation_id=conversation_id)
    if tool_bound is not None:
        activities = activities.filter(ordinal__lte=tool_bound)
    rows = list(_activity_rows(activities)[: limit + 1])
    # How the cards' commands ended: not part of a ``tool.updated`` state, so beside it.
    exits = exits_by_call(row["tool_call_id"] for row in rows)
    tools = iter(rows)
    messages = _message_rows(conversation_id, message_bound)
    message, tool = next(messages, None), next(tools, None)
    while message is not None or tool is not None:
        cursor = _cursor_encode(
            message.sequence if message is not None else 0,
            tool["ordinal"] if tool is not None else 0,
        )
        if tool is not None and (message is None or tool["after_sequence"] >= message.sequence):
            ended = exits.get(tool["tool_call_id"])
            extra = {"type": "tool"} if ended is None else {"type": "tool", "exit": ended}
            yield {**_tool_record(tool, **extra), "cursor": cursor}
            tool = next(tools, None)
        else:
            assert message is not None
            yield {"item": {"type": "message", "event": event_wire(message)}, "cursor": cursor}
            message = next(messages, None)


def _message_rows(conversation_id: Any, bound: int | None) -> Iterator[ConversationEvent]:
    """The conversation's messages with ``sequence ≤ bound``, newest first, read lazily in
    chunks through the partial index ``event_messages``."""
    rows = (
        ConversationEvent.objects.filter(
            conversation_id=conversation_id,
            message_id__isnull=False,
            type__in=HISTORY_MESSAGE_TYPES,
        )
        .only(*_EVENT_COLUMNS)
        .order_by("-sequence")
    )
    for size in chain(_MESSAGE_CHUNKS, repeat(_MESSAGE_CHUNK_MAX)):
        chunk = list((rows if bound is None else rows.filter(sequence__lte=bound))[:size])
        yield from chunk
        if len(chunk) < size:
            return
        bound = chunk[-1].sequence - 1


def _cursor_encode(message_bound: int, tool_bound: int) -> str:
    """Opaque: the highest message sequence and card ordinal the next page may hold (0: none
    left of that kind)."""
    raw = f"h1:{message_bound}:{tool_bound}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _cursor_decode(cursor: str) -> tuple[int, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raw = ""
    match = _CURSOR.fullmatch(raw)
    if match is None or max(int(match[1]), int(match[2])) > _BOUND_MAX:
        raise ValidationFailed("before: not a cursor this server issued.", field="before")
    return int(match[1]), int(match[2])


# --- live ------------------------------------------------------------------------------------


def live_publish(
    user: Any,
    conversation_id: Any,
    *,
    turn_id: Any,
    kind: str,
    delta: str,
    provider_call_id: str | None = None,
) -> None:
    """Publish a piece of the assistant's reply as it streams, before its message is posted:
    ``conversation.live`` to the conversation's subscribers, at once. Nothing is stored.

    ``kind`` is ``text`` (assistant text) or ``arguments`` (a fragment of a tool call's
    arguments; then ``provider_call_id``, the ``id`` its ``tool_call`` block will have, is
    required; with ``text`` it is refused). ``delta``: a non-empty string of JSON cost ≤ 16,384.
    Refusals: ``ValidationFailed`` naming the field, ``NotFound`` for a missing or another
    owner's conversation, ``TurnNotOpen`` when ``turn_id`` is not its open turn.
    """
    fields = _live_fields(turn_id, kind, delta, provider_call_id)
    conversation = conversation_for(user, conversation_id)
    open_turn = (
        Turn.objects.filter(conversation_id=conversation.pk, status=Turn.Status.OPEN)
        .values_list("id", flat=True)
        .first()
    )
    if open_turn is None or str(open_turn) != fields["turnId"]:
        raise TurnNotOpen("The turnId does not name the open turn.", field="turnId")
    group = publish.conversation_group(conversation.pk)
    message = {"type": "conversation.live", "conversationId": str(conversation.pk), **fields}
    publish.send_now([(group, message)])


def _live_fields(turn_id: Any, kind: Any, delta: Any, provider_call_id: Any) -> dict[str, Any]:
    """The checked fields of a live message, in wire order."""
    try:
        turn = str(UUID(str(turn_id)))
    except ValueError as exc:
        raise ValidationFailed("turnId: must be a UUID.", field="turnId") from exc
    if kind not in LIVE_KINDS:
        raise ValidationFailed('kind: must be "text" or "arguments".', field="kind")
    if not isinstance(delta, str) or not delta:
        raise ValidationFailed("delta: must be a non-empty string.", field="delta")
    delta = clean_text(delta)
    if json_cost(delta) > LIVE_DELTA_MAX_BYTES:
        raise ValidationFailed(
            f"delta: at most {LIVE_DELTA_MAX_BYTES} bytes of JSON a message.", field="delta"
        )
    fields = {"turnId": turn, "kind": kind, "delta": delta}
    if kind == "text":
        if provider_call_id is not None:
            raise ValidationFailed(
                'providerCallId: only with kind "arguments".', field="providerCallId"
            )
        return fields
    if (
        not isinstance(provider_call_id, str)
        or not 0 < len(provider_call_id) <= PROVIDER_CALL_ID_MAX_CHARS
    ):
        raise ValidationFailed(
            f'providerCallId: required with kind "arguments", 1…{PROVIDER_CALL_ID_MAX_CHARS} '
            "characters.",
            field="providerCallId",
        )
    fields["providerCallId"] = clean_text(provider_call_id)
    return fields
