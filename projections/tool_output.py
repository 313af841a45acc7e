"""Bounded tool output: the ``output`` of ``tool.updated`` within 16 KiB of JSON, whole or as
head, omitted bytes and tail, streamed in deltas (docs/projections.md, "Bounded output").

Django-free. The cost of the tail a stream passes back is remembered, so bounding a
text and streaming deltas into a bounded output are linear in the text's length.
"""

from __future__ import annotations

import threading
from typing import Any

from projections.json_cost import json_cost, prefix_within, suffix_within, utf8_between
from projections.units import size_words

TOOL_OUTPUT_MAX_BYTES = 16384
HEAD = 4096
OVERHEAD = 64
TAIL = TOOL_OUTPUT_MAX_BYTES - HEAD - OVERHEAD  # 12224

# An output whose text costs at most this is kept whole: head and tail together.
_WHOLE_MAX_BYTES = HEAD + TAIL  # 16320


class _CostMemo:
    """The JSON cost of the last texts and tails made here, found by identity.

    A stream passes back the output it was given, so the cost of its tail is known without
    costing the tail again: a delta then costs time in its own length, not the tail's. A miss
    (say, an output read back from the database) only costs the tail once more.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: dict[int, tuple[str, int]] = {}
        self._lock = threading.Lock()

    def cost(self, s: str) -> int:
        item = self._items.get(id(s))
        if item is not None and item[0] is s:
            return item[1]
        return json_cost(s)

    def remember(self, s: str, cost: int) -> None:
        with self._lock:
            self._items.pop(id(s), None)
            self._items[id(s)] = (s, cost)  # holding `s` keeps its id from being reused
            while len(self._items) > self._size:
                del self._items[next(iter(self._items))]


_COSTS = _CostMemo(64)


def bound_tool_output(text: str) -> dict[str, Any]:
    """``{"text": text}`` when it costs ≤ 16320 JSON bytes, else head, ``omittedBytes``, tail.

    The head is the longest prefix costing ≤ ``HEAD``, the tail the longest suffix costing ≤
    ``TAIL`` that starts at or after the head's end, and ``omittedBytes`` (> 0) the UTF-8 size of
    what lies between.
    """
    n = len(text)
    if n <= _WHOLE_MAX_BYTES:
        cost = json_cost(text)
        if cost <= _WHOLE_MAX_BYTES:
            _COSTS.remember(text, cost)
            return {"text": text}
    head, _ = prefix_within(text, HEAD)
    tail, tail_cost = suffix_within(text, TAIL, head)
    kept = text[n - tail :]
    _COSTS.remember(kept, tail_cost)
    return {"text": text[:head], "omittedBytes": utf8_between(text, head, n - tail), "tail": kept}


def append_tool_output(prev: dict[str, Any] | None, delta: str) -> dict[str, Any]:
    """The bounded output of the text of ``prev`` followed by ``delta``.

    Any chunking of a text gives exactly ``bound_tool_output`` of the whole text: the head never
    moves, and once cut the tail becomes ``tail + delta`` less its shortest prefix that brings it
    to ≤ ``TAIL``, whose UTF-8 size is added to ``omittedBytes``. Streaming is linear: a delta
    appended to the output this function last returned costs time in the delta's length.
    ``prev`` is returned as it is for an empty delta; it is never modified.
    """
    if prev is None:
        return bound_tool_output(delta)
    if not delta:
        return prev
    if "tail" not in prev:
        text = prev["text"]
        if len(delta) <= _WHOLE_MAX_BYTES:
            cost = _COSTS.cost(text) + json_cost(delta)
            if cost <= _WHOLE_MAX_BYTES:
                joined = text + delta
                _COSTS.remember(joined, cost)
                return {"text": joined}
        return bound_tool_output(text + delta)
    tail = prev["tail"]
    joined = tail + delta
    if len(delta) >= TAIL:
        # The delta alone fills the tail or nearly: look from the end, never costing it whole.
        n = len(joined)
        kept, kept_cost = suffix_within(joined, TAIL)
        drop = n - kept
    else:
        total = _COSTS.cost(tail) + json_cost(delta)
        if total <= TAIL:
            drop, kept_cost = 0, total
        else:
            # The shortest prefix costing ≥ total - TAIL: one past the longest costing less.
            short, short_cost = prefix_within(joined, total - TAIL - 1)
            drop = short + 1
            kept_cost = total - short_cost - json_cost(joined[short])
    kept_tail = joined[drop:] if drop else joined
    _COSTS.remember(kept_tail, kept_cost)
    return {
        "text": prev["text"],
        "omittedBytes": prev["omittedBytes"] + utf8_between(joined, 0, drop),
        "tail": kept_tail,
    }


def shrink_tool_output(out: dict[str, Any], budget: int) -> dict[str, Any]:
    """``out`` with head and tail together costing at most ``max(0, budget - OVERHEAD)``.

    Unchanged (the same object) when it already fits. Otherwise the new head is the longest
    prefix of the head costing ≤ room // 4 and the new tail the longest suffix costing ≤ room -
    cost(new head) of the old tail (or, for an output that was not cut, of the text after the new
    head); every dropped byte is added to ``omittedBytes``. For ``budget >= OVERHEAD`` the
    result's ``json_size`` is at most ``budget``.
    """
    room = max(0, budget - OVERHEAD)
    text = out["text"]
    cut = "tail" in out
    if json_cost(text) + (json_cost(out["tail"]) if cut else 0) <= room:
        return out
    head, head_cost = prefix_within(text, room // 4)
    if cut:
        old_tail = out["tail"]
        t = len(old_tail)
        tail, _ = suffix_within(old_tail, room - head_cost)
        omitted = (
            out["omittedBytes"]
            + utf8_between(text, head, len(text))
            + utf8_between(old_tail, 0, t - tail)
        )
        new_tail = old_tail[t - tail :]
    else:
        n = len(text)
        tail, _ = suffix_within(text, room - head_cost, head)
        omitted = utf8_between(text, head, n - tail)
        new_tail = text[n - tail :]
    return {"text": text[:head], "omittedBytes": omitted, "tail": new_tail}


def render_tool_output(out: dict[str, Any]) -> str:
    """The text of a bounded output, with ``[SIZE of output not shown]`` where it was cut."""
    if "tail" not in out:
        return out["text"]
    return f"{out['text']}\n[{size_words(out['omittedBytes'])} of output not shown]\n{out['tail']}"
