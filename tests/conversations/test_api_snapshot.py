"""GET /conversations/{cid}/snapshot and ``snapshot_read`` (docs/subsystems/api.md, "Snapshot"):
shape, owner scoping, frame budgets, one consistent read, and events applied to a snapshot
giving the next snapshot."""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

import pytest
from django.db import connections
from django.utils import timezone

from conversations import snapshots
from conversations.errors import NotFound
from conversations.models import ToolCall, Turn
from conversations.services.calls import model_call_id
from conversations.services.cancel import call_cancel, turn_end
from conversations.services.interactions import call_resolve
from conversations.services.messages import command_post, message_post
from conversations.snapshots import snapshot_read
from conversations.storage import attempt_relative
from projections.fold import FINAL_STATUSES
from projections.frames import FRAME_BUDGET_BYTES, PAYLOAD_BUDGET_BYTES
from tools.runtime.async_runs.services import async_run_finish, async_run_start

from .api_helpers import (
    API,
    ISO_MS,
    PAYLOAD_KEYS,
    assert_error,
    build_world,
    compact_size,
    grant_run_commands,
    payload_bytes,
    settle_host,
)
from .helpers import assistant_calls, new_conversation, open_turn, state_of

SNAPSHOT_KEYS = {"conversation", "lastSequence", "openTurn", "calls", "tools", "queue", "asyncRuns"}


def _snapshot(api, conversation) -> dict[str, Any]:
    response = api.get(f"{API}/conversations/{conversation.pk}/snapshot")
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"] == "application/json"
    assert len(response.content) <= FRAME_BUDGET_BYTES
    return json.loads(response.content)


# --- shape ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_snapshot_holds_the_current_state(api, user):
    world = build_world(user)
    body = _snapshot(api, world.conversation)
    assert set(body) == SNAPSHOT_KEYS
    assert body["conversation"]["id"] == str(world.conversation.pk)
    assert body["lastSequence"] == body["conversation"]["lastSequence"] == 3
    turn = body["openTurn"]
    assert set(turn) == {"id", "ordinal", "origin", "createdAt"}
    assert (turn["id"], turn["ordinal"], turn["origin"]) == (world.turn_id, 1, "user")
    assert ISO_MS.match(turn["createdAt"])
    # The bash call awaits approval; the host call settled (its card stays, its row went).
    (call,) = body["calls"]
    assert call["id"] == world.open_id and call["state"] == "awaiting_approval"
    assert call["interaction"]["kind"] == "approval"
    assert call["arguments"] == {"command": "ls -la"} and "argumentsOmitted" not in call
    cards = {card["toolCallId"]: card for card in body["tools"]}
    assert list(cards) == [world.open_id, world.settled_id]  # newest first
    assert cards[world.open_id]["status"] == "awaiting_approval"
    assert cards[world.settled_id]["status"] == "completed"
    assert cards[world.settled_id]["output"] == {"text": "one\ntwo"}
    assert all(card["rev"] >= 1 for card in cards.values())
    assert body["queue"] == []
    (run,) = body["asyncRuns"]
    assert (run["id"], run["status"], run["command"]) == (world.run_id, "running", "make watch")


@pytest.mark.django_db
def test_a_new_conversation_has_an_empty_snapshot(api, user):
    conversation = new_conversation(user)
    body = _snapshot(api, conversation)
    assert body["lastSequence"] == 0
    assert (body["openTurn"], body["calls"], body["tools"], body["queue"], body["asyncRuns"]) == (
        None,
        [],
        [],
        [],
        [],
    )


@pytest.mark.django_db
def test_after_the_turn_ended_the_latest_turns_cards_stay(api, user):
    world = build_world(user)
    turn_end(conversation_id=world.conversation.pk, turn_id=world.turn_id)
    body = _snapshot(api, world.conversation)
    assert body["openTurn"] is None and body["calls"] == []
    statuses = {card["toolCallId"]: card["status"] for card in body["tools"]}
    assert statuses == {world.open_id: "cancelled", world.settled_id: "completed"}
    # A new turn's snapshot holds only its own cards.
    turn_id = open_turn(world.conversation)
    (call_id,) = assistant_calls(world.conversation, turn_id, ("notes", {"n": 1})).call_ids
    body = _snapshot(api, world.conversation)
    assert [card["toolCallId"] for card in body["tools"]] == [str(call_id)]
    assert body["openTurn"]["ordinal"] == 2


@pytest.mark.django_db
def test_unfinished_calls_of_an_earlier_turn_keep_their_cards(api, user):
    """A turn settles its calls before it ends, so this takes rows written by hand: should an
    unfinished call outlive its turn, the snapshot still shows its card."""
    world = build_world(user)
    Turn.objects.filter(pk=world.turn_id).update(status="ended", ended_at=timezone.now())
    Turn.objects.create(
        conversation=world.conversation, ordinal=2, status="ended", ended_at=timezone.now()
    )
    body = _snapshot(api, world.conversation)
    assert body["openTurn"] is None
    assert [c["id"] for c in body["calls"]] == [world.open_id]
    assert [card["toolCallId"] for card in body["tools"]] == [world.open_id]


# --- owner scoping -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_another_owners_conversation_is_not_found_like_a_missing_one(api, other_api, user):
    world = build_world(user)
    answers = []
    for cid in (world.conversation.pk, uuid.uuid4(), "not-a-uuid"):
        response = other_api.get(f"{API}/conversations/{cid}/snapshot")
        answers.append(assert_error(response, 404, "not_found"))
    assert answers[0] == answers[1] == answers[2]
    with pytest.raises(NotFound):
        snapshot_read(user, uuid.uuid4())


# --- budgets -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_cards_with_16_kib_outputs_stay_within_the_frame_and_payload_budgets(api, user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    output = "é😀\n" * 6000  # ~48 KiB of UTF-8: each card holds a cut 16 KiB output
    ids = []
    for _ in range(2):
        calls = [("notes", {"q": "x" * 1500, "n": n}) for n in range(15)]
        ids += assistant_calls(conversation, turn_id, *calls).call_ids
    for call_id in ids[:-3]:  # three stay unfinished
        settle_host(call_id, text=output)
    body = _snapshot(api, conversation)
    assert compact_size(body) <= FRAME_BUDGET_BYTES
    cards = body["tools"]
    assert [card["toolCallId"] for card in cards] == [str(i) for i in reversed(ids)]
    sent = [card for card in cards if "payloadOmitted" not in card]
    omitted = [card for card in cards if "payloadOmitted" in card]
    assert sent and omitted
    assert cards[: len(sent)] == sent  # newest first: the payloads of the newest cards
    assert sum(payload_bytes(card) for card in sent) <= PAYLOAD_BUDGET_BYTES
    for card in omitted:
        assert card["payloadOmitted"]["bytes"] > 16_000
        assert not set(PAYLOAD_KEYS) & set(card)
        assert card["status"] == "completed"
    assert [c["id"] for c in body["calls"]] == [str(i) for i in ids[-3:]]


@pytest.mark.django_db
def test_the_envelope_is_counted_in_the_frame(user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    ids = assistant_calls(conversation, turn_id, *[("notes", {"n": n}) for n in range(20)]).call_ids
    for call_id in ids:
        settle_host(call_id, text="ü" * 30_000)
    whole = snapshot_read(user, conversation.pk)
    assert len(whole["tools"]) == 20
    envelope = 800_000
    framed = snapshot_read(user, conversation.pk, envelope_bytes=envelope)
    assert compact_size(framed) + envelope <= FRAME_BUDGET_BYTES
    assert 1 <= len(framed["tools"]) < 20
    newest = [card["toolCallId"] for card in framed["tools"]]
    assert newest == [str(i) for i in reversed(ids)][: len(newest)]


@pytest.mark.django_db
def test_unfinished_calls_are_bounded_and_cut_to_their_budget(api, user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    ids = []
    for _ in range(2):
        calls = [("notes", {"a": "y" * 1900, "b": "z" * 1900, "n": n}) for n in range(40)]
        ids += assistant_calls(conversation, turn_id, *calls).call_ids
    body = _snapshot(api, conversation)
    assert set(body) == SNAPSHOT_KEYS | {"omitted"}
    kept = body["calls"]
    assert compact_size(kept) <= snapshots.CALLS_BUDGET_BYTES
    assert [c["id"] for c in kept] == [str(i) for i in ids[: len(kept)]]  # oldest first
    assert body["omitted"] == {"calls": len(ids) - len(kept)}
    assert 40 < len(kept) < 80
    assert compact_size(body) <= FRAME_BUDGET_BYTES
    assert len(body["tools"]) == 80


@pytest.mark.django_db
def test_unfinished_calls_beyond_what_is_read_are_counted(user, monkeypatch):
    monkeypatch.setattr(snapshots, "UNFINISHED_READ_MAX", 5)
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    ids = assistant_calls(conversation, turn_id, *[("notes", {"n": n}) for n in range(7)]).call_ids
    body = snapshot_read(user, conversation.pk)
    assert [c["id"] for c in body["calls"]] == [str(i) for i in ids[:5]]
    assert body["omitted"] == {"calls": 2}
    assert len(body["tools"]) == 7


@pytest.mark.django_db
def test_the_queue_and_running_runs_are_listed(api, user):
    world = build_world(user)
    second = async_run_start(
        run_id=uuid.uuid4(),
        conversation_id=world.conversation.pk,
        tool_call_id=world.settled_id,
        command="make other",
        cwd="/ws",
        folder=attempt_relative(world.conversation.pk, world.settled_id, 1),
        host="elsewhere",
        pid=2,
        pgid=2,
        process_start=2,
    )
    notice = async_run_finish(run_id=world.run_id, status="exited", exit_code=0, signal=None)
    assert notice is not None
    body = _snapshot(api, world.conversation)
    assert [e["sequence"] for e in body["queue"]] == [notice.sequence]
    assert body["queue"][0]["type"] == "async_bash_event"
    assert [r["id"] for r in body["asyncRuns"]] == [str(second.pk)]
    assert body["lastSequence"] == notice.sequence


# --- one consistent read -------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_write_during_the_read_is_not_half_seen(user, monkeypatch):
    """Another connection settles a call between the snapshot's first query and the rest: the
    snapshot shows the state before it, entirely (PostgreSQL: REPEATABLE READ; SQLite: the
    writer waits for the snapshot's transaction)."""
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("notes", {"n": 1})).call_ids
    before = snapshot_read(user, conversation.pk)["lastSequence"]
    real = snapshots.conversation_for
    done = threading.Event()

    def cancel_elsewhere() -> None:
        try:
            call_cancel(call_id=call_id)
        finally:
            connections.close_all()
            done.set()

    writer = threading.Thread(target=cancel_elsewhere)

    def conversation_then_a_write(*args: Any) -> Any:
        conversation = real(*args)  # the read's first query: its snapshot is taken
        writer.start()
        done.wait(timeout=1)  # PostgreSQL: the write commits now; SQLite: it waits for us
        return conversation

    monkeypatch.setattr(snapshots, "conversation_for", conversation_then_a_write)
    body = snapshot_read(user, conversation.pk)
    writer.join(timeout=30)
    assert not writer.is_alive()
    assert body["lastSequence"] == before
    assert [c["id"] for c in body["calls"]] == [str(call_id)]
    assert body["tools"][0]["status"] == "pending"
    monkeypatch.setattr(snapshots, "conversation_for", real)
    after = snapshot_read(user, conversation.pk)
    assert after["lastSequence"] == before + 1 and after["calls"] == []
    assert after["tools"][0]["status"] == "cancelled"


# --- events after lastSequence turn a snapshot into the next one -------------------------------


def _durable(snapshot: dict[str, Any]) -> dict[str, Any]:
    """What the event log must be able to rebuild: the head, the open turn, the unfinished
    calls and the notices waiting."""
    turn = snapshot["openTurn"]
    return {
        "lastSequence": snapshot["lastSequence"],
        "openTurn": turn and turn["id"],
        "unfinished": sorted(call["id"] for call in snapshot["calls"]),
        "queue": [event["sequence"] for event in snapshot["queue"]],
    }


def _apply(state: dict[str, Any], event: dict[str, Any], conversation_id: Any) -> set[str]:
    """The reference reducer: one event applied to a durable state; answers the calls it
    settled."""
    assert event["sequence"] == state["lastSequence"] + 1, "a gap or a repeat"
    state["lastSequence"] = event["sequence"]
    kind, payload = event["type"], event["payload"]
    if kind == "user_message":
        state["openTurn"] = event["turnId"]
    elif kind == "assistant_message":
        for index, block in enumerate(payload["content"]):
            if block["type"] == "tool_call":
                call_id = model_call_id(conversation_id, payload["messageId"], index)
                state["unfinished"].append(str(call_id))
    elif kind == "tool_call_response":
        if event["toolCallId"] in state["unfinished"]:
            state["unfinished"].remove(event["toolCallId"])
        return {event["toolCallId"]}
    elif kind == "turn_ended":
        if state["openTurn"] == event["turnId"]:
            state["openTurn"] = None
    elif kind == "async_bash_event":
        state["queue"].append(event["sequence"])
    return set()


def _events_after(api, conversation, after: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    while True:
        response = api.get(f"{API}/conversations/{conversation.pk}/events?after={after}")
        page = response.json()
        events += page["events"]
        if page["nextAfter"] is None:
            return events
        after = page["nextAfter"]


@pytest.mark.django_db
def test_applying_the_events_after_a_snapshot_gives_the_next_snapshot(api, user):
    """In the manner of Zulip's ``verify_action``: for every kind of durable change, the
    snapshot before it plus the events after its ``lastSequence`` equals a fresh snapshot."""
    conversation = new_conversation(user)
    cid = conversation.pk
    turn: dict[str, Any] = {}
    calls: dict[str, Any] = {}

    def user_message() -> None:
        posted = message_post(
            conversation_id=cid,
            message_id=f"u-{uuid.uuid4()}",
            role="user",
            content=[{"type": "text", "text": "go"}],
        )
        turn["id"] = posted.body["turnId"]

    def assistant_with_calls() -> None:
        ids = assistant_calls(
            conversation,
            turn["id"],
            ("notes", {"n": 1}),  # a host tool: ready
            ("bash", {"command": "ls"}),  # asks: awaiting approval
            ("notes", {"n": 2}),
            ("read", {}),  # bad arguments: settles failed at once
            text="working",
        ).call_ids
        calls.update(host=ids[0], bash=ids[1], other=ids[2], bad=ids[3])
        assert state_of(calls["bad"]) is None

    def assistant_text_only() -> None:
        assistant_calls(conversation, turn["id"], text="no calls this time")

    def settle_completed() -> None:
        settle_host(calls["host"], text="done")

    def settle_denied() -> None:
        call_resolve(
            call_id=calls["bash"],
            user=user,
            request_id="deny-1",
            resolution={"kind": "approval", "decision": "deny", "persist": False},
        )

    def settle_cancelled() -> None:
        call_cancel(call_id=calls["other"])

    def end_turn() -> None:
        turn_end(conversation_id=cid, turn_id=turn["id"])

    def command_run() -> None:
        # A !command's turn opens without an event (the log has no event for it; see
        # docs/subsystems/api.md, "Snapshot"): the change checked is the command with its end.
        grant_run_commands(user)
        posted = command_post(
            conversation_id=cid, user=user, input_id=f"i-{uuid.uuid4()}", command="ls"
        )
        call_cancel(call_id=posted.call_ids[0])

    def async_notice() -> None:
        run = async_run_start(
            run_id=uuid.uuid4(),
            conversation_id=cid,
            tool_call_id=calls["host"],
            command="make watch",
            cwd="/ws",
            folder=attempt_relative(cid, calls["host"], 1),
            host="elsewhere",
            pid=1,
            pgid=1,
            process_start=1,
        )
        assert async_run_finish(run_id=run.pk, status="exited", exit_code=0, signal=None)

    changes = [
        user_message,
        assistant_with_calls,
        settle_completed,
        assistant_text_only,
        settle_denied,
        settle_cancelled,
        end_turn,
        command_run,
        async_notice,
        user_message,
        assistant_with_calls,
        end_turn,  # settles what is open, then turn_ended
    ]
    for change in changes:
        snapshot = snapshot_read(user, cid)
        state = _durable(snapshot)
        change()
        settled: set[str] = set()
        for event in _events_after(api, conversation, snapshot["lastSequence"]):
            settled |= _apply(state, event, cid)
        state["unfinished"].sort()
        fresh = snapshot_read(user, cid)
        assert state == _durable(fresh), change.__name__
        cards = {card["toolCallId"]: card for card in fresh["tools"]}
        for call_id in settled:
            assert not ToolCall.objects.filter(pk=call_id).exists()
            if call_id in cards:
                assert cards[call_id]["status"] in FINAL_STATUSES, change.__name__
    assert fresh["lastSequence"] > 10
