"""projections/wire.py against the spec (projections.md, "JSON cost" to "Bounded input").

The references below follow the spec one code point at a time, as slowly and plainly as it is
written; the module must agree with them byte for byte.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections import wire
from projections.wire import (
    HEAD,
    INPUT_MAX_BYTES,
    OVERHEAD,
    TAIL,
    TOOL_OUTPUT_MAX_BYTES,
    append_tool_output,
    bound_tool_input,
    bound_tool_output,
    json_cost,
    json_size,
    render_tool_output,
    shrink_tool_output,
    utf8_size,
)

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

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


# ---------------------------------------------------------------- constants and costs


def test_constants():
    assert (TOOL_OUTPUT_MAX_BYTES, HEAD, OVERHEAD, TAIL, INPUT_MAX_BYTES) == (
        16384,
        4096,
        64,
        12224,
        4096,
    )


@pytest.mark.parametrize(
    ("text", "cost", "size"),
    [
        ("", 0, 0),
        ("a", 1, 1),
        ('"', 2, 1),
        ("\\", 2, 1),
        ("\b\t\n\f\r", 10, 5),
        ("\x00", 6, 1),
        ("\x0b", 6, 1),
        ("\x1f", 6, 1),
        ("\x7f", 1, 1),
        ("\u0080", 2, 2),
        ("\u07ff", 2, 2),
        ("\u0800", 3, 3),
        ("\ud7ff", 3, 3),
        ("\ud800", 6, 3),
        ("\udfff", 6, 3),
        ("\ue000", 3, 3),
        ("\uffff", 3, 3),
        ("\U00010000", 4, 4),
        ("\U0010ffff", 4, 4),
        ("\ud83d\ude00", 12, 6),  # two lone surrogates are not a pair in a Python str
        ("a\r\nb", 6, 4),
        ("\ud55c\uae00", 6, 6),  # Hangul: UTF-8 lead byte ED, yet not surrogates
    ],
)
def test_json_cost_and_utf8_size_per_code_point(text, cost, size):
    assert json_cost(text) == cost
    assert utf8_size(text) == size


@PROPERTY
@given(short_text)
def test_json_cost_follows_the_rules(text):
    assert json_cost(text) == ref_cost(text)
    assert utf8_size(text) == ref_utf8(text)


@PROPERTY
@given(st.text(st.characters(exclude_categories=("Cs",))))
def test_json_cost_is_the_body_of_compact_json_without_surrogates(text):
    assert json_cost(text) == compact(text) - 2
    assert utf8_size(text) == len(text.encode())


def test_json_cost_of_huge_strings_is_exact():
    text = ("\u00e9\n\ud800x" * 300_000) + "\x01"
    assert json_cost(text) == 300_000 * (2 + 2 + 6 + 1) + 6
    assert utf8_size(text) == 300_000 * (2 + 1 + 3 + 1) + 1


# ---------------------------------------------------------------- json_size


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(st.characters(exclude_categories=("Cs",))),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.text(st.characters(exclude_categories=("Cs",))), inner, max_size=5),
    ),
    max_leaves=30,
)


@PROPERTY
@given(json_values)
def test_json_size_is_the_size_of_compact_json(value):
    assert json_size(value) == compact(value)


@pytest.mark.parametrize(
    "value",
    [
        {},
        [],
        {"a": [1, 2.5, None, True, False, "x"]},
        (1, "é"),
        {1: "int key", 2.5: "float key", None: "n", False: "f"},
        {True: "t", float("nan"): "nan key", -float("inf"): "minus infinity"},
        [float("nan"), float("inf"), -float("inf"), -0.0, 1e300, 5e-324],
        10**100,
        -(10**50),
        {"k\n": 'v"\\'},
    ],
)
def test_json_size_matches_json_dumps_examples(value):
    assert json_size(value) == compact(value)


def test_json_size_counts_a_lone_surrogate_as_its_escape():
    assert json_size("\ud800") == 8
    assert json_size({"\udc00": "\ud800"}) == 1 + 2 + 8 + 8


def test_json_size_of_a_huge_int_past_the_str_digit_limit():
    value = 10**5000
    assert json_size(value) == 5001
    assert json_size(-value + 1) == 5001


def test_json_size_refuses_non_json_like_json_dumps():
    with pytest.raises(TypeError):
        json_size({1, 2})
    with pytest.raises(TypeError):
        json_size({(1, 2): 3})


# ---------------------------------------------------------------- bound_tool_output


def test_bound_keeps_a_text_of_16320_json_bytes_whole():
    assert bound_tool_output("a" * 16320) == {"text": "a" * 16320}
    assert bound_tool_output("\n" * 8160) == {"text": "\n" * 8160}
    assert bound_tool_output("") == {"text": ""}


def test_bound_cuts_one_byte_past():
    out = bound_tool_output("a" * 16321)
    assert out == {"text": "a" * 4096, "omittedBytes": 1, "tail": "a" * 12224}
    assert list(out) == ["text", "omittedBytes", "tail"]


def test_bound_golden_ascii():
    out = bound_tool_output("a" * 5000 + "b" * 20000)
    assert out == {"text": "a" * 4096, "omittedBytes": 904 + 7776, "tail": "b" * 12224}


def test_bound_golden_two_byte_characters_at_the_cut():
    # 'a' + 2047 'é' costs 4095; one more 'é' would make 4097.
    out = bound_tool_output("a" + "\u00e9" * 10000)
    assert out["text"] == "a" + "\u00e9" * 2047
    assert out["tail"] == "\u00e9" * 6112
    assert out["omittedBytes"] == (10000 - 2047 - 6112) * 2


def test_bound_golden_four_byte_characters():
    out = bound_tool_output("\U0001f600" * 5000)
    assert out == {
        "text": "\U0001f600" * 1024,
        "omittedBytes": (5000 - 1024 - 3056) * 4,
        "tail": "\U0001f600" * 3056,
    }


def test_bound_golden_three_byte_characters_leave_room_unused():
    # 1365 * 3 = 4095 and 4074 * 3 = 12222: a code point that would pass the limit stays out.
    out = bound_tool_output("\u4e2d" * 6000)
    assert out == {
        "text": "\u4e2d" * 1365,
        "omittedBytes": (6000 - 1365 - 4074) * 3,
        "tail": "\u4e2d" * 4074,
    }


def test_bound_golden_controls_and_lone_surrogates():
    assert bound_tool_output("\x01" * 3000) == {
        "text": "\x01" * 682,
        "omittedBytes": 3000 - 682 - 2037,
        "tail": "\x01" * 2037,
    }
    assert bound_tool_output("\ud800" * 3000) == {
        "text": "\ud800" * 682,
        "omittedBytes": (3000 - 682 - 2037) * 3,
        "tail": "\ud800" * 2037,
    }


def test_bound_golden_crlf_and_mixed_boundary():
    text = "x" * 4095 + "\r\n" + "y" * 20000
    out = bound_tool_output(text)
    # '\r' costs 2: 4095 + 2 > 4096, so the head stops before it.
    assert out["text"] == "x" * 4095
    assert out["tail"] == "y" * 12224
    assert out["omittedBytes"] == 2 + 20000 - 12224


def test_bound_tail_never_starts_before_the_head_ends():
    # The text costs 16321 only through one expensive code point in the middle.
    text = "a" * 4096 + "\x00" + "b" * 12219
    assert ref_cost(text) == 16321
    out = bound_tool_output(text)
    assert out == {"text": "a" * 4096, "omittedBytes": 1, "tail": "b" * 12219}


@PROPERTY
@given(long_text())
def test_bound_agrees_with_the_spec(text):
    out = bound_tool_output(text)
    assert out == ref_bound(text)
    if "tail" in out:
        assert set(out) == {"text", "omittedBytes", "tail"}
        assert json_cost(out["text"]) <= HEAD
        assert json_cost(out["tail"]) <= TAIL
        assert out["omittedBytes"] > 0
        assert text.startswith(out["text"]) and text.endswith(out["tail"])
        assert len(out["text"]) + len(out["tail"]) < len(text)
        # Nothing lost without being counted.
        assert utf8_size(out["text"]) + out["omittedBytes"] + utf8_size(out["tail"]) == (
            utf8_size(text)
        )
    else:
        assert out == {"text": text}
        assert json_cost(text) <= HEAD + TAIL


# ---------------------------------------------------------------- append_tool_output


@PROPERTY
@given(st.data(), long_text())
def test_any_chunking_gives_the_bound_of_the_whole(data, text):
    out = None
    for chunk in chunked(data.draw, text):
        out = append_tool_output(out, chunk)
    expected = bound_tool_output(text)
    if out is None:  # no chunk at all: only for the empty text
        assert text == ""
    else:
        assert out == expected


@PROPERTY
@given(st.data(), long_text(max_runs=3), long_text(max_runs=3))
def test_chunking_invariance_across_the_cut_with_small_deltas(data, first, second):
    out = append_tool_output(None, first)
    step = data.draw(st.integers(1, 3000))
    for i in range(0, len(second), step):
        out = append_tool_output(out, second[i : i + step])
    assert out == ref_bound(first + second)


def test_append_none_and_empty_delta():
    assert append_tool_output(None, "") == {"text": ""}
    prev = {"text": "abc"}
    assert append_tool_output(prev, "") is prev
    cut = {"text": "h", "omittedBytes": 3, "tail": "t"}
    assert append_tool_output(cut, "") is cut


def test_append_never_modifies_prev():
    prev = bound_tool_output("a" * 20000)
    copy = dict(prev)
    out = append_tool_output(prev, "b" * 100)
    assert prev == copy
    assert out == {"text": "a" * 4096, "omittedBytes": 3680 + 100, "tail": "a" * 12124 + "b" * 100}


def test_append_to_an_output_read_back_from_json():
    # A tail whose cost is not remembered (a new object) gives the same answer.
    text = "\u00e9\n" * 9000
    out = json.loads(json.dumps(bound_tool_output(text)))
    assert append_tool_output(out, "z\x01" * 50) == ref_bound(text + "z\x01" * 50)


def test_append_a_huge_delta():
    head = bound_tool_output("a" * 17000)
    out = append_tool_output(head, "\u00e9" * 1_000_000)
    assert out == {
        "text": "a" * 4096,
        "omittedBytes": 17000 - 4096 + (1_000_000 - 6112) * 2,
        "tail": "\u00e9" * 6112,
    }


def test_streaming_work_is_linear_and_flat_per_delta(monkeypatch):
    # Count the code points costed rather than time them: deterministic on a busy machine.
    costed = []
    real_cost = wire._cost
    monkeypatch.setattr(wire, "_cost", lambda s: costed.append(len(s)) or real_cost(s))
    line = '2026-11-29 12:00:01 "build" \u00e9\u4e2d step\tok\n'
    delta = (line * 200)[:4096]
    out = None
    per_delta = []
    for _ in range(2048):  # 8 Mi code points
        costed.clear()
        out = append_tool_output(out, delta)
        per_delta.append(sum(costed))
    assert out == bound_tool_output(delta * 2048)
    assert max(per_delta[8:]) <= 4 * len(delta)  # flat once cut: not the tail, not the text
    assert sum(per_delta) <= 4 * len(delta) * 2048


def test_streaming_gives_the_same_result_when_outputs_come_back_from_storage():
    text = '"q"\t\u00e9\U0001f600\n' * 5000
    out = None
    for i in range(0, len(text), 1000):
        out = append_tool_output(out, text[i : i + 1000])
        out = json.loads(json.dumps(out))  # a new object: its tail cost is not remembered
    assert out == ref_bound(text)


# ---------------------------------------------------------------- shrink_tool_output


def test_shrink_golden_cut_output():
    out = bound_tool_output("a" * 20000)
    assert shrink_tool_output(out, 1064) == {
        "text": "a" * 250,
        "omittedBytes": 19000,
        "tail": "a" * 750,
    }


def test_shrink_golden_whole_output():
    assert shrink_tool_output({"text": "a" * 1000}, 564) == {
        "text": "a" * 125,
        "omittedBytes": 500,
        "tail": "a" * 375,
    }


def test_shrink_golden_multibyte_head():
    # room 100: head ≤ 25 JSON bytes holds 12 'é' (24); the tail gets 76 → 38 'é'.
    out = shrink_tool_output({"text": "\u00e9" * 100}, 164)
    assert out == {"text": "\u00e9" * 12, "omittedBytes": 50 * 2, "tail": "\u00e9" * 38}


def test_shrink_unchanged_when_it_fits():
    out = {"text": "abc", "omittedBytes": 7, "tail": "xyz"}
    assert shrink_tool_output(out, 70) is out
    whole = {"text": "a" * 100}
    assert shrink_tool_output(whole, 164) is whole


def test_shrink_below_the_overhead_keeps_nothing():
    out = shrink_tool_output({"text": "hello"}, 10)
    assert out == {"text": "", "omittedBytes": 5, "tail": ""}
    cut = shrink_tool_output({"text": "h\u00e9", "omittedBytes": 4, "tail": "t"}, 0)
    assert cut == {"text": "", "omittedBytes": 4 + 3 + 1, "tail": ""}


@PROPERTY
@given(long_text(), st.integers(0, 20000))
def test_shrink_agrees_with_the_spec_and_its_budget(text, budget):
    original = bound_tool_output(text)
    out = shrink_tool_output(original, budget)
    assert out == ref_shrink(original, budget)
    room = max(0, budget - OVERHEAD)
    assert json_cost(out["text"]) + json_cost(out.get("tail", "")) <= room
    if budget >= OVERHEAD:
        assert json_size(out) <= budget
    shown = utf8_size(out["text"]) + utf8_size(out.get("tail", ""))
    assert shown + out.get("omittedBytes", 0) == utf8_size(text)
    assert text.startswith(out["text"]) and text.endswith(out.get("tail", ""))


# ---------------------------------------------------------------- render_tool_output


@pytest.mark.parametrize(
    ("omitted", "words"),
    [
        (1, "1 byte"),
        (2, "2 bytes"),
        (1023, "1023 bytes"),
        (1024, "1.0 KiB"),
        (1075, "1.0 KiB"),
        (1076, "1.1 KiB"),
        (1280, "1.3 KiB"),  # 1.25 rounds half up
        (1048575, "1024.0 KiB"),  # the unit is chosen before rounding
        (1048576, "1.0 MiB"),
        (1572864, "1.5 MiB"),
        (5 * 1048576 + 52429, "5.1 MiB"),
    ],
)
def test_render_cut_output_wording(omitted, words):
    out = {"text": "head", "omittedBytes": omitted, "tail": "tail"}
    assert render_tool_output(out) == f"head\n[{words} of output not shown]\ntail"


def test_render_whole_output_is_its_text():
    assert render_tool_output({"text": "a\r\nb"}) == "a\r\nb"


def test_render_a_bounded_text():
    out = bound_tool_output("a" * 5000 + "b" * 20000)
    assert render_tool_output(out) == (
        "a" * 4096 + "\n[8.5 KiB of output not shown]\n" + "b" * 12224
    )


# ---------------------------------------------------------------- bound_tool_input


def test_input_edit_bodies_are_dropped_paths_and_flags_stay():
    value = {
        "file_path": "/w/a.py",
        "old_string": "x",
        "new_string": "y",
        "replace_all": True,
    }
    assert bound_tool_input(value, tool_name="Edit") == {
        "file_path": "/w/a.py",
        "replace_all": True,
    }


def test_input_edit_bodies_at_any_depth_and_patches_whatever_their_value():
    value = {
        "file_path": "/w/a.py",
        "edits": [{"old_string": "a", "new_string": "b", "line": 3}],
        "patch": {"hunks": 2},
        "meta": {"content": "body", "oldText": 1, "new_source": None, "keep": "k"},
    }
    assert bound_tool_input(value, tool_name="MultiEdit") == {
        "file_path": "/w/a.py",
        "edits": [{"line": 3}],
        "meta": {"keep": "k"},
    }


@pytest.mark.parametrize("name", ["Edit", "MultiEdit", "Write", "NotebookEdit", "edit", "write"])
def test_input_every_edit_tool_drops_content(name):
    assert bound_tool_input({"path": "/p", "content": "x"}, tool_name=name) == {"path": "/p"}


def test_input_kind_edit_makes_any_tool_an_edit():
    value = {"path": "/p", "contents": "x", "newString": "y"}
    assert bound_tool_input(value, tool_name="mcp__fs__put", kind="edit") == {"path": "/p"}
    assert bound_tool_input(value, tool_name="mcp__fs__put", kind="read") == value


def test_input_patch_keys_of_any_tool_go_when_strings():
    value = {
        "cwd": "/w",
        "patch": "--- a\n+++ b\n",
        "nested": [{"unified_diff": "@@"}, {"diffText": "x", "diff": 3}],
        "diff_text": ["kept: not a string"],
    }
    assert bound_tool_input(value, tool_name="apply_patch") == {
        "cwd": "/w",
        "nested": [{}, {"diff": 3}],
        "diff_text": ["kept: not a string"],
    }


def test_input_first_64_entries_then_non_json_dropped():
    value = {f"k{i}": i for i in range(70)}
    value["k1"] = float("nan")
    kept = bound_tool_input(value, tool_name="t")
    assert list(kept) == ["k0", *(f"k{i}" for i in range(2, 64))]
    assert bound_tool_input(list(range(100)), tool_name="t") == list(range(64))


def test_input_bodies_are_dropped_before_counting_64():
    value = {"content": "x", **{f"k{i}": i for i in range(64)}}
    assert list(bound_tool_input(value, tool_name="Write")) == [f"k{i}" for i in range(64)]


def test_input_non_json_values():
    value = {
        "a": float("inf"),
        "b": [1, float("nan"), object(), (1, 2), {3}],
        "c": b"bytes",
        "d": -float("inf"),
        5: "non-string key",
        "e": None,
    }
    assert bound_tool_input(value, tool_name="t") == {"b": [1, None, None, None, None], "e": None}


def test_input_top_level_non_json_or_non_finite_gives_none():
    assert bound_tool_input(float("nan"), tool_name="t") is None
    assert bound_tool_input(float("inf"), tool_name="t") is None
    assert bound_tool_input(object(), tool_name="t") is None
    assert bound_tool_input(None, tool_name="t") is None
    assert bound_tool_input(3, tool_name="t") == 3
    assert bound_tool_input("abc", tool_name="t") == "abc"


def test_input_containers_deeper_than_8_levels_become_null():
    value: list = [1]
    for _ in range(9):
        value = [value]
    # 10 levels of lists: levels 1-8 stay, the level-9 list becomes null.
    expected = None
    for _ in range(8):
        expected = [expected]
    assert bound_tool_input(value, tool_name="t") == expected
    deep = {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {"i": 1}, "s": "scalar"}}}}}}}}
    bounded = bound_tool_input(deep, tool_name="t")
    assert bounded["a"]["b"]["c"]["d"]["e"]["f"]["g"] == {"h": None, "s": "scalar"}


def test_input_strings_are_cut_even_when_the_whole_fits():
    value = {"command": "x" * 3000}
    assert bound_tool_input(value, tool_name="bash") == {"command": "x" * 2045 + "\u2026"}
    exact = {"command": "x" * 2048}
    assert bound_tool_input(exact, tool_name="bash") == exact


def test_input_tries_smaller_limits_until_it_fits():
    value = {"a": "x" * 3000, "b": "y" * 3000}
    # With 2048: 2 + 2 * (3 + 1) + 1 + 2 * 2050 = 4111 > 4096; 1024 fits.
    assert bound_tool_input(value, tool_name="t") == {
        "a": "x" * 1021 + "\u2026",
        "b": "y" * 1021 + "\u2026",
    }


def test_input_cuts_by_json_cost_never_splitting_a_code_point():
    value = {"q": "\U0001f600" * 600}  # 2400 JSON bytes
    # 2045 // 4 = 511 emoji (2044 bytes) plus the ellipsis.
    assert bound_tool_input(value, tool_name="t") == {"q": "\U0001f600" * 511 + "\u2026"}
    assert bound_tool_input({"q": "\n" * 2000}, tool_name="t") == {"q": "\n" * 1022 + "\u2026"}


def test_input_keys_are_never_cut_and_may_not_fit():
    value = {("k" * 100) + str(i): i for i in range(60)}
    assert bound_tool_input(value, tool_name="t") is None


def test_input_copies():
    value = {"a": [1, {"b": "c"}]}
    bounded = bound_tool_input(value, tool_name="t")
    assert bounded == value
    bounded["a"][1]["b"] = "changed"
    assert value == {"a": [1, {"b": "c"}]}


input_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        long_text(max_runs=2),
        short_text,
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=8),
        st.dictionaries(
            st.one_of(
                st.sampled_from(["content", "old_string", "patch", "diff", "path", "newText"]),
                short_text,
            ),
            inner,
            max_size=8,
        ),
    ),
    max_leaves=25,
)
BODY_KEYS = {"content", "old_string", "newText"}


def _keys(value) -> set:
    if isinstance(value, dict):
        return set(value).union(*(_keys(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_keys(v) for v in value))
    return set()


def _has_string_patch(value) -> bool:
    if isinstance(value, dict):
        return any(
            (k in {"patch", "diff"} and isinstance(v, str)) or _has_string_patch(v)
            for k, v in value.items()
        )
    if isinstance(value, list):
        return any(_has_string_patch(v) for v in value)
    return False


@PROPERTY
@given(input_values, st.sampled_from(["Edit", "bash", "write", "read"]))
def test_input_is_bounded_and_never_keeps_a_body(value, tool_name):
    bounded = bound_tool_input(value, tool_name=tool_name)
    if bounded is None:
        return
    assert json_size(bounded) <= INPUT_MAX_BYTES
    assert not _has_string_patch(bounded)
    if tool_name in ("Edit", "write"):
        assert not _keys(bounded) & (BODY_KEYS | {"patch", "diff"})
    json.dumps(bounded, allow_nan=False)  # only finite numbers reach the wire


@PROPERTY
@given(st.dictionaries(short_text, long_text(max_runs=2), max_size=6))
def test_input_string_limits_are_tried_in_order(value):
    bounded = bound_tool_input(value, tool_name="t")
    fitting = None
    for limit in (2048, 1024, 512, 256, 128, 64):
        cut = {}
        for key, item in value.items():
            keep = item if ref_cost(item) <= limit else item[: ref_prefix(item, limit - 3)] + "…"
            cut[key] = keep
        if json_size(cut) <= INPUT_MAX_BYTES:
            fitting = cut
            break
    assert bounded == fitting


def test_input_infinite_floats_never_reach_the_wire():
    bounded = bound_tool_input({"x": [math.inf], "y": -math.inf}, tool_name="t")
    assert json.dumps(bounded, allow_nan=False, separators=(",", ":")) == '{"x":[null]}'
