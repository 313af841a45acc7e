"""Settlement: exactly one response per call, fencing, atomicity, assets and their digests."""

from __future__ import annotations

import hashlib
import threading
from unittest import mock

import pytest
from django.db import connections

from conversations.errors import InvalidTransition, StaleClaim
from conversations.models import Asset, ConversationEvent, ExecutionClaim, ToolActivity, ToolCall
from conversations.services.claims import claim_acquire
from conversations.services.recovery import recover_call
from conversations.services.settlement import ClaimGuard, GenerationGuard, call_settle
from conversations.storage import absolute_from_data, attempt_dir
from projections.fold import status_for_state
from tools.models import PermissionRule

from .helpers import assistant_calls, expire_claim, new_conversation, open_turn


def _ready_host_call(user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    posted = assistant_calls(conversation, turn_id, ("notes", {"q": "x"}))
    return conversation, posted.call_ids[0]


def _result(text: str) -> dict:
    return {"content": [{"type": "text", "text": text}]}


@pytest.mark.django_db
def test_settle_appends_one_response_deletes_row_and_links_assets(user):
    conversation, call_id = _ready_host_call(user)
    claim = claim_acquire(call_id=call_id, worker="w1")
    event = call_settle(
        call_id=call_id,
        outcome="completed",
        guard=ClaimGuard(claim.token, claim.generation),
        result=_result("the answer"),
        text="the answer",
    )
    assert event.type == "tool_call_response" and event.tool_call_id == call_id
    assert not ToolCall.objects.filter(pk=call_id).exists()
    assert not ExecutionClaim.objects.filter(call_id=call_id).exists()
    (asset,) = Asset.objects.filter(tool_call_id=call_id)
    assert asset.event_id == event.pk and asset.kind == "payload"
    path = absolute_from_data(asset.path)
    assert path == attempt_dir(conversation.pk, call_id, claim.generation) / "result.json"
    assert asset.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert asset.size == path.stat().st_size
    assert event.payload["assetIds"] == [str(asset.pk)]
    assert event.payload["outcome"] == "completed"
    assert event.payload["attempts"] == 1
    activity = ToolActivity.objects.get(tool_call_id=call_id)
    assert activity.state_json["status"] == "completed" and "finishedAt" in activity.state_json
    assert activity.payload_json["output"] == {"text": "the answer"}


@pytest.mark.django_db
def test_stale_generation_is_refused_and_leaves_nothing(user):
    conversation, call_id = _ready_host_call(user)
    first = claim_acquire(call_id=call_id, worker="w1")
    assert (
        recover_call(call_id=expire_claim(call_id)) is not None
    )  # host tool: settles indeterminate
    assert ConversationEvent.objects.filter(tool_call_id=call_id).count() == 1
    with pytest.raises(StaleClaim):
        call_settle(
            call_id=call_id,
            outcome="completed",
            guard=ClaimGuard(first.token, first.generation),
            result=_result("late"),
            text="late",
        )
    assert ConversationEvent.objects.filter(tool_call_id=call_id).count() == 1
    assert not Asset.objects.filter(tool_call_id=call_id).exists()
    assert not (attempt_dir(conversation.pk, call_id, first.generation) / "result.json").exists()


@pytest.mark.django_db
def test_wrong_token_or_generation_is_stale(user):
    _, call_id = _ready_host_call(user)
    claim = claim_acquire(call_id=call_id, worker="w1")
    for guard in (
        ClaimGuard("00000000-0000-0000-0000-000000000000", claim.generation),
        ClaimGuard(claim.token, claim.generation + 1),
        GenerationGuard(claim.generation - 1),
    ):
        with pytest.raises(StaleClaim):
            call_settle(call_id=call_id, outcome="cancelled", guard=guard)
    assert ToolCall.objects.get(pk=call_id).state == "running"
    assert not ConversationEvent.objects.filter(tool_call_id=call_id).exists()


@pytest.mark.django_db
def test_exception_inside_the_transaction_leaves_the_row_unfinished(user):
    _, call_id = _ready_host_call(user)
    claim = claim_acquire(call_id=call_id, worker="w1")
    guard = ClaimGuard(claim.token, claim.generation)
    with (
        mock.patch(
            "conversations.services.settlement.publish_call_removed",
            side_effect=RuntimeError("crash"),
        ),
        pytest.raises(RuntimeError),
    ):
        call_settle(
            call_id=call_id, outcome="completed", guard=guard, result=_result("x"), text="x"
        )
    assert ToolCall.objects.get(pk=call_id).state == "running"
    assert not ConversationEvent.objects.filter(tool_call_id=call_id).exists()
    assert not Asset.objects.filter(tool_call_id=call_id).exists()
    # The same holder can settle afterwards (its result.json is accepted as identical bytes).
    event = call_settle(
        call_id=call_id, outcome="completed", guard=guard, result=_result("x"), text="x"
    )
    assert event.payload["outcome"] == "completed"


@pytest.mark.django_db(transaction=True)
def test_two_racing_settlers_produce_exactly_one_response(user):
    _, call_id = _ready_host_call(user)
    claim = claim_acquire(call_id=call_id, worker="w1")
    guard = ClaimGuard(claim.token, claim.generation)
    start = threading.Barrier(2)
    outcomes: list[str] = []

    def settle(outcome_guard):
        try:
            start.wait()
            call_settle(call_id=call_id, outcome=outcome_guard[0], guard=outcome_guard[1])
            outcomes.append("won")
        except StaleClaim:
            outcomes.append("stale")
        finally:
            connections.close_all()

    threads = [
        threading.Thread(
            target=settle, args=(("indeterminate", GenerationGuard(claim.generation)),)
        ),
        threading.Thread(target=settle, args=(("cancelled", guard),)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["stale", "won"]
    assert ConversationEvent.objects.filter(tool_call_id=call_id).count() == 1
    assert not ToolCall.objects.filter(pk=call_id).exists()


@pytest.mark.django_db
def test_late_writer_of_an_old_generation_cannot_touch_the_winners_files(user, settings):
    settings.TOOLCORE_MAX_ATTEMPTS = 5
    conversation, call_id = _ready_host_call(user)
    # A replay-safe tool so recovery re-queues instead of settling: use the core `ls`.
    ToolCall.objects.filter(pk=call_id).update(tool_name="ls", arguments={})
    old = claim_acquire(call_id=call_id, worker="w-old")
    recover_call(call_id=expire_claim(call_id))
    assert ToolCall.objects.get(pk=call_id).state == "ready"
    new = claim_acquire(call_id=call_id, worker="w-new")
    assert new.generation == old.generation + 1
    winner = call_settle(
        call_id=call_id,
        outcome="completed",
        guard=ClaimGuard(new.token, new.generation),
        result={"entries": ["a"]},
        text="a",
    )
    winner_file = attempt_dir(conversation.pk, call_id, new.generation) / "result.json"
    before = winner_file.read_bytes()
    with pytest.raises(StaleClaim):
        call_settle(
            call_id=call_id,
            outcome="completed",
            guard=ClaimGuard(old.token, old.generation),
            result={"entries": ["evil"]},
            text="evil",
        )
    assert winner_file.read_bytes() == before
    assert not (attempt_dir(conversation.pk, call_id, old.generation) / "result.json").exists()
    (asset,) = Asset.objects.filter(tool_call_id=call_id)
    assert asset.event_id == winner.pk
    assert asset.sha256 == hashlib.sha256(before).hexdigest()


@pytest.mark.django_db
def test_settling_with_an_outcome_the_state_does_not_allow_is_refused(user):
    _, call_id = _ready_host_call(user)  # ready
    for outcome in ("completed", "indeterminate", "denied"):
        with pytest.raises(InvalidTransition):
            call_settle(call_id=call_id, outcome=outcome, guard=GenerationGuard(0))
    assert ToolCall.objects.get(pk=call_id).state == "ready"


@pytest.mark.django_db
def test_a_move_that_keeps_the_generation_still_beats_a_compare_and_set(user):
    """running → awaiting_input keeps the generation: a cancel that read `running` and chose
    `indeterminate` must lose, then settle `cancelled` on a fresh read."""
    from conversations.services import publish, settlement
    from conversations.services._in_transaction import call_transition
    from conversations.services.cancel import call_cancel

    _, call_id = _ready_host_call(user)
    claim = claim_acquire(call_id=call_id, worker="w1")
    real_prepare = settlement._prepare
    moved = []

    def prepare_then_move(call, **kwargs):
        if not moved:  # the handler asks the user while the cancel prepares
            with publish.atomic():
                running = ToolCall.objects.get(pk=call_id, generation=claim.generation)
                moved.append(
                    call_transition(
                        running,
                        "awaiting_input",
                        interaction={"kind": "input", "request": {"questions": []}},
                    )
                )
        return real_prepare(call, **kwargs)

    with mock.patch.object(settlement, "_prepare", side_effect=prepare_then_move):
        with pytest.raises(StaleClaim):
            call_settle(
                call_id=call_id, outcome="indeterminate", guard=GenerationGuard(claim.generation)
            )
        assert ToolCall.objects.get(pk=call_id).state == "awaiting_input"
        assert not ConversationEvent.objects.filter(tool_call_id=call_id).exists()
        assert call_cancel(call_id=call_id) == {"outcome": "cancelled", "alreadySettled": False}
    assert ConversationEvent.objects.get(tool_call_id=call_id).payload["outcome"] == "cancelled"


@pytest.mark.django_db
def test_an_activity_update_between_read_and_commit_is_folded_again_not_lost(user, monkeypatch):
    """Settlement compares-and-sets the activity on the rev it read; when a live update moved
    it meanwhile, the final state is folded again onto the newer one, in the same commit."""
    from django.db import transaction

    from conversations.services import settlement
    from conversations.services.activity import activity_fold

    conversation, call_id = _ready_host_call(user)
    claim = claim_acquire(call_id=call_id, worker="w1")
    read_rev = ToolActivity.objects.get(tool_call_id=call_id).rev
    turn_id = str(ToolCall.objects.get(pk=call_id).turn_id)
    load = settlement.settling_call_load

    def load_then_live_update(cid):
        call = load(cid)
        with transaction.atomic():  # another writer, after our read
            activity_fold(
                tool_call_id=cid,
                update={"toolCallId": str(cid), "turnId": turn_id, "title": "renamed meanwhile"},
            )
        return call

    monkeypatch.setattr(settlement, "settling_call_load", load_then_live_update)
    call_settle(
        call_id=call_id,
        outcome="completed",
        guard=ClaimGuard(claim.token, claim.generation),
        result=_result("done"),
        text="done",
    )
    activity = ToolActivity.objects.get(tool_call_id=call_id)
    assert activity.rev == read_rev + 2
    assert activity.is_final
    assert activity.state_json["status"] == "completed"
    assert activity.state_json["title"] == "renamed meanwhile"  # the live update is kept
    assert activity.payload_json["output"] == {"text": "done"}
    assert ConversationEvent.objects.filter(tool_call_id=call_id).count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("holder", [True, False], ids=["claim-guard", "generation-guard"])
def test_a_guard_lost_after_the_read_writes_nothing_and_takes_no_sequence(
    user, monkeypatch, holder
):
    """The row changes between settlement's read and its transaction (recovery took the call
    back): the guard inside the transaction refuses, and no sequence, event or asset is left."""
    from conversations.services import settlement

    conversation, call_id = _ready_host_call(user)
    claim = claim_acquire(call_id=call_id, worker="w1")
    conversation.refresh_from_db()
    head = conversation.last_sequence
    load = settlement.settling_call_load

    def load_then_recovered(cid):
        call = load(cid)
        ExecutionClaim.objects.filter(call_id=cid).delete()
        ToolCall.objects.filter(pk=cid).update(state="ready", attempt=2)
        return call

    monkeypatch.setattr(settlement, "settling_call_load", load_then_recovered)
    guard = (
        ClaimGuard(claim.token, claim.generation) if holder else GenerationGuard(claim.generation)
    )
    with pytest.raises(StaleClaim):
        call_settle(
            call_id=call_id,
            outcome="completed" if holder else "cancelled",
            guard=guard,
            result=_result("late"),
            text="late",
        )
    conversation.refresh_from_db()
    assert conversation.last_sequence == head
    assert not ConversationEvent.objects.filter(tool_call_id=call_id).exists()
    assert not Asset.objects.filter(tool_call_id=call_id).exists()
    assert ToolCall.objects.get(pk=call_id).state == "ready"
    assert not ToolActivity.objects.get(tool_call_id=call_id).is_final


@pytest.mark.django_db(transaction=True)
def test_many_settlers_of_one_conversation_neither_deadlock_nor_leave_gaps(user):
    """8 threads settle, cancel and renew the claims of 40 calls of one conversation in
    different orders. Every call gets exactly one response, sequences stay gapless, and no
    settler fails with anything but ``stale_claim`` (a deadlock would surface as an error)."""
    import random

    from conversations.services.claims import claim_renew

    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    call_ids = assistant_calls(
        conversation, turn_id, *[("notes", {"q": n}) for n in range(40)]
    ).call_ids
    claims = {cid: claim_acquire(call_id=cid, worker="w") for cid in call_ids}
    start = threading.Barrier(8)
    errors: list[BaseException] = []
    won: list[str] = []
    refused: list[tuple[int, str]] = []  # (thread, call): a settle or renewal that lost

    def settler(n: int) -> None:
        order = list(call_ids)
        random.Random(n).shuffle(order)
        try:
            start.wait()
            for cid in order:
                claim = claims[cid]
                try:
                    if n % 3 == 0:
                        claim_renew(call_id=cid, token=claim.token, generation=claim.generation)
                        continue
                    if n % 3 == 1:
                        guard = ClaimGuard(claim.token, claim.generation)
                        call_settle(
                            call_id=cid,
                            outcome="completed",
                            guard=guard,
                            result=_result(f"by {n}"),
                            text=f"by {n}",
                        )
                    else:
                        call_settle(
                            call_id=cid,
                            outcome="indeterminate",
                            guard=GenerationGuard(claim.generation),
                        )
                    won.append(str(cid))
                except StaleClaim:
                    refused.append((n, str(cid)))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=settler, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(won) == sorted(str(c) for c in call_ids)  # each call settled exactly once
    # Every other settle attempt (5 settling threads x 40 calls) was refused, not lost.
    settle_refusals = [r for r in refused if r[0] % 3 != 0]
    assert len(won) + len(settle_refusals) == 5 * 40
    responses = ConversationEvent.objects.filter(
        conversation=conversation, type="tool_call_response"
    )
    assert responses.count() == 40
    sequences = list(
        ConversationEvent.objects.filter(conversation=conversation)
        .order_by("sequence")
        .values_list("sequence", flat=True)
    )
    assert sequences == list(range(1, len(sequences) + 1))
    assert not ToolCall.objects.filter(conversation=conversation).exists()
    assert not ExecutionClaim.objects.filter(call_id__in=call_ids).exists()
    assert Asset.objects.filter(conversation=conversation).count() == sum(
        1 for r in responses if r.payload["outcome"] == "completed"
    )
    assert all(a.is_final for a in ToolActivity.objects.filter(conversation=conversation))


@pytest.mark.django_db
def test_a_call_that_fails_after_its_permission_was_refused_reads_denied(user):
    _, call_id = _ready_host_call(user)
    claim = claim_acquire(call_id=call_id, worker="w1")
    ToolCall.objects.filter(pk=call_id).update(permission_refused=True)
    event = call_settle(
        call_id=call_id,
        outcome="failed",
        guard=ClaimGuard(claim.token, claim.generation),
        reason="The host could not run it.",
    )
    assert event.payload["outcome"] == "denied"
    activity = ToolActivity.objects.get(tool_call_id=call_id)
    assert activity.state_json["status"] == status_for_state("denied")


@pytest.mark.django_db
def test_the_model_text_names_a_core_tools_subject_as_its_resource(user):
    """``Resource:`` is the command of ``bash`` and the path of a path tool as the arguments
    write it (``ToolSpec.subject_of``); a path tool without ``path`` and a host tool name
    none."""
    for tool in ("bash", "read", "ls", "editor"):
        PermissionRule.objects.create(tool_name=tool, pattern="", decision="deny")
    conversation = new_conversation(user)
    posted = assistant_calls(
        conversation,
        open_turn(conversation),
        ("bash", {"command": "rm -rf build"}),
        ("read", {"path": "notes/a.txt"}),
        ("ls", {}),
        ("editor", {"command": "sed -i s/a/b/ x", "file_path": "x"}),
    )
    texts = [
        ConversationEvent.objects.get(tool_call_id=call_id).payload["modelContent"][0]["text"]
        for call_id in posted.call_ids
    ]
    resources = [[line for line in t.splitlines() if line.startswith("Resource:")] for t in texts]
    assert resources == [["Resource: rm -rf build"], ["Resource: notes/a.txt"], [], []]
