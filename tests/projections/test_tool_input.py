"""projections/tool_input.py: bounded input (docs/projections.md, "Bounded input")."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.json_cost import json_size
from projections.tool_input import INPUT_MAX_BYTES, PATCH_KEYS, bound_tool_input

from .cost_references import long_text, ref_cost, ref_prefix, short_text

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

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
            if key in PATCH_KEYS:  # a patch key with a string value is dropped, whatever its size
                continue
            keep = item if ref_cost(item) <= limit else item[: ref_prefix(item, limit - 3)] + "…"
            cut[key] = keep
        if json_size(cut) <= INPUT_MAX_BYTES:
            fitting = cut
            break
    assert bounded == fitting


def test_input_infinite_floats_never_reach_the_wire():
    bounded = bound_tool_input({"x": [math.inf], "y": -math.inf}, tool_name="t")
    assert json.dumps(bounded, allow_nan=False, separators=(",", ":")) == '{"x":[null]}'
