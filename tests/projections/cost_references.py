"""Plain references for the JSON-cost, bounded-output and bounded-input tests: the rules of
docs/projections.md followed one code point at a time, as slowly and plainly as they are
written; the modules must agree with them byte for byte. Strategies to draw texts too."""

from __future__ import annotations

import json

from hypothesis import strategies as st

from projections.tool_output import HEAD, TAIL

# ---------------------------------------------------------------- references (spec, literally)


def ref_char_cost(ch: str) -> int:
    code = ord(ch)
    if ch in '"\\\b\t\n\f\r':
        return 2
    if code < 0x20:
        return 6
    if code < 0x80:
        return 1
    if code < 0x800:
        return 2
    if 0xD800 <= code <= 0xDFFF:
        return 6
    if code < 0x10000:
        return 3
    return 4


def ref_cost(s: str) -> int:
    return sum(ref_char_cost(ch) for ch in s)


def ref_utf8(s: str) -> int:
    return len(s.encode("utf-8", "surrogatepass"))


def ref_prefix(s: str, limit: int) -> int:
    k = cost = 0
    while k < len(s) and cost + ref_char_cost(s[k]) <= limit:
        cost += ref_char_cost(s[k])
        k += 1
    return k


def ref_suffix(s: str, limit: int, start: int = 0) -> int:
    m = cost = 0
    while len(s) - m - 1 >= start and cost + ref_char_cost(s[len(s) - m - 1]) <= limit:
        cost += ref_char_cost(s[len(s) - m - 1])
        m += 1
    return m


def ref_bound(text: str) -> dict:
    if ref_cost(text) <= HEAD + TAIL:
        return {"text": text}
    h = ref_prefix(text, HEAD)
    m = ref_suffix(text, TAIL, h)
    n = len(text)
    return {"text": text[:h], "omittedBytes": ref_utf8(text[h : n - m]), "tail": text[n - m :]}


def ref_shrink(out: dict, budget: int) -> dict:
    room = max(0, budget - 64)
    cut = "tail" in out
    if ref_cost(out["text"]) + (ref_cost(out["tail"]) if cut else 0) <= room:
        return out
    text = out["text"]
    h = ref_prefix(text, room // 4)
    left = room - ref_cost(text[:h])
    if cut:
        tail = out["tail"]
        m = ref_suffix(tail, left)
        omitted = out["omittedBytes"] + ref_utf8(text[h:]) + ref_utf8(tail[: len(tail) - m])
        return {"text": text[:h], "omittedBytes": omitted, "tail": tail[len(tail) - m :]}
    rest = text[h:]
    m = ref_suffix(rest, left)
    return {
        "text": text[:h],
        "omittedBytes": ref_utf8(rest[: len(rest) - m]),
        "tail": rest[len(rest) - m :],
    }


def compact(value) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


# ---------------------------------------------------------------- strategies

# Code points the rules treat differently, lone surrogates and line breaks included.
SPECIAL = [
    "\r\n",
    "\r",
    "\n",
    "\x00",
    "\x01",
    "\x1f",
    "\x7f",
    '"',
    "\\",
    "\t",
    "\b",
    "\f",
    "\u00e9",
    "\u07ff",
    "\u0800",
    "\u4e2d",
    "\ufffd",
    "\ud800",
    "\udbff",
    "\udc00",
    "\udfff",
    "\U0001f600",
    "\U0010ffff",
    "a",
    " ",
]
any_char = st.characters(exclude_categories=())  # every code point, surrogates included
piece = st.one_of(st.sampled_from(SPECIAL), st.text(any_char, min_size=1, max_size=8))
short_text = st.lists(piece, max_size=40).map("".join)


@st.composite
def long_text(draw, max_runs: int = 6) -> str:
    """Texts from a few characters to ~60,000 code points: runs of pieces repeated, so cuts
    land on every kind of code point."""
    runs = draw(st.lists(st.tuples(piece, st.integers(1, 9000)), min_size=1, max_size=max_runs))
    return "".join(p * n for p, n in runs)


def chunked(draw, text: str) -> list[str]:
    cuts = sorted(
        draw(st.lists(st.integers(0, len(text)), max_size=12))
        + draw(st.lists(st.integers(0, 20), max_size=3))
    )
    cuts = [c for c in cuts if c <= len(text)]
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
