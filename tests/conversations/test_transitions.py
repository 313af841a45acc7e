"""The call state machine: every transition of the table works, every other one is refused."""

from __future__ import annotations

import itertools

import pytest

from conversations.errors import InvalidTransition
from conversations.models import ConversationEvent, ToolCall
from conversations.services.settlement import GenerationGuard, call_settle
from conversations.services.transitions import (
    MOVES,
    SETTLEMENTS,
    call_move,
    check_move,
    settled_outcome,
)
from projections.vocabulary import CALL_STATES as UNFINISHED_STATES

from .helpers import assistant_calls, new_conversation, open_turn

S = ToolCall.State
ALLOWED_MOVES = {
    ("supervising", "ready"),
    ("supervising", "awaiting_approval"),
    ("awaiting_approval", "ready"),
    ("ready", "running"),
    ("running", "awaiting_input"),
    ("running", "ready"),
}
ALLOWED_SETTLEMENTS = {
    ("supervising", "denied"),
    ("supervising", "failed"),
    ("supervising", "cancelled"),
    ("ready", "cancelled"),
    ("awaiting_approval", "denied"),
    ("awaiting_approval", "cancelled"),
    ("running", "completed"),
    ("running", "failed"),
    ("running", "cancelled"),
    ("running", "indeterminate"),
    ("awaiting_input", "completed"),
    ("awaiting_input", "failed"),
    ("awaiting_input", "cancelled"),
}
OUTCOMES = ("completed", "failed", "denied", "cancelled", "indeterminate")


def test_the_move_table_is_the_spec_table():
    assert {(str(a), str(b)) for a, b in MOVES} == ALLOWED_MOVES
    assert {(str(s), o) for o, states in SETTLEMENTS.items() for s in states} == ALLOWED_SETTLEMENTS


@pytest.mark.parametrize("pair", list(itertools.product(UNFINISHED_STATES, repeat=2)))
def test_every_move_outside_the_table_is_refused(pair):
    if pair in ALLOWED_MOVES:
        check_move(*pair)
    else:
        with pytest.raises(InvalidTransition):
            check_move(*pair)


@pytest.mark.parametrize("pair", list(itertools.product(UNFINISHED_STATES, OUTCOMES)))
def test_every_settlement_outside_the_table_is_refused(pair):
    state, outcome = pair
    if pair in ALLOWED_SETTLEMENTS:
        assert settled_outcome(state, outcome, permission_refused=False) == outcome
    else:
        with pytest.raises(InvalidTransition):
            settled_outcome(state, outcome, permission_refused=False)


@pytest.mark.parametrize("outcome", ["denied", "failed", "cancelled"])
def test_a_call_refused_by_the_user_reads_denied_from_any_state(outcome):
    for state in UNFINISHED_STATES:
        assert settled_outcome(state, outcome, permission_refused=True) == "denied"


def test_a_refused_call_keeps_the_other_outcomes():
    assert settled_outcome("running", "completed", permission_refused=True) == "completed"
    assert settled_outcome("running", "indeterminate", permission_refused=True) == "indeterminate"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "to_state", [s for s in UNFINISHED_STATES if ("ready", s) not in ALLOWED_MOVES]
)
def test_an_illegal_move_of_a_real_row_changes_nothing(user, to_state):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("notes", {})).call_ids
    before = ToolCall.objects.get(pk=call_id)
    assert before.state == "ready"
    with pytest.raises(InvalidTransition):
        call_move(call_id=call_id, from_state="ready", to_state=to_state, generation=0)
    after = ToolCall.objects.get(pk=call_id)
    assert (after.state, after.generation, after.updated_at) == ("ready", 0, before.updated_at)


@pytest.mark.django_db
def test_an_illegal_settlement_of_a_real_row_changes_nothing(user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("bash", {"command": "ls"})).call_ids
    assert ToolCall.objects.get(pk=call_id).state == "awaiting_approval"
    for outcome in ("completed", "failed", "indeterminate"):
        with pytest.raises(InvalidTransition):
            call_settle(call_id=call_id, outcome=outcome, guard=GenerationGuard(0))
    assert ToolCall.objects.get(pk=call_id).state == "awaiting_approval"
    assert not ConversationEvent.objects.filter(tool_call_id=call_id).exists()
