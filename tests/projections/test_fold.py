"""projections/fold.py: the field rules of ``tool.updated`` and the fold (docs/projections.md)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.fold import (
    FINAL_STATUSES,
    ToolUpdateError,
    apply_tool_update,
    merge_tool_updates,
    status_for_state,
    validate_tool_update,
)
from projections.json_cost import json_cost
from projections.tool_output import bound_tool_output

VECTORS = json.loads((Path(__file__).parent / "vectors" / "fold.json").read_text("utf-8"))
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
IDS = {"toolCallId": "6f1c2a4e-0000-4000-8000-000000000001", "turnId": "t-1"}


def update(**fields):
    return {**IDS, **fields}


# ---------------------------------------------------------------- the shared vectors


def test_vectors_are_many_and_named():
    names = [case["name"] for case in VECTORS["cases"]]
    assert len(names) >= 40
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("case", VECTORS["cases"], ids=lambda case: case["name"])
def test_fold_vector(case):
    state = None
    for number, step in enumerate(case["steps"], 1):
        before = copy.deepcopy(state)
        if "error" in step:
            with pytest.raises(ToolUpdateError) as refused:
                apply_tool_update(state, step["update"])
            assert refused.value.field == step["error"]["field"]
            assert state == before  # a refusal leaves the state as it was
            continue
        new = apply_tool_update(state, step["update"])
        assert new == step["expect"], f"step {number}"
        assert "outputDelta" not in new
        assert state == before  # prev untouched
        assert new is not state
        state = new


# ---------------------------------------------------------------- apply_tool_update


def test_apply_returns_a_new_dict_and_leaves_prev_untouched():
    prev = {**IDS, "status": "in_progress", "output": {"text": "a"}, "locations": [{"path": "/x"}]}
    snapshot = copy.deepcopy(prev)
    new = apply_tool_update(prev, update(outputDelta="b", title="t"))
    assert prev == snapshot
    assert new == {**snapshot, "output": {"text": "ab"}, "title": "t"}
    assert new is not prev


def test_apply_to_a_final_call_returns_an_equal_new_dict():
    prev = {**IDS, "status": "completed"}
    new = apply_tool_update(prev, update(status="in_progress"))
    assert new == prev and new is not prev


def test_apply_refuses_output_with_output_delta_first():
    with pytest.raises(ToolUpdateError) as refused:
        apply_tool_update({**IDS, "status": "failed"}, {"output": {"text": ""}, "outputDelta": ""})
    assert refused.value.field == "outputDelta"
    assert isinstance(refused.value, ValueError)


def test_apply_checks_nothing_else():
    # Validation belongs to the boundary: the fold takes what it is given.
    assert apply_tool_update(None, {"title": 5}) == {"title": 5}


def test_apply_a_delta_to_a_cut_output():
    text = "x" * 20000
    state = apply_tool_update(None, update(output=bound_tool_output(text)))
    state = apply_tool_update(state, update(outputDelta="y\n"))
    assert state["output"] == bound_tool_output(text + "y\n")


outputs = st.one_of(
    st.text(max_size=30).map(lambda t: {"text": t}),
    st.builds(
        lambda h, n, t: {"text": h, "omittedBytes": n, "tail": t},
        st.text(max_size=10),
        st.integers(1, 10**6),
        st.text(max_size=10),
    ),
)
statuses = st.sampled_from(
    [
        "pending",
        "awaiting_approval",
        "in_progress",
        "awaiting_input",
        "completed",
        "failed",
        "declined",
        "cancelled",
        "indeterminate",
    ]
)
fields = st.fixed_dictionaries(
    {},
    optional={
        "status": statuses,
        "title": st.text(max_size=5),
        "rev": st.integers(1, 50),
        "startedAt": st.sampled_from(["2026-11-29T18:00:00.000Z", "2026-11-29T18:00:01.000Z"]),
        "finishedAt": st.sampled_from(["2026-11-29T18:00:02.000Z", "2026-11-29T18:00:03.000Z"]),
        "interaction": st.none() | st.just({"kind": "approval"}),
    },
)
output_fields = st.one_of(
    st.just({}),
    outputs.map(lambda o: {"output": o}),
    st.text(max_size=20).map(lambda d: {"outputDelta": d}),
)
updates = st.builds(lambda a, b: {**a, **b}, fields, output_fields)


def fold(steps):
    state = None
    for step in steps:
        state = apply_tool_update(state, {**IDS, **step})
    return state


@PROPERTY
@given(st.lists(updates, max_size=6), outputs)
def test_applying_the_same_output_twice_changes_nothing(steps, output):
    once = apply_tool_update(fold(steps), update(output=output))
    assert apply_tool_update(once, update(output=output)) == once


@PROPERTY
@given(st.lists(updates, max_size=6), statuses)
def test_applying_the_same_status_twice_changes_nothing(steps, status):
    once = apply_tool_update(fold(steps), update(status=status))
    assert apply_tool_update(once, update(status=status)) == once


@PROPERTY
@given(st.lists(updates, max_size=6), st.sampled_from(sorted(FINAL_STATUSES)), st.lists(updates))
def test_a_final_status_is_never_reopened(before, final, after):
    state = apply_tool_update(fold(before), update(status=final))
    frozen = copy.deepcopy(state)
    if state["status"] in FINAL_STATUSES:
        for step in after:
            state = apply_tool_update(state, {**IDS, **step})
            assert state == frozen


@PROPERTY
@given(st.lists(updates, min_size=1, max_size=8))
def test_fold_invariants(steps):
    state = None
    started = None
    for step in steps:
        prev = copy.deepcopy(state)
        state = apply_tool_update(state, {**IDS, **step})
        assert "outputDelta" not in state
        if prev is not None and prev.get("status") in FINAL_STATUSES:
            assert state == prev
            continue
        if started is None:
            started = state.get("startedAt")
        assert state.get("startedAt") == started  # written once
        if "finishedAt" in state:
            assert state["status"] in FINAL_STATUSES
        for key, value in step.items():
            if key in ("outputDelta", "startedAt", "finishedAt"):
                continue
            assert state[key] == value  # present fields replace held ones
        for key in (prev or {}).keys() - step.keys() - {"output"}:
            assert state[key] == prev[key]  # absent ones are kept


@PROPERTY
@given(st.lists(st.text(max_size=4000), max_size=12))
def test_deltas_fold_to_the_bound_of_their_concatenation(deltas):
    state = fold([{"outputDelta": d} for d in deltas])
    if deltas:
        assert state["output"] == bound_tool_output("".join(deltas))


# ---------------------------------------------------------------- status_for_state


@pytest.mark.parametrize(
    ("state", "status"),
    [
        ("supervising", "pending"),
        ("ready", "pending"),
        ("running", "in_progress"),
        ("awaiting_approval", "awaiting_approval"),
        ("awaiting_input", "awaiting_input"),
        ("completed", "completed"),
        ("failed", "failed"),
        ("denied", "declined"),
        ("cancelled", "cancelled"),
        ("indeterminate", "indeterminate"),
    ],
)
def test_status_for_state(state, status):
    assert status_for_state(state) == status


def test_status_for_an_unknown_state():
    with pytest.raises(ValueError):
        status_for_state("lost")


def test_final_statuses():
    assert (
        frozenset({"completed", "failed", "declined", "cancelled", "indeterminate"})
        == FINAL_STATUSES
    )


# ---------------------------------------------------------------- validate_tool_update

VALID = [
    update(),
    update(
        rev=3,
        toolName="b" * 256,
        title="t" * 256,
        kind="switch_mode",
        status="awaiting_input",
        input={"a": [1, 2.5, None, True, "x", {"b": {}}]},
        inputOmitted=False,
        output={"text": "a" * 16320},
        locations=[{"path": "/w/a.py", "line": 1}, {"path": "p" * 1024}] + [{"path": "/x"}] * 14,
        lineChanges={"added": 0, "removed": 7},
        startedAt="2026-11-29T18:00:00.000Z",
        finishedAt="2026-11-29T18:00:01.000Z",
        interaction={"kind": "input", "request": {"questions": []}},
    ),
    update(output={"text": "h" * 4096, "omittedBytes": 1, "tail": "t" * 12224}),
    update(output={"text": "", "omittedBytes": 10**12, "tail": ""}),
    update(outputDelta="x"),
    update(outputDelta="\u00e9" * 8192),
    update(outputDelta="\x01"),
    update(interaction=None),
    update(input=None),
    update(input="just a string"),
    update(status="completed"),
]


@pytest.mark.parametrize("good", VALID)
def test_valid_updates_pass(good):
    validate_tool_update(good)


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"turnId": "t"}, "toolCallId"),
        ({"toolCallId": "c"}, "turnId"),
        ({"toolCallId": 5, "turnId": "t"}, "toolCallId"),
        ({"toolCallId": "c", "turnId": 7}, "turnId"),
        (update(unknown=1), "unknown"),
        (update(output_delta="x"), "output_delta"),
        (update(rev=0), "rev"),
        (update(rev="1"), "rev"),
        (update(rev=True), "rev"),
        (update(toolName="b" * 257), "toolName"),
        (update(toolName=None), "toolName"),
        (update(title="t" * 257), "title"),
        (update(title=3), "title"),
        (update(kind="write"), "kind"),
        (update(kind=None), "kind"),
        (update(kind=["read"]), "kind"),
        (update(status={"x": 1}), "status"),
        (update(status="running"), "status"),
        (update(status="denied"), "status"),
        (update(input={"a": float("nan")}), "input"),
        (update(input={"a": float("inf")}), "input"),
        (update(input={1: "non-string key"}), "input"),
        (update(input={"a": (1, 2)}), "input"),
        (update(input=object()), "input"),
        (update(inputOmitted=1), "inputOmitted"),
        (update(inputOmitted="true"), "inputOmitted"),
        (update(output="plain string"), "output"),
        (update(output=None), "output"),
        (update(output={}), "output"),
        (update(output={"text": "a" * 16321}), "output"),
        (update(output={"text": "\n" * 8161}), "output"),
        (update(output={"text": 1}), "output"),
        (update(output={"text": "a", "extra": 1}), "output"),
        (update(output={"text": "a", "omittedBytes": 1}), "output"),
        (update(output={"text": "a", "tail": "b"}), "output"),
        (update(output={"text": "a", "omittedBytes": 0, "tail": "b"}), "output"),
        (update(output={"text": "a", "omittedBytes": -1, "tail": "b"}), "output"),
        (update(output={"text": "a", "omittedBytes": 1.0, "tail": "b"}), "output"),
        (update(output={"text": "a", "omittedBytes": True, "tail": "b"}), "output"),
        (update(output={"text": "a" * 4097, "omittedBytes": 1, "tail": ""}), "output"),
        (update(output={"text": "", "omittedBytes": 1, "tail": "a" * 12225}), "output"),
        (update(output={"text": "a", "omittedBytes": 1, "tail": None}), "output"),
        (update(output={"text": "a"}, outputDelta="b"), "outputDelta"),
        (update(outputDelta=""), "outputDelta"),
        (update(outputDelta="a" * 16385), "outputDelta"),
        (update(outputDelta="\n" * 8193), "outputDelta"),
        (update(outputDelta=["a"]), "outputDelta"),
        (update(locations=[{"path": "/x"}] * 17), "locations"),
        (update(locations={"path": "/x"}), "locations"),
        (update(locations=[{"path": ""}]), "locations"),
        (update(locations=[{"path": "p" * 1025}]), "locations"),
        (update(locations=[{"line": 1}]), "locations"),
        (update(locations=[{"path": "/x", "line": 0}]), "locations"),
        (update(locations=[{"path": "/x", "line": "1"}]), "locations"),
        (update(locations=[{"path": "/x", "line": True}]), "locations"),
        (update(locations=[{"path": "/x", "column": 1}]), "locations"),
        (update(locations=["/x"]), "locations"),
        (update(lineChanges={"added": 1}), "lineChanges"),
        (update(lineChanges={"added": -1, "removed": 0}), "lineChanges"),
        (update(lineChanges={"added": 1, "removed": 0, "total": 1}), "lineChanges"),
        (update(lineChanges={"added": 1.5, "removed": 0}), "lineChanges"),
        (update(lineChanges=[1, 0]), "lineChanges"),
        (update(startedAt=0), "startedAt"),
        (update(finishedAt=None), "finishedAt"),
        (update(interaction="approval"), "interaction"),
        (update(interaction=[]), "interaction"),
        (update(interaction={"x": float("nan")}), "interaction"),
    ],
)
def test_malformed_updates_are_refused_naming_the_field(bad, field):
    with pytest.raises(ToolUpdateError) as refused:
        validate_tool_update(bad)
    assert refused.value.field == field
    assert field in str(refused.value)


def test_a_non_object_is_refused():
    with pytest.raises(ToolUpdateError):
        validate_tool_update(["toolCallId"])


def test_host_updates_carry_no_rev():
    validate_tool_update(update(rev=2))
    with pytest.raises(ToolUpdateError) as refused:
        validate_tool_update(update(rev=2), from_host=True)
    assert refused.value.field == "rev"


def test_host_statuses_are_pending_or_in_progress():
    validate_tool_update(update(status="pending"), from_host=True)
    validate_tool_update(update(status="in_progress"), from_host=True)
    for status in ("awaiting_approval", "completed", "failed", "cancelled"):
        with pytest.raises(ToolUpdateError) as refused:
            validate_tool_update(update(status=status), from_host=True)
        assert refused.value.field == "status"


def test_host_output_may_be_the_whole_raw_text_as_a_string():
    validate_tool_update(update(output="x" * 100_000), from_host=True)
    validate_tool_update(update(output={"text": "x"}), from_host=True)
    with pytest.raises(ToolUpdateError):
        validate_tool_update(update(output=5), from_host=True)
    with pytest.raises(ToolUpdateError):
        validate_tool_update(update(output="x", outputDelta="y"), from_host=True)


def test_deep_input_is_checked_without_recursion_limits():
    deep: list = []
    for _ in range(10_000):
        deep = [deep]
    validate_tool_update(update(input=deep))
    deep[0] = float("nan")
    with pytest.raises(ToolUpdateError):
        validate_tool_update(update(input=[deep]))


@PROPERTY
@given(
    st.dictionaries(
        st.sampled_from(["title", "toolName", "kind", "status", "rev", "bogus", "inputOmitted"]),
        st.one_of(st.text(max_size=300), st.integers(-2, 3), st.booleans(), st.none()),
    )
)
def test_validation_either_passes_or_names_a_field_of_the_update(fields):
    candidate = update(**fields)
    try:
        validate_tool_update(candidate)
    except ToolUpdateError as refused:
        assert refused.field in candidate


@PROPERTY
@given(st.lists(updates, max_size=6), updates, updates)
def test_a_merged_update_folds_like_the_two_it_joins(before, first, second):
    state = fold(before)
    merged = merge_tool_updates({**IDS, **first}, {**IDS, **second}, max_delta=24)
    if merged is None:  # only deltas too long together refuse to merge
        assert json_cost(first["outputDelta"] + second["outputDelta"]) > 24
        return
    assert not ("output" in merged and "outputDelta" in merged)
    one_by_one = apply_tool_update(apply_tool_update(state, {**IDS, **first}), {**IDS, **second})
    assert apply_tool_update(state, merged) == one_by_one


def test_merged_deltas_are_joined_within_16_kib_only():
    a, b = update(outputDelta="x" * 10000, rev=2), update(outputDelta="y" * 6384, rev=3)
    assert merge_tool_updates(a, b) == update(outputDelta="x" * 10000 + "y" * 6384, rev=3)
    assert merge_tool_updates(a, update(outputDelta="y" * 6385, rev=3)) is None
