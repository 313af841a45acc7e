"""JSON cost: what a text or a value costs as compact JSON, and the longest prefix or suffix
of a text within a cost (docs/projections.md, "JSON cost").

Django-free. Budgets count **JSON bytes**: the UTF-8 size of a string's body written
as JSON with non-ASCII kept. Costs are computed in C-speed passes (``str.encode`` and
``bytes.translate``), never a Python loop per code point over a whole text. A cut is found from a
guess, then by halving, costing only the stretch still undecided (costs add up per code point).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Any

# Bytes that JSON escapes: controls, '"' and '\'. Each costs one more than its UTF-8 byte ('\n'
# is two bytes), and the controls without a short escape cost five more ('\u0001').
_ESCAPED = bytes(range(0x20)) + b'"\\'
_NOT_ESCAPED = bytes(b for b in range(256) if b not in _ESCAPED)
_SHORT_ESCAPED = b'"\\\b\t\n\f\r'
# A lone surrogate encoded with 'surrogatepass' is ED A0..BF xx; valid UTF-8 never holds it.
_SURROGATE_BYTES = re.compile(rb"\xed[\xa0-\xbf]")
# Work on huge strings in slices of this many code points, so memory stays bounded.
_CHUNK = 1 << 20


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


def utf8_between(s: str, start: int, stop: int) -> int:
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


def prefix_within(s: str, limit: int) -> tuple[int, int]:
    """Length and cost of the longest prefix of ``s`` costing at most ``limit``."""
    hi = min(len(s), limit)  # every code point costs at least 1
    if hi <= 0:
        return 0, 0
    cost = json_cost(s[:hi])
    if cost <= limit:
        return hi, cost
    return _longest_within(lambda i, j: json_cost(s[i:j]), s.__getitem__, hi, cost, limit)


def suffix_within(s: str, limit: int, start: int = 0) -> tuple[int, int]:
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
