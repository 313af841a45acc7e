"""The shared vocabularies (projections/vocabulary.py) are written once: the fold derives its sets
and its state-to-status table from them, and the browser's copies in static/toolcore/ are the
same lists, checked here by reading the JavaScript files."""

from __future__ import annotations

import re
from pathlib import Path

from projections import fold
from projections.vocabulary import (
    CALL_STATES,
    FINAL_TOOL_STATUSES,
    HOST_OUTCOMES,
    HOST_TOOL_STATUSES,
    OUTCOMES,
    TOOL_KINDS,
    TOOL_STATUSES,
    UNFINISHED_TOOL_STATUSES,
)

STATIC = Path(__file__).resolve().parents[2] / "static" / "toolcore"


def _object_keys(source: str, name: str) -> list[str]:
    """The keys, in order, of the object literal ``const NAME = { … };`` (one key a line)."""
    body = re.search(rf"const {name} = \{{\n(.*?)\n\s*\}};", source, re.S)
    assert body is not None, f"const {name} not found"
    return re.findall(r"^\s*(\w+):", body.group(1), re.M)


def _set_items(source: str, name: str) -> list[str]:
    """The strings, in order, of ``const NAME = new Set([…]);``."""
    items = re.search(rf"const {name} = new Set\(\[(.*?)\]\);", source, re.S)
    assert items is not None, f"const {name} not found"
    return re.findall(r'"([^"]*)"', items.group(1))


def test_each_vocabulary_lists_each_name_once():
    for names in (CALL_STATES, OUTCOMES, TOOL_STATUSES, TOOL_KINDS):
        assert len(set(names)) == len(names), names


def test_the_host_vocabularies_are_part_of_the_whole():
    assert set(HOST_OUTCOMES) < set(OUTCOMES) and "denied" not in HOST_OUTCOMES
    assert set(HOST_TOOL_STATUSES) < set(UNFINISHED_TOOL_STATUSES)
    assert TOOL_STATUSES == UNFINISHED_TOOL_STATUSES + FINAL_TOOL_STATUSES


def test_the_folds_sets_are_the_vocabularies():
    assert set(TOOL_STATUSES) == fold.STATUSES
    assert set(FINAL_TOOL_STATUSES) == fold.FINAL_STATUSES
    assert set(HOST_TOOL_STATUSES) == fold.HOST_STATUSES
    assert set(TOOL_KINDS) == fold.KINDS


def test_every_state_and_outcome_has_its_status():
    """Unfinished states read as unfinished statuses, outcomes as final ones."""
    assert {s: fold.status_for_state(s) in UNFINISHED_TOOL_STATUSES for s in CALL_STATES} == {
        s: True for s in CALL_STATES
    }
    assert {o: fold.status_for_state(o) in FINAL_TOOL_STATUSES for o in OUTCOMES} == {
        o: True for o in OUTCOMES
    }
    assert sorted(fold._STATUS_OF_STATE) == sorted(CALL_STATES + OUTCOMES)


def test_the_cards_badges_are_the_statuses_in_order():
    """static/toolcore/cards.js draws one badge per status; its hints speak of final ones."""
    source = (STATIC / "cards.js").read_text("utf-8")
    assert _object_keys(source, "STATUS") == list(TOOL_STATUSES)
    assert set(_object_keys(source, "STATUS_HINT")) <= set(FINAL_TOOL_STATUSES)


def test_the_js_folds_final_statuses_are_the_final_statuses():
    source = (STATIC / "fold.js").read_text("utf-8")
    assert _set_items(source, "FINAL_STATUSES") == list(FINAL_TOOL_STATUSES)
