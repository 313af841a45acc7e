"""Frame budgets of history pages, snapshots and replay pages (docs/projections.md, "Frame budgets and replay pages").

History page or snapshot ``tools`` list::

    page = frame_page(records, loader=load_payloads, limit=50)
    page.as_history()          # {"items": [...], "nextCursor": ...}  (GET .../history)
    page.items                 # the snapshot's "tools" list

``records`` is an iterable of small records, **newest first**, read lazily: at most
``limit + 1`` records are taken from it (the extra one only tells whether a next page exists), so
a selector may hand over a lazy queryset of the whole history. A record is a mapping:

- a tool activity: ``{"tool_call_id": str, "payload_bytes": int, "state": dict,
  "cursor"?: any}``: ``state`` is the call's small ``tool.updated`` state (the item sent, with
  whatever keys the caller wants in it, e.g. ``toolCallId`` or a ``type`` discriminator) and
  ``payload_bytes`` the size of its stored ``payload_json``, the compact JSON of
  ``{"input"?, "inputOmitted"?, "output"?}``;
- any other item (a message, an event): ``{"item": dict, "item_bytes"?: int, "cursor"?: any}``,
  sent as given; ``item_bytes`` is its compact JSON size (computed with ``json_size`` when absent).

``loader(ids) -> {id: payload}`` is called at most once, with the ids of the calls whose payload is
sent (in page order), and never for a call that only carries a marker. Only the keys ``input``,
``inputOmitted`` and ``output`` of a payload are used; they are merged into the state.

Rules (the contract's; choices where it is silent are marked *choice*):

- At most ``limit`` (1…100) items.
- Payloads go in newest first while the sum of ``payload_bytes`` stays ≤ 262,144. With ``room``
  the payload bytes left, the first call that does not fit whole keeps its input when
  ``json_size(input) ≤ room // 2``, else drops it (``inputOmitted: true``), and its output is
  shrunk with ``shrink_tool_output(output, room − json_size(kept input) − 64)``; every older call
  carries its state and ``payloadOmitted: {"bytes": payload_bytes}``.
  *Choices:* a call with ``payload_bytes == 0`` has nothing to load or omit and is sent as its
  state alone (no marker, no load, and it does not end the payload run); when the room left is
  below 128 bytes the first call that does not fit gets the marker too, since the keys of a shrunk
  payload alone could pass the room. The sent payloads are measured after loading: one larger than
  its record said (a stale ``payload_bytes``) is shrunk into what was counted, so the payloads
  sent never exceed 262,144 JSON bytes whatever the records say.
- The frame: ``frame_overhead_bytes`` is the compact JSON size of the frame around this list,
  i.e. ``json_size(frame)`` with ``[]`` for the list and ``null`` for ``nextCursor``; the default
  is the history answer's ``{"items":[],"nextCursor":null}``. A snapshot passes the size of its
  whole frame (``conversation``, ``calls``, ``queue``, … and the websocket envelope). Items are
  counted as their JSON plus the commas between them, and a next cursor as its JSON in place of
  ``null``. When the frame would pass 917,504 bytes the oldest items move to the next page; a
  page always holds at least one item (*choice:* even when that one item alone passes the budget,
  which only an oversized message can do).
- ``next_cursor`` is the ``cursor`` of the first record left for the next page (the next page
  starts **at** it), ``None`` when every record was taken. Records without a ``cursor`` (a
  snapshot) give ``None``.

Replay pages: ``replay_page(encoded_events)`` counts how many of the already-encoded compact JSON
event texts (``bytes`` or ``str``, as stored; nothing is decoded) go in one replay page: at most
100 and at most 524,288 bytes summed, the first always.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from projections.json_cost import json_size, utf8_size
from projections.tool_output import shrink_tool_output

MAX_ITEMS = 100
PAYLOAD_BUDGET_BYTES = 262144
FRAME_BUDGET_BYTES = 917504
REPLAY_MAX_EVENTS = 100
REPLAY_BUDGET_BYTES = 524288

PAYLOAD_KEYS = ("input", "inputOmitted", "output")
# The reserve the contract takes from a shrunk output's budget for the payload's keys.
SHRINK_RESERVE_BYTES = 64
HISTORY_OVERHEAD_BYTES = len(json.dumps({"items": [], "nextCursor": None}, separators=(",", ":")))
_NULL_BYTES = 4

Loader = Callable[[list[Any]], Mapping[Any, Mapping[str, Any]]]

_FULL = "full"  # payload sent whole
_PARTIAL = "partial"  # the first call that did not fit whole: shrunk into the room left
_BARE = "bare"  # nothing stored: the state alone
_OMITTED = "omitted"  # older than the partial call: state plus payloadOmitted


@dataclass(frozen=True)
class FramePage:
    """One page: ``items`` newest first, and where the next page starts."""

    items: list[dict[str, Any]]
    next_cursor: Any
    payload_bytes: int  # payload JSON bytes sent, counted as the contract says (≤ 262,144)
    frame_bytes: int  # an upper bound of the frame's JSON size (≤ 917,504 unless one item)
    loaded_ids: tuple[Any, ...]  # what the loader was asked for

    def as_history(self) -> dict[str, Any]:
        """The history endpoint's answer ``{items, nextCursor}``."""
        return {"items": self.items, "nextCursor": self.next_cursor}


@dataclass
class _Planned:
    record: Mapping[str, Any]
    mode: str | None  # None for a non-tool item
    size: int  # upper bound of the item's JSON size
    room: int = 0  # payload bytes granted (full and partial calls)


def frame_page(
    records: Iterable[Mapping[str, Any]],
    *,
    loader: Loader,
    limit: int = MAX_ITEMS,
    frame_overhead_bytes: int = HISTORY_OVERHEAD_BYTES,
) -> FramePage:
    """Page of ≤ ``limit`` items whose payloads (≤ 256 KiB, newest first) and frame fit the budgets."""
    if not 1 <= limit <= MAX_ITEMS:
        raise ValueError(f"limit must be 1…{MAX_ITEMS}, not {limit}")
    planned, leftover = _plan(iter(records), limit, frame_overhead_bytes)

    ids = [p.record["tool_call_id"] for p in planned if p.mode in (_FULL, _PARTIAL)]
    payloads: Mapping[Any, Mapping[str, Any]] = loader(ids) if ids else {}

    items: list[dict[str, Any]] = []
    sent_bytes = 0
    for p in planned:
        item, counted = _build_item(p, payloads)
        items.append(item)
        sent_bytes += counted
    next_cursor = leftover.get("cursor") if leftover is not None else None
    return FramePage(
        items=items,
        next_cursor=next_cursor,
        payload_bytes=sent_bytes,
        frame_bytes=_frame_size(frame_overhead_bytes, planned, leftover),
        loaded_ids=tuple(ids),
    )


def replay_page(
    encoded_events: Iterable[bytes | str],
    *,
    max_events: int = REPLAY_MAX_EVENTS,
    budget: int = REPLAY_BUDGET_BYTES,
) -> int:
    """How many of the encoded events, in order, fill one replay page (the first always does).

    Sizes are the events' own bytes (a ``str`` counts its UTF-8 size): the server sends stored
    JSON text as it is. The iterable is read lazily, one event past the page at most.
    """
    if max_events < 1:
        raise ValueError("max_events must be at least 1")
    count = 0
    used = 0
    for event in encoded_events:
        if count == max_events:
            break
        size = utf8_size(event) if isinstance(event, str) else len(event)
        if count and used + size > budget:
            break
        used += size
        count += 1
    return count


# --- planning: which items go on the page, and which payloads, before anything is loaded --------


def _plan(
    records: Iterable[Mapping[str, Any]], limit: int, overhead: int
) -> tuple[list[_Planned], Mapping[str, Any] | None]:
    """The items of the page newest first, and the first record left for the next page."""
    planned: list[_Planned] = []
    leftover: Mapping[str, Any] | None = None
    room = PAYLOAD_BUDGET_BYTES
    payload_run_over = False  # set once a call did not fit whole: older calls get markers
    frame = overhead
    for record in records:
        if len(planned) == limit:
            leftover = record
            break
        if "item" in record:
            item_bytes = record.get("item_bytes")
            p = _Planned(
                record, None, json_size(record["item"]) if item_bytes is None else item_bytes
            )
        else:
            p, room, payload_run_over = _plan_call(record, room, payload_run_over)
        added = p.size + (1 if planned else 0)
        if planned and frame + added > FRAME_BUDGET_BYTES:
            leftover = record
            break
        planned.append(p)
        frame += added
    # The cursor replaces ``null`` in the frame: make room for it by moving more items out.
    while leftover is not None and len(planned) > 1:
        if _frame_size(overhead, planned, leftover) <= FRAME_BUDGET_BYTES:
            break
        leftover = planned.pop().record
    return planned, leftover


def _smallest_cut(payload_bytes: int) -> int:
    """The JSON size of the smallest payload the contract's cut can produce (input dropped, output
    emptied, every byte counted as omitted). The cut is applied whenever this fits the room,
    and then always fits it; below it the call gets a marker, decided before anything is
    loaded, so the loader still runs only for calls that are sent."""
    empty = {"text": "", "omittedBytes": payload_bytes, "tail": ""}
    return json_size({"inputOmitted": True, "output": empty})


def _plan_call(
    record: Mapping[str, Any], room: int, payload_run_over: bool
) -> tuple[_Planned, int, bool]:
    state = record["state"]
    payload_bytes = record.get("payload_bytes") or 0
    if payload_bytes <= 0:
        return _Planned(record, _BARE, json_size(state)), room, payload_run_over
    if not payload_run_over and payload_bytes <= room:
        size = json_size(state) + payload_bytes
        return _Planned(record, _FULL, size, payload_bytes), room - payload_bytes, False
    if not payload_run_over and room >= _smallest_cut(payload_bytes):
        return _Planned(record, _PARTIAL, json_size(state) + room, room), 0, True
    return _Planned(record, _OMITTED, json_size(_omitted_item(record))), room, True


def _frame_size(overhead: int, planned: list[_Planned], leftover: Mapping[str, Any] | None) -> int:
    size = overhead + sum(p.size for p in planned) + max(0, len(planned) - 1)
    cursor = leftover.get("cursor") if leftover is not None else None
    if cursor is not None:
        size += json_size(cursor) - _NULL_BYTES
    return size


# --- building: the items as sent -----------------------------------------------------------


def _build_item(p: _Planned, payloads: Mapping[Any, Mapping[str, Any]]) -> tuple[dict, int]:
    """The item for one planned record and the payload bytes it counts against the budget."""
    record = p.record
    if p.mode is None:
        return record["item"], 0
    if p.mode == _OMITTED:
        return _omitted_item(record), 0
    if p.mode == _BARE:
        return dict(record["state"]), 0
    stored = payloads.get(record["tool_call_id"])
    if stored is None:  # gone since the records were read: nothing to send
        return dict(record["state"]), 0
    payload = {key: stored[key] for key in PAYLOAD_KEYS if key in stored}
    if p.mode == _FULL and json_size(payload) <= p.room:
        return {**record["state"], **payload}, p.room
    # The partial call, or a stale payload_bytes: shrink the payload into what was counted.
    fitted = _fit_payload(payload, p.room)
    if fitted is None:
        return _omitted_item(record), 0
    return {**record["state"], **fitted}, json_size(fitted)


def _fit_payload(payload: dict[str, Any], room: int) -> dict[str, Any] | None:
    """The contract's cut of the first call that does not fit whole, checked to fit ``room``."""
    for keep_input in (True, False):
        fitted: dict[str, Any] = {}
        input_bytes = 0
        if "input" in payload:
            size = json_size(payload["input"])
            if keep_input and size <= room // 2:
                fitted["input"] = payload["input"]
                input_bytes = size
            else:
                fitted["inputOmitted"] = True
        elif "inputOmitted" in payload:
            fitted["inputOmitted"] = payload["inputOmitted"]
        output = payload.get("output")
        if isinstance(output, dict):
            budget = room - input_bytes - SHRINK_RESERVE_BYTES
            fitted["output"] = shrink_tool_output(output, budget)
        if json_size(fitted) <= room:
            return fitted
    return None


def _omitted_item(record: Mapping[str, Any]) -> dict[str, Any]:
    payload_bytes = record.get("payload_bytes") or 0
    item = dict(record["state"])
    if payload_bytes > 0:
        item["payloadOmitted"] = {"bytes": payload_bytes}
    return item
