"""projections/tool_output.py: bounded output, streamed deltas, shrinking, rendering
(docs/projections.md, "Bounded output")."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections import json_cost as cost_module
from projections.json_cost import json_cost, json_size, utf8_size
from projections.tool_output import (
    HEAD,
    OVERHEAD,
    TAIL,
    append_tool_output,
    bound_tool_output,
    render_tool_output,
    shrink_tool_output,
)

from .cost_references import chunked, long_text, ref_bound, ref_cost, ref_shrink

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

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
def test_bound_agrees_with_the_reference(text):
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
    real_cost = cost_module._cost
    monkeypatch.setattr(cost_module, "_cost", lambda s: costed.append(len(s)) or real_cost(s))
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
