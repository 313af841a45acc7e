"""``manage.py check_integrity``: a clean database passes; each kind of breach, written directly
into the tables or the data directory (as a crash or a bug would leave it), is found and named,
and the command exits 1."""

from __future__ import annotations

import os
import time
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from conversations import integrity
from conversations.models import Asset, Conversation, ConversationEvent, ExecutionClaim, Turn
from conversations.services.claims import claim_acquire
from conversations.services.messages import message_post
from conversations.services.settlement import ClaimGuard, call_settle
from conversations.storage import asset_store, attempt_dir, conversation_dir
from tests.storage.helpers import store_remove, store_replace, stored_bytes

from .helpers import assistant_calls, new_conversation, open_turn

pytestmark = pytest.mark.django_db


def check(*args: str) -> tuple[int, str]:
    """The command's exit status and its output."""
    out = StringIO()
    try:
        call_command("check_integrity", *args, stdout=out)
    except SystemExit as exc:
        return int(exc.code), out.getvalue()
    return 0, out.getvalue()


def breaches(output: str) -> list[str]:
    summary = tuple(f"{name}: " for name in integrity.CHECKS)
    return [
        line
        for line in output.splitlines()
        if line.startswith(summary) and " breach(es)" not in line
    ]


@pytest.fixture
def settled(user):
    """A conversation with a settled call (its result.json an asset), a running call holding a
    claim with a live attempt folder, and a ready one."""
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    done, running, ready = assistant_calls(
        conversation, turn_id, ("notes", {"q": 1}), ("notes", {"q": 2}), ("notes", {"q": 3})
    ).call_ids
    claim = claim_acquire(call_id=done, worker="w")
    call_settle(
        call_id=done,
        outcome="completed",
        guard=ClaimGuard(claim.token, claim.generation),
        result={"content": [{"type": "text", "text": "ok"}]},
        text="ok",
    )
    live = claim_acquire(call_id=running, worker="w")
    folder = attempt_dir(conversation.pk, running, live.generation)
    folder.mkdir(parents=True)
    (folder / "output.txt").write_text("still writing")
    _age(folder)
    return conversation, turn_id, done, running, ready


def _age(path, seconds: float = 3600) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_clean_database_passes(settled):
    code, output = check()
    assert code == 0, output
    assert breaches(output) == []
    assert "sequences: 0 breach(es) in 1 conversations" in output
    assert "assets: 0 breach(es) in 1 assets" in output
    assert "claims: 0 breach(es) in 1 claims" in output
    assert output.rstrip().endswith("Integrity check passed: no breach.")


def test_an_empty_database_passes():
    assert check()[0] == 0


def _messages(user, count: int):
    """A conversation of ``count`` message events (a user message, then assistant texts)."""
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    for n in range(count - 1):
        message_post(
            conversation_id=conversation.pk,
            message_id=f"say-{n}",
            role="assistant",
            turn_id=turn_id,
            content=[{"type": "text", "text": f"line {n}"}],
        )
    return conversation


def test_a_missing_sequence_and_a_wrong_last_sequence_are_named(user):
    gap, short = _messages(user, 4), _messages(user, 1)
    ConversationEvent.objects.filter(conversation=gap, sequence=2).delete()
    Conversation.objects.filter(pk=short.pk).update(last_sequence=3)
    code, output = check()
    assert code == 1
    assert sorted(breaches(output)) == sorted(
        [
            f"sequences: conversation {gap.pk}: 2 missing",
            f"sequences: conversation {short.pk}: 2-3 missing (last_sequence = 3)",
        ]
    )
    assert output.rstrip().endswith("Integrity check failed: 2 breach(es).")


def test_a_repeated_sequence_is_named(user):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite keeps the unique (conversation, sequence) in the table: no dropping it")
    with connection.cursor() as cursor:  # inside the test's transaction, rolled back after it
        table = ConversationEvent._meta.db_table
        cursor.execute(f"ALTER TABLE {table} DROP CONSTRAINT event_sequence_unique")
    conversation = _messages(user, 3)
    ConversationEvent.objects.filter(conversation=conversation, sequence=3).update(sequence=2)
    (line,) = breaches(check()[1])
    assert line == (
        f"sequences: conversation {conversation.pk}: 2 repeated, 3 missing (last_sequence = 3)"
    )


def test_events_past_last_sequence_are_named(settled):
    conversation = settled[0]
    Conversation.objects.filter(pk=conversation.pk).update(last_sequence=2)
    code, output = check()
    assert code == 1
    (line,) = breaches(output)
    assert line.startswith(f"sequences: conversation {conversation.pk}: events go up to ")


def test_a_second_response_to_one_call_is_named(settled):
    conversation, turn_id, done, *_ = settled
    # The database forbids it (event_one_response_per_call): drop the index inside the test's
    # transaction, as a restore without constraints would leave things.
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX event_one_response_per_call")
    first = ConversationEvent.objects.get(tool_call_id=done)
    conversation.refresh_from_db()
    ConversationEvent.objects.create(
        conversation=conversation,
        sequence=conversation.last_sequence + 1,
        type="tool_call_response",
        turn_id=turn_id,
        tool_call_id=done,
        payload=first.payload,
    )
    Conversation.objects.filter(pk=conversation.pk).update(
        last_sequence=conversation.last_sequence + 1
    )
    code, output = check()
    assert code == 1
    assert breaches(output) == [f"responses: call {done}: 2 tool_call_response events"]


def test_a_settled_call_still_unfinished_is_named(settled):
    conversation, turn_id, done, running, ready = settled
    conversation.refresh_from_db()
    ConversationEvent.objects.create(
        conversation=conversation,
        sequence=conversation.last_sequence + 1,
        type="tool_call_response",
        turn_id=turn_id,
        tool_call_id=ready,
        payload={},
    )
    Conversation.objects.filter(pk=conversation.pk).update(
        last_sequence=conversation.last_sequence + 1
    )
    code, output = check()
    assert code == 1
    assert breaches(output) == [f"responses: call {ready}: settled, yet still unfinished (ready)"]


def test_an_open_call_in_an_ended_turn_is_named(settled):
    _, turn_id, _, running, ready = settled
    Turn.objects.filter(pk=turn_id).update(status="ended", ended_at=timezone.now())
    code, output = check()
    assert code == 1
    assert sorted(breaches(output)) == sorted(
        [
            f"open calls: call {running}: running in ended turn {turn_id}",
            f"open calls: call {ready}: ready in ended turn {turn_id}",
        ]
    )


def test_a_claim_of_a_call_that_is_not_running_is_named(settled):
    _, _, _, running, ready = settled
    from conversations.models import ToolCall

    ToolCall.objects.filter(pk=running).update(state="ready")
    ExecutionClaim.objects.create(
        call_id=ready,
        worker="ghost",
        generation=1,
        acquired_at=timezone.now(),
        heartbeat_at=timezone.now(),
        expires_at=timezone.now(),
    )
    code, output = check()
    assert code == 1
    assert sorted(breaches(output)) == sorted(
        [
            f"claims: call {running}: claimed by w but ready, not running",
            f"claims: call {ready}: claimed by ghost but ready, not running",
        ]
    )


def test_a_running_call_without_its_claim_or_at_another_generation_is_named(settled):
    _, _, _, running, ready = settled
    claim_acquire(call_id=ready, worker="w")
    ExecutionClaim.objects.filter(call_id=running).delete()
    ExecutionClaim.objects.filter(call_id=ready).update(generation=7)
    code, output = check()
    assert code == 1
    assert sorted(breaches(output)) == sorted(
        [
            f"claims: call {running}: running without a claim",
            f"claims: call {ready}: claim of generation 7, call at 1",
        ]
    )


def test_a_missing_an_altered_and_a_resized_asset_file_are_named(settled):
    _, _, done, *_ = settled
    (asset,) = Asset.objects.filter(tool_call_id=done)
    original = stored_bytes(asset)  # a file in DATA_DIR, or an object in the bucket
    store_replace(asset, original[:-1] + b"!")  # same size, other bytes
    code, output = check()
    assert code == 1
    (line,) = breaches(output)
    assert line.startswith(f"assets: asset {asset.pk} ({asset.path}): its file's SHA-256 is ")
    assert check("--no-hash")[0] == 0  # sizes only: the same size passes
    store_replace(asset, original + b"more")
    (line,) = breaches(check("--no-hash")[1])
    assert line.endswith(f"its file has {len(original) + 4} bytes, {asset.size} recorded")
    store_remove(asset)
    code, output = check()
    assert code == 1
    (line,) = breaches(output)
    assert line == (
        f"assets: asset {asset.pk} ({asset.path}): its file is missing (No such file or directory)"
    )


def test_an_asset_path_outside_data_dir_is_named(settled):
    _, _, done, *_ = settled
    Asset.objects.filter(tool_call_id=done).update(path="../../etc/passwd")
    (line,) = breaches(check()[1])
    outside = "DATA_DIR" if asset_store().name == "local" else "the bucket's prefix"
    assert line.endswith(f"(../../etc/passwd): its path leads outside {outside}")


def test_an_orphan_attempt_folder_older_than_the_lease_is_named_with_its_remedy(settled):
    conversation, _, done, running, ready = settled
    lost = attempt_dir(conversation.pk, ready, 1)  # a worker died before settling it
    lost.mkdir(parents=True)
    (lost / "stdout.txt").write_text("partial")
    fresh = attempt_dir(conversation.pk, done, 2)  # too young: a writer may still be at it
    fresh.mkdir(parents=True)
    gone = conversation_dir("00000000-0000-0000-0000-000000000001")
    gone.mkdir(parents=True)
    _age(lost)
    _age(gone)
    code, output = check()
    assert code == 1
    assert sorted(breaches(output)) == sorted(
        [
            f"orphans: {gone}: its conversation no longer exists; "
            "`python manage.py purge_orphans` removes it",
            f"orphans: {lost}: no settlement links it and no unfinished call owns it; "
            "`python manage.py purge_orphans` removes it",
        ]
    )
    call_command("purge_orphans", stdout=StringIO())
    assert check()[0] == 0  # purge_orphans removed what the check named (and the young one)
    assert not lost.exists() and not gone.exists() and not fresh.exists()
