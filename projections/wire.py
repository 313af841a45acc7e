"""Wire budgets of ``tool.updated``: JSON cost, bounded output and bounded input.

Pure Python, no Django (spec projections.md, "JSON cost" to "Bounded input"). Budgets count
**JSON bytes**: the UTF-8 size of a string's body written as JSON with non-ASCII kept.

Costs are computed in C-speed passes (``str.encode`` and ``bytes.translate``), never a Python
loop per code point over a whole text. A cut is found from a guess, then by halving, costing only
the stretch still undecided (costs add up per code point), and the cost of the tail a stream
passes back is remembered, so bounding a text and streaming deltas into a bounded output are
linear in the text's length.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any

from projections.units import size_words

TOOL_OUTPUT_MAX_BYTES = 16384
HEAD = 4096
OVERHEAD = 64
TAIL = TOOL_OUTPUT_MAX_BYTES - HEAD - OVERHEAD  # 12224
INPUT_MAX_BYTES = 4096

# An output whose text costs at most this is kept whole: head and tail together.
_WHOLE_MAX_BYTES = HEAD + TAIL  # 16320

# Bytes that JSON escapes: controls, '"' and '\'. Each costs one more than its UTF-8 byte ('\n'
# is two bytes), and the controls without a short escape cost five more ('\u0001').
_ESCAPED = bytes(range(0x20)) + b'"\\'
_NOT_ESCAPED = bytes(b for b in range(256) if b not in _ESCAPED)
_SHORT_ESCAPED = b'"\\\b\t\n\f\r'
# A lone surrogate encoded with 'surrogatepass' is ED A0..BF xx; valid UTF-8 never holds it.
_SURROGATE_BYTES = re.compile(rb"\xed[\xa0-\xbf]")
# Work on huge strings in slices of this many code points, so memory stays bounded.
_CHUNK = 1 << 20

ELLIPSIS = "\u2026"

EDIT_TOOL_NAMES = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit", "edit", "write"})
EDIT_BODY_KEYS = frozenset(
    {
        "old_string",
        "new_string",
        "oldString",
        "newString",
        "old_text",
        "new_text",
        "oldText",
        "newText",
        "old_source",
        "new_source",
        "content",
        "contents",
    }
)
PATCH_KEYS = frozenset(
    {
        "patch",
        "patchText",
        "patch_text",
        "diff",
        "diffText",
        "diff_text",
        "unifiedDiff",
        "unified_diff",
    }
)
INPUT_MAX_ENTRIES = 64
INPUT_MAX_DEPTH = 8
INPUT_STRING_LIMITS = (2048, 1024, 512, 256, 128, 64)


def _encode(s: str) -> bytes:
    return s.encode("utf-8", "surrogatepass")


def _chunks(s: str) -> Iterable[str]:
    if len(s) <= _CHUNK:
        yield s
        return
    for i in range(0, len(s), _CHUNK):
        yield s[i : i + _CHUNK]


def _cost(s: str) -> int:
    data = _encode(s)
    escaped = data.translate(None, _NOT_ESCAPED)
    cost = len(data) + len(escaped)
    if escaped:
        cost += 4 * len(escaped.translate(None, _SHORT_ESCAPED))
    if b"\xed" in data:
        # 3 UTF-8 bytes with 'surrogatepass', 6 as a '\udXXX' escape.
        cost += 3 * len(_SURROGATE_BYTES.findall(data))
    return cost


def json_cost(s: str) -> int:
    """The JSON bytes of the body of ``s`` written as a JSON string with non-ASCII kept.

    Per code point: '"' and '\\' 2; '\\b \\t \\n \\f \\r' 2; other controls 6; below U+0080 1;
    below U+0800 2; a lone surrogate 6 (its '\\uXXXX' escape); below U+10000 3; others 4.
    """
    if len(s) <= _CHUNK:
        return _cost(s)
    return sum(_cost(chunk) for chunk in _chunks(s))


def utf8_size(s: str) -> int:
    """Plain UTF-8 bytes of ``s``; a lone surrogate counts 3. ``omittedBytes`` counts these."""
    if s.isascii():  # O(1) in CPython
        return len(s)
    return sum(len(_encode(chunk)) for chunk in _chunks(s))


def _utf8_between(s: str, start: int, stop: int) -> int:
    """``utf8_size(s[start:stop])`` without copying a huge middle at once."""
    if stop <= start:
        return 0
    if s.isascii():
        return stop - start
    return sum(len(_encode(s[i : min(i + _CHUNK, stop)])) for i in range(start, stop, _CHUNK))


def _int_size(value: int) -> int:
    try:
        return len(int.__repr__(value))
    except ValueError:  # beyond sys.get_int_max_str_digits(): count the digits arithmetically
        magnitude = abs(value)
        digits = max(1, int((magnitude.bit_length() - 1) * 0.30102999566398120))
        while 10**digits <= magnitude:
            digits += 1
        return digits + (value < 0)


def _float_text(value: float) -> str:
    # What json.dumps writes (allow_nan=True, its default).
    if value != value:
        return "NaN"
    if value == math.inf:
        return "Infinity"
    if value == -math.inf:
        return "-Infinity"
    return float.__repr__(value)


def _key_size(key: object) -> int:
    # json.dumps turns these keys into strings; anything else is a TypeError there too.
    if isinstance(key, str):
        return json_cost(key) + 2
    if key is True:
        return 6
    if key is False:
        return 7
    if key is None:
        return 6
    if isinstance(key, int):
        return _int_size(key) + 2
    if isinstance(key, float):
        return len(_float_text(key)) + 2
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def json_size(value: Any) -> int:
    """The UTF-8 size of ``json.dumps(value, ensure_ascii=False, separators=(",", ":"))``.

    Every string (keys included) counts ``json_cost`` plus its two quotes, so a lone surrogate
    counts 6, its escape. Otherwise it is exactly what ``json.dumps`` writes: tuples count as
    arrays, non-string keys as the strings ``json.dumps`` makes of them, and non-finite floats as
    ``NaN`` (3), ``Infinity`` (8) and ``-Infinity`` (9), as ``json.dumps`` writes them by default
    (the server never sends them: ``bound_tool_input`` drops them). A value ``json.dumps``
    refuses (a set, bytes, an object) raises ``TypeError``.
    """
    if isinstance(value, str):
        return json_cost(value) + 2
    if value is None or value is True:
        return 4
    if value is False:
        return 5
    if isinstance(value, int):
        return _int_size(value)
    if isinstance(value, float):
        return len(_float_text(value))
    if isinstance(value, dict):
        if not value:
            return 2
        # '{' '}', a ':' per entry and a ',' between entries.
        size = 1 + 2 * len(value)
        for key, item in value.items():
            size += _key_size(key) + json_size(item)
        return size
    if isinstance(value, list | tuple):
        if not value:
            return 2
        return 1 + len(value) + sum(json_size(item) for item in value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# JSON cost of each ASCII code point.
_ASCII_COSTS = bytes((2 if c in _SHORT_ESCAPED else 6) if c in _ESCAPED else 1 for c in range(0x80))
# Below this many code points left to decide, a search steps one code point at a time.
_STEP_SPAN = 8


def _char_cost(ch: str) -> int:
    code = ord(ch)
    if code < 0x80:
        return _ASCII_COSTS[code]
    if code < 0x800:
        return 2
    if code < 0x10000:
        return 6 if 0xD800 <= code <= 0xDFFF else 3
    return 4


def _longest_within(
    cost_between: Callable[[int, int], int],
    char_at: Callable[[int], str],
    size: int,
    size_cost: int,
    limit: int,
) -> tuple[int, int]:
    """The most code points, taken in order, costing ≤ ``limit``, and their cost.

    ``cost_between(i, j)`` is the cost of the code points taken i…j-1, ``char_at(k)`` the k-th;
    taking ``size`` of them costs ``size_cost > limit``. Costs are additive, so the search costs
    only the stretch it narrows: a guess from the average cost, then halving, then single steps.
    """
    # Dropping j code points saves at most 6j: keeping more than this is still too much.
    bad = size - (size_cost - limit + 5) // 6 + 1
    lo = lo_cost = 0
    if bad - lo > _STEP_SPAN:
        guess = limit * size // size_cost
        for probe in (guess - _STEP_SPAN // 2, guess + _STEP_SPAN // 2):
            if not lo < probe < bad:
                continue
            cost = lo_cost + cost_between(lo, probe)
            if cost > limit:
                bad = probe
                break
            lo, lo_cost = probe, cost
    while bad - lo > _STEP_SPAN:
        mid = (lo + bad) // 2
        cost = lo_cost + cost_between(lo, mid)
        if cost <= limit:
            lo, lo_cost = mid, cost
        else:
            bad = mid
    while lo + 1 < bad:
        cost = lo_cost + _char_cost(char_at(lo))
        if cost > limit:
            break
        lo, lo_cost = lo + 1, cost
    return lo, lo_cost


def _prefix_within(s: str, limit: int) -> tuple[int, int]:
    """Length and cost of the longest prefix of ``s`` costing at most ``limit``."""
    hi = min(len(s), limit)  # every code point costs at least 1
    if hi <= 0:
        return 0, 0
    cost = json_cost(s[:hi])
    if cost <= limit:
        return hi, cost
    return _longest_within(lambda i, j: json_cost(s[i:j]), s.__getitem__, hi, cost, limit)


def _suffix_within(s: str, limit: int, start: int = 0) -> tuple[int, int]:
    """Length and cost of the longest suffix of ``s[start:]`` costing at most ``limit``."""
    n = len(s)
    hi = min(n - start, limit)
    if hi <= 0:
        return 0, 0
    cost = json_cost(s[n - hi :])
    if cost <= limit:
        return hi, cost
    return _longest_within(
        lambda i, j: json_cost(s[n - j : n - i]), lambda k: s[n - 1 - k], hi, cost, limit
    )


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
    head, _ = _prefix_within(text, HEAD)
    tail, tail_cost = _suffix_within(text, TAIL, head)
    kept = text[n - tail :]
    _COSTS.remember(kept, tail_cost)
    return {"text": text[:head], "omittedBytes": _utf8_between(text, head, n - tail), "tail": kept}


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
        kept, kept_cost = _suffix_within(joined, TAIL)
        drop = n - kept
    else:
        total = _COSTS.cost(tail) + json_cost(delta)
        if total <= TAIL:
            drop, kept_cost = 0, total
        else:
            # The shortest prefix costing ≥ total - TAIL: one past the longest costing less.
            short, short_cost = _prefix_within(joined, total - TAIL - 1)
            drop = short + 1
            kept_cost = total - short_cost - json_cost(joined[short])
    kept_tail = joined[drop:] if drop else joined
    _COSTS.remember(kept_tail, kept_cost)
    return {
        "text": prev["text"],
        "omittedBytes": prev["omittedBytes"] + _utf8_between(joined, 0, drop),
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
    head, head_cost = _prefix_within(text, room // 4)
    if cut:
        old_tail = out["tail"]
        t = len(old_tail)
        tail, _ = _suffix_within(old_tail, room - head_cost)
        omitted = (
            out["omittedBytes"]
            + _utf8_between(text, head, len(text))
            + _utf8_between(old_tail, 0, t - tail)
        )
        new_tail = old_tail[t - tail :]
    else:
        n = len(text)
        tail, _ = _suffix_within(text, room - head_cost, head)
        omitted = _utf8_between(text, head, n - tail)
        new_tail = text[n - tail :]
    return {"text": text[:head], "omittedBytes": omitted, "tail": new_tail}


def render_tool_output(out: dict[str, Any]) -> str:
    """The text of a bounded output, with ``[SIZE of output not shown]`` where it was cut."""
    if "tail" not in out:
        return out["text"]
    return f"{out['text']}\n[{size_words(out['omittedBytes'])} of output not shown]\n{out['tail']}"


_DROP = object()  # marks a non-JSON value or a non-finite number


def _is_edit(tool_name: str | None, kind: str | None) -> bool:
    return kind == "edit" or tool_name in EDIT_TOOL_NAMES


def _body_key(key: object, value: object, edit: bool) -> bool:
    if key in PATCH_KEYS:
        return edit or isinstance(value, str)
    return edit and key in EDIT_BODY_KEYS


def _keep_json(value: Any, level: int, edit: bool) -> Any:
    """Steps 1 and 2 of bounding an input: bodies stripped, JSON only, 64 entries, 8 levels."""
    if value is None or isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _DROP
    if isinstance(value, dict):
        if level > INPUT_MAX_DEPTH:
            return None
        entries = (item for item in value.items() if not _body_key(*item, edit))
        kept = {}
        for key, item in islice(entries, INPUT_MAX_ENTRIES):
            if not isinstance(key, str):  # not a JSON key: dropped like a non-JSON value
                continue
            item = _keep_json(item, level + 1, edit)
            if item is not _DROP:
                kept[key] = item
        return kept
    if isinstance(value, list):
        if level > INPUT_MAX_DEPTH:
            return None
        items = (_keep_json(item, level + 1, edit) for item in value[:INPUT_MAX_ENTRIES])
        return [None if item is _DROP else item for item in items]
    return _DROP


def _cut_string(s: str, limit: int) -> str:
    # A string longer than `limit` code points costs more than `limit`.
    if len(s) <= limit and json_cost(s) <= limit:
        return s
    keep, _ = _prefix_within(s, limit - 3)
    return s[:keep] + ELLIPSIS


def _cut_strings(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return _cut_string(value, limit)
    if isinstance(value, dict):
        return {key: _cut_strings(item, limit) for key, item in value.items()}
    if isinstance(value, list):
        return [_cut_strings(item, limit) for item in value]
    return value


def bound_tool_input(value: Any, *, tool_name: str | None, kind: str | None = None) -> Any | None:
    """A copy of ``value`` whose ``json_size`` is at most ``INPUT_MAX_BYTES``, or ``None``.

    Edit bodies and string patches are dropped at any depth, only JSON is kept (64 entries per
    container, 8 levels), and string values are cut to the first limit of 2048, 1024, … 64
    JSON bytes that makes the whole fit. ``None`` means the state says ``inputOmitted: true``;
    it is also the answer for a top-level non-JSON or non-finite value (and for a JSON ``null``
    input, which has nothing to show either). Only ``dict``, ``list``, ``str``, ``int``,
    finite ``float``, ``bool`` and ``None`` are JSON here; a tuple, or an entry whose key is not a
    string, is not.
    """
    kept = _keep_json(value, 1, _is_edit(tool_name, kind))
    if kept is _DROP or kept is None:
        return None
    for limit in INPUT_STRING_LIMITS:
        cut = _cut_strings(kept, limit)
        if json_size(cut) <= INPUT_MAX_BYTES:
            return cut
    return None
