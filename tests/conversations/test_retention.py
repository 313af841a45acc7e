"""purge and purge_orphans."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from conversations.models import Conversation
from conversations.services.cancel import turn_end
from conversations.services.claims import claim_acquire
from conversations.services.recovery import recover_call
from conversations.services.settlement import ClaimGuard, call_settle
from conversations.storage import attempt_dir, conversation_dir

from .helpers import assistant_calls, expire_claim, new_conversation, open_turn

pytestmark = pytest.mark.django_db


def _run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_purge_deletes_only_old_conversations_with_nothing_open(user, settings):
    old_ended, old_open, recent = (new_conversation(user) for _ in range(3))
    turn_id = open_turn(old_ended)
    turn_end(conversation_id=old_ended.pk, turn_id=turn_id)
    open_turn(old_open)
    long_ago = timezone.now() - timedelta(days=40)
    Conversation.objects.filter(pk__in=[old_ended.pk, old_open.pk]).update(updated_at=long_ago)
    assert "nothing is deleted" in _run("purge")
    settings.TOOLCORE_RETENTION_DAYS = 30
    assert "Deleted 1 conversation(s)" in _run("purge")
    assert set(Conversation.objects.values_list("pk", flat=True)) == {old_open.pk, recent.pk}


def test_purge_orphans_removes_lost_attempts_and_keeps_the_rest(user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    lost, kept, running = assistant_calls(
        conversation, turn_id, ("ls", {}), ("notes", {}), ("notes", {"x": 1})
    ).call_ids
    first = claim_acquire(call_id=lost, worker="w")
    lost_dir = attempt_dir(conversation.pk, lost, first.generation)
    lost_dir.mkdir(parents=True)
    (lost_dir / "stdout.txt").write_text("partial")
    recover_call(call_id=expire_claim(lost))  # replay-safe: back to ready
    second = claim_acquire(call_id=lost, worker="w2")  # the next attempt is g2: g1 is an orphan
    assert second.generation == first.generation + 1
    claim = claim_acquire(call_id=kept, worker="w")
    call_settle(
        call_id=kept,
        outcome="completed",
        guard=ClaimGuard(claim.token, claim.generation),
        result={"ok": True},
        text="ok",
    )
    live = claim_acquire(call_id=running, worker="w")
    live_dir = attempt_dir(conversation.pk, running, live.generation)
    live_dir.mkdir(parents=True)
    (live_dir / "output.txt").write_text("still writing")
    gone = conversation_dir("00000000-0000-0000-0000-000000000001")
    gone.mkdir(parents=True)
    output = _run("purge_orphans")
    assert "Removed 2 orphan folder(s)." in output
    assert not lost_dir.exists() and not gone.exists()
    assert (attempt_dir(conversation.pk, kept, claim.generation) / "result.json").exists()
    assert (live_dir / "output.txt").exists()
