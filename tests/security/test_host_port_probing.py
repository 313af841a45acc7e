"""Probing ids through the host tool port (docs/subsystems/host_tools.md, "Who may update and
settle"). ``POST /tool-calls/{id}/updates`` and ``/settle`` answer a call that is not a host call
held by the asking token exactly as a missing one: 404, the same body and headers, byte for
byte, and nothing changes. Only a claim the port gave this token, lost since (expired and
recovered, cancelled, settled), answers 409 ``stale_claim``."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from conversations.services.cancel import call_cancel
from conversations.services.claims import claim_acquire
from conversations.services.recovery import recover_call
from tests.conftest import client_for
from tests.conversations.api_helpers import API, assert_error, grant_run_commands
from tests.conversations.helpers import expire_claim, new_conversation
from tests.conversations.host_helpers import (
    claim_one,
    ready_host_calls,
    settle,
    snapshot,
    update,
)
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

MADE_UP = {"token": str(uuid.uuid4()), "generation": 1}
TEXT = [{"type": "text", "text": "probe"}]


def _both(client, call_id: str, held: dict[str, Any]) -> list[Any]:
    """The answers of an update and of a settlement presenting ``held`` for ``call_id``."""
    return [
        update(client, call_id, held, {"outputDelta": "probe"}),
        settle(client, call_id, held, TEXT, details={"probe": True}),
    ]


def _same_as_missing(answers: list[Any], missing: list[Any]) -> None:
    for answer, baseline in zip(answers, missing, strict=True):
        assert_error(answer, 404, "not_found")
        assert answer.content == baseline.content
        assert dict(answer.items()) == dict(baseline.items())


def _bash_call_held_by_a_worker(user) -> tuple[Any, str, dict[str, Any]]:
    """A typed ``bash`` call of ``user``, claimed by a server worker: its live claim."""
    grant_run_commands(user)
    conversation = new_conversation(user)
    body = {"inputId": "probe", "command": "ls", "includeInContext": True}
    answer = client_for(user).post_json(f"{API}/conversations/{conversation.pk}/commands", body)
    call_id = answer.json()["toolCall"]["id"]
    claim = claim_acquire(call_id=call_id, worker="worker-1")
    assert claim is not None
    return conversation, call_id, {"token": str(claim.token), "generation": claim.generation}


@pytest.mark.parametrize("scope", ["own", "host"])
def test_anything_but_a_host_call_held_by_this_token_answers_as_a_missing_id(user, scope):
    """The matrix, asked by a token of user A (plain, or with the ``host`` scope that reaches
    every owner): each answer equals the answer for a missing id, and nothing changes."""
    asker = client_for(user, name="host", scopes=["host"] if scope == "host" else [])
    missing = _both(asker, str(uuid.uuid4()), MADE_UP)
    for answer in missing:
        assert_error(answer, 404, "not_found")
    assert _both(asker, "not-a-uuid", MADE_UP)[0].content == missing[0].content

    # A's bash call, held by a worker: even its live token.
    bash_conversation, bash_id, worker_claim = _bash_call_held_by_a_worker(user)
    # B's host call, held by B's token: even B's live claim.
    other = UserFactory()
    other_conversation, _, (other_id,) = ready_host_calls(other)
    other_claim = claim_one(client_for(other), other_id)
    # A's own host call, held by another token of A: even that token's live claim.
    mine_conversation, _, (mine_id,) = ready_host_calls(user)
    sibling_claim = claim_one(client_for(user, name="host"), mine_id)
    # A's host call held by the asker itself, with a claim the port never gave.
    held_conversation, _, (held_id,) = ready_host_calls(user)
    held = claim_one(asker, held_id)
    conversations = [bash_conversation, other_conversation, mine_conversation, held_conversation]
    before = [snapshot(c) for c in conversations]

    probes = {
        "bash, made-up token": (bash_id, MADE_UP),
        "bash, the worker's live claim": (bash_id, worker_claim),
        "another owner's host call, made-up token": (other_id, MADE_UP),
        "another owner's host call, its live claim": (other_id, other_claim),
        "another token's host call, made-up token": (mine_id, MADE_UP),
        "another token's host call, its live claim": (mine_id, sibling_claim),
        "own claim, made-up token": (held_id, {**held, "token": str(uuid.uuid4())}),
        "own claim, another generation": (held_id, {**held, "generation": 2}),
        "own claim, presented for another call": (mine_id, held),
    }
    for name, (call_id, presented) in probes.items():
        try:
            _same_as_missing(_both(asker, call_id, presented), missing)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from exc
    assert [snapshot(c) for c in conversations] == before
    # The asker's own live claim still holds.
    assert update(asker, held_id, held, {"outputDelta": "mine"}).status_code == 200


@pytest.mark.parametrize("lost", ["expired and recovered", "cancelled", "settled"])
def test_a_claim_this_token_lost_answers_409_stale_claim(user, lost):
    """The holder whose claim was lost learns it: 409 ``stale_claim``, nothing changes; the
    same claim presented by another token of the same user is 404 as for a missing id."""
    asker = client_for(user, name="host")
    conversation, _, (call_id,) = ready_host_calls(user)
    held = claim_one(asker, call_id)
    if lost == "expired and recovered":
        assert recover_call(call_id=expire_claim(call_id)) is not None
    elif lost == "cancelled":
        call_cancel(call_id=call_id)
    else:
        assert settle(asker, call_id, held, TEXT).status_code == 200
    before = snapshot(conversation)
    for answer in _both(asker, call_id, held):
        assert_error(answer, 409, "stale_claim")
    missing = _both(client_for(user, name="host"), str(uuid.uuid4()), MADE_UP)
    _same_as_missing(_both(client_for(user, name="host"), call_id, held), missing)
    _same_as_missing(_both(asker, str(uuid.uuid4()), held), missing)  # for another id
    assert snapshot(conversation) == before
