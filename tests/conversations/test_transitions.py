"""The call state machine: every transition of the table works, every other one is refused,
and every move the code makes goes through the table."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission

from conversations.errors import InvalidTransition
from conversations.models import (
    ConversationEvent,
    ExecutionClaim,
    ToolActivity,
    ToolCall,
)
from conversations.services import publish, transitions
from conversations.services._in_transaction import call_transition
from conversations.services.claims import claim_acquire, claim_acquire_batch, claim_announce
from conversations.services.interactions import call_resolve
from conversations.services.recovery import recover_call
from conversations.services.settlement import GenerationGuard, call_settle
from conversations.services.transitions import (
    MOVES,
    SETTLEMENTS,
    check_move,
    settled_outcome,
)
from projections.vocabulary import CALL_STATES as UNFINISHED_STATES

from .helpers import assistant_calls, expire_claim, new_conversation, open_turn

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
def test_an_illegal_move_of_a_real_row_changes_nothing(
    user, to_state, django_capture_on_commit_callbacks
):
    """``call_transition`` refuses a move the table lacks before writing anything: the row and
    its activity are as they were, and nothing is published or announced."""
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("notes", {})).call_ids
    before = ToolCall.objects.get(pk=call_id)
    assert before.state == "ready"
    rev = ToolActivity.objects.get(tool_call_id=call_id).rev
    with (
        django_capture_on_commit_callbacks() as published,
        pytest.raises(InvalidTransition),
        publish.atomic(),
    ):
        call_transition(before, to_state)
    assert published == []
    after = ToolCall.objects.get(pk=call_id)
    assert (after.state, after.generation, after.updated_at) == ("ready", 0, before.updated_at)
    assert ToolActivity.objects.get(tool_call_id=call_id).rev == rev


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


# --- every move the code makes goes through the table ----------------------------------------


def _ready_call(user, tool_name: str = "ls", arguments: dict | None = None):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, (tool_name, arguments or {})).call_ids
    return call_id


def _claim_one(call_id):
    return claim_acquire(call_id=call_id, worker="w1")


def _claim_batch(call_id):
    (claim,) = claim_acquire_batch(tool_names=["ls"], worker="w1", limit=5)
    return claim


def _claim_batch_then_announce(call_id):
    (claim,) = claim_acquire_batch(tool_names=["ls"], worker="w1", limit=5, announce=False)
    claim_announce([claim])
    return claim


CLAIM_PATHS = {
    "claim_acquire": _claim_one,
    "claim_acquire_batch": _claim_batch,
    "claim_acquire_batch, then claim_announce": _claim_batch_then_announce,
}


@pytest.mark.django_db
@pytest.mark.parametrize("path", list(CLAIM_PATHS))
def test_ready_to_running_in_the_claim_paths_goes_through_the_table(user, monkeypatch, path):
    """A table without ``ready → running`` refuses every claim, the vendor SQL's batch too
    (SQLite's statements, or PostgreSQL's one statement, whichever the run uses): nothing is
    claimed, the call stays ready. The table is replaced for the test (fault injection: there
    is no other way to make a claim ask a table that refuses it)."""
    call_id = _ready_call(user)
    rev = ToolActivity.objects.get(tool_call_id=call_id).rev
    monkeypatch.setattr(transitions, "MOVES", MOVES - {(S.READY, S.RUNNING)})
    with pytest.raises(InvalidTransition):
        CLAIM_PATHS[path](call_id)
    call = ToolCall.objects.get(pk=call_id)
    assert (call.state, call.generation) == ("ready", 0)
    assert not ExecutionClaim.objects.filter(call_id=call_id).exists()
    assert ToolActivity.objects.get(tool_call_id=call_id).rev == rev
    monkeypatch.setattr(transitions, "MOVES", MOVES)
    claim = CLAIM_PATHS[path](call_id)  # the real table lets it through
    assert ToolCall.objects.get(pk=call_id).state == "running"
    assert claim.generation == 1


@pytest.mark.django_db
def test_the_claim_batch_moves_only_ready_calls_to_running(user):
    """What the vendor SQL's batch claim does, seen in the rows: of calls in every unfinished
    state, only the ready ones move, to running, with the generation + 1: the move checked
    once for the batch is the move it makes."""
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    ready, approval = assistant_calls(
        conversation, turn_id, ("ls", {}), ("bash", {"command": "ls"})
    ).call_ids
    running = _ready_call(user)
    claim_acquire(call_id=running, worker="w0")
    waiting = _ready_call(user, "ask_user", {"questions": [{"id": "q", "question": "?"}]})
    before = dict(ToolCall.objects.values_list("id", "state"))
    assert set(before.values()) == {"ready", "awaiting_approval", "running", "awaiting_input"}
    claims = claim_acquire_batch(tool_names=["ls", "bash", "ask_user"], worker="w1", limit=10)
    after = dict(ToolCall.objects.values_list("id", "state"))
    moved = {(before[i], after[i]) for i in before if before[i] != after[i]}
    assert moved == {("ready", "running")} <= MOVES
    assert [c.call_id for c in claims] == [ready]
    assert after[approval] == "awaiting_approval" and after[waiting] == "awaiting_input"


class _Recorded(frozenset):
    """The move table, noting every move asked of it."""

    asked: set[tuple[str, str]]

    def __contains__(self, move) -> bool:
        self.asked.add((str(move[0]), str(move[1])))
        return super().__contains__(move)


@pytest.mark.django_db
def test_every_move_the_flows_make_is_in_the_spec_table(user, monkeypatch):
    """Representative flows (allowed, approved, claimed one by one and by the batch, asking the
    user, taken back by recovery) ask the table for every move they make, and every one of them
    is the spec's; together they make every move of it."""
    user.user_permissions.add(Permission.objects.get(codename="run_commands"))
    user = type(user).objects.get(pk=user.pk)  # approving bash needs it (fresh cache)
    table = _Recorded(MOVES)
    table.asked = set()
    monkeypatch.setattr(transitions, "MOVES", table)
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    listed, approved, asked = assistant_calls(
        conversation,
        turn_id,
        ("ls", {}),  # allowed: ready
        ("bash", {"command": "ls"}),  # asks: awaiting approval
        ("ask_user", {"questions": [{"id": "q", "question": "?"}]}),  # run at once
    ).call_ids
    call_resolve(
        call_id=approved,
        user=user,
        request_id="r1",
        resolution={"kind": "approval", "decision": "allow"},
    )
    claim_acquire(call_id=listed, worker="w-dead")
    expire_claim(listed)
    assert "back to ready" in str(recover_call(call_id=listed))
    assert {
        c.call_id for c in claim_acquire_batch(tool_names=["ls", "bash"], worker="w1", limit=5)
    } == {
        listed,
        approved,
    }
    states = dict(ToolCall.objects.values_list("id", "state"))
    assert states == {listed: "running", approved: "running", asked: "awaiting_input"}
    assert table.asked <= ALLOWED_MOVES
    assert table.asked == ALLOWED_MOVES


# Where the code may write a call's state: the one step that moves a call (and creates it
# supervising), and the vendor SQL of the claim batch (checked once for the batch).
_ROOT = Path(__file__).resolve().parents[2]
_STATE_WRITERS = {"conversations/services/_in_transaction.py"}
_SQL_STATE_WRITERS = {"conversations/sql/sqlite.py", "conversations/sql/postgresql.py"}


def _sources():
    for package in ("conversations", "tools", "projections", "config"):
        for path in sorted((_ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path.relative_to(_ROOT).as_posix(), path.read_text()


def test_only_the_transition_step_and_the_claim_sql_write_a_call_state():
    """Statically: no module writes ``ToolCall.state`` by hand. An ORM ``update``/``create``
    with ``state=`` appears only in ``_in_transaction.py``; a SQL ``SET state`` only in the
    vendor SQL's claim, and it moves calls to ``running`` (the move the batch checks)."""
    orm, sql = set(), set()
    for name, text in _sources():
        for node in ast.walk(ast.parse(text)):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in {"update", "create", "bulk_create", "update_or_create"}
                and any(k.arg == "state" for k in node.keywords)
            ):
                orm.add(name)
        for target in re.findall(r"SET\s+state\s*=\s*'?(\w+)", text, flags=re.IGNORECASE):
            sql.add((name, target))
    assert orm == _STATE_WRITERS
    assert {name for name, _ in sql} == _SQL_STATE_WRITERS
    assert {target for _, target in sql} == {"running"}
