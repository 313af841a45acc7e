"""Claims: compare-and-set acquisition (ready → running, generation + 1), batches, leases."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from conversations.errors import StaleClaim
from conversations.models import ExecutionClaim, ToolCall
from conversations.services.claims import claim_acquire, claim_acquire_batch, claim_renew

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
