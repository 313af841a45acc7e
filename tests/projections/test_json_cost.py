"""projections/json_cost.py: what texts and values cost as compact JSON (docs/projections.md,
"JSON cost")."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.json_cost import json_cost, json_size, utf8_size
from projections.tool_input import INPUT_MAX_BYTES
from projections.tool_output import (
    HEAD,
    OVERHEAD,
    TAIL,
    TOOL_OUTPUT_MAX_BYTES,
)

from .cost_references import compact, ref_cost, ref_utf8, short_text

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

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
