"""Claims: compare-and-set acquisition (ready → running, generation + 1), batches, leases."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from conversations.errors import StaleClaim
from conversations.models import ExecutionClaim, ToolActivity, ToolCall
from conversations.services.cancel import call_cancel
from conversations.services.claims import (
    claim_acquire,
    claim_acquire_batch,
    claim_announce,
    claim_renew,
)

from ..factories import UserFactory
from .helpers import assistant_calls, new_conversation, open_turn

pytestmark = pytest.mark.django_db


def _ready_calls(user, *names):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    return assistant_calls(
        conversation, turn_id, *[(n, {"i": i}) for i, n in enumerate(names)]
    ).call_ids


def test_a_claim_moves_ready_to_running_with_a_new_generation_and_token(user):
    (call_id,) = _ready_calls(user, "notes")
    claim = claim_acquire(call_id=call_id, worker="w1")
    call = ToolCall.objects.get(pk=call_id)
    assert (call.state, call.generation, claim.generation) == ("running", 1, 1)
    row = ExecutionClaim.objects.get(call_id=call_id)
    assert (row.token, row.worker, row.generation) == (claim.token, "w1", 1)
    assert claim_acquire(call_id=call_id, worker="w2") is None  # not ready any more


def test_a_batch_claims_only_the_named_tools_of_the_owner_up_to_the_limit(user):
    mine = _ready_calls(user, "notes", "notes", "notes", "search")
    other = _ready_calls(UserFactory(), "notes")
    claims = claim_acquire_batch(tool_names=["notes"], worker="host", limit=2, owner_id=user.pk)
    assert len(claims) == 2
    assert {c.call_id for c in claims} <= set(mine[:3])
    everyone = claim_acquire_batch(tool_names=["notes"], worker="host", limit=10)
    assert {c.call_id for c in everyone} == {mine[2], other[0]}  # what was left, any owner
    assert ToolCall.objects.get(pk=mine[3]).state == "ready"


def test_a_batch_reads_what_running_its_calls_needs(user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("notes", {"text": "é", "n": [1]})).call_ids
    (claim,) = claim_acquire_batch(tool_names=["notes"], worker="w1", limit=5)
    taken = claim.taken
    assert (claim.call_id, str(taken.conversation_id), str(taken.turn_id)) == (
        call_id,
        str(conversation.pk),
        turn_id,
    )
    assert (taken.owner_id, taken.tool_name, taken.workspace) == (
        user.pk,
        "notes",
        conversation.workspace,
    )
    assert taken.arguments == {"text": "é", "n": [1]}


def _status(call_id) -> str:
    return ToolActivity.objects.get(tool_call_id=call_id).state_json["status"]


def test_a_claim_announced_later_folds_in_progress_once_held(user):
    first, second = _ready_calls(user, "notes", "notes")
    before = _status(first)
    claims = claim_acquire_batch(tool_names=["notes"], worker="w1", limit=5, announce=False)
    assert ToolCall.objects.get(pk=first).state == "running"
    assert (_status(first), _status(second)) == (before, before)  # not announced yet
    claim_announce(claims)
    assert (_status(first), _status(second)) == ("in_progress", "in_progress")
    assert "startedAt" in ToolActivity.objects.get(tool_call_id=first).state_json


def test_an_announce_leaves_a_call_settled_meanwhile_as_its_settler_left_it(user):
    (call_id,) = _ready_calls(user, "notes")
    claims = claim_acquire_batch(tool_names=["notes"], worker="w1", limit=5, announce=False)
    call_cancel(call_id=call_id)
    settled = ToolActivity.objects.get(tool_call_id=call_id)
    assert settled.is_final
    claim_announce(claims)
    again = ToolActivity.objects.get(tool_call_id=call_id)
    assert (again.rev, again.state_json) == (settled.rev, settled.state_json)


def test_renewing_extends_the_lease_and_a_stale_holder_is_refused(user, settings):
    settings.TOOLCORE_CLAIM_LEASE = 30
    (call_id,) = _ready_calls(user, "notes")
    claim = claim_acquire(call_id=call_id, worker="w1")
    ExecutionClaim.objects.filter(call_id=call_id).update(
        expires_at=timezone.now() + timedelta(seconds=1)
    )
    expires = claim_renew(call_id=call_id, token=claim.token, generation=claim.generation)
    assert expires > timezone.now() + timedelta(seconds=25)
    assert ExecutionClaim.objects.get(call_id=call_id).expires_at == expires
    with pytest.raises(StaleClaim):
        claim_renew(call_id=call_id, token=claim.token, generation=claim.generation + 1)
    with pytest.raises(StaleClaim):
        claim_renew(
            call_id=call_id,
            token="00000000-0000-0000-0000-000000000000",
            generation=claim.generation,
        )
