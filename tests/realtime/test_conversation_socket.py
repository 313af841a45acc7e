"""``/ws/conversations/`` through the real ASGI application (auth, origin check, routing)."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings

from conversations.models import ConversationEvent
from conversations.realtime.ws_auth import credential_watch
from conversations.services.publish import conversation_group, live_layer_alias
from projections.frames import FRAME_BUDGET_BYTES, REPLAY_BUDGET_BYTES, REPLAY_MAX_EVENTS
from tests.conversations.api_helpers import settle_host
from tests.conversations.helpers import assistant_calls, new_conversation, open_turn
from tests.waits import until
from tools.runtime.launches.services import workbench_group

from .helpers import (
    connect,
    conversation_with_turn,
    frames_until,
    hello,
    published,
    receive,
    say,
    send,
    sequences,
    token_for,
)

pytestmark = pytest.mark.django_db(transaction=True)


async def test_without_credentials_the_socket_is_closed_4401(user):
    socket = await connect()
    message = await socket.receive_output(timeout=5)
    assert message == {"type": "websocket.close", "code": 4401}


async def test_a_bad_token_is_closed_4401(user):
    socket = await connect("tc_not-a-token")
    message = await socket.receive_output(timeout=5)
    assert message == {"type": "websocket.close", "code": 4401}


async def test_hello_then_initial_snapshot_then_live_events_in_order(user):
    token = await token_for(user)
    conversation, turn_id = await conversation_with_turn(user)
    socket = await connect(token)
    await hello(socket)
    await send(socket, {"type": "subscribe", "conversationId": str(conversation.pk), "after": None})
    snapshot = await receive(socket)
    assert snapshot["type"] == "snapshot"
    assert snapshot["reason"] == "initial"
    assert snapshot["conversationId"] == str(conversation.pk)
    head = snapshot["snapshot"]["lastSequence"]
    assert head == conversation.last_sequence

    appended = await say(conversation, turn_id, 5)
    assert appended == list(range(head + 1, head + 6))
    frames = await frames_until(
        socket, lambda f: f["type"] == "conversation.event" and f["event"]["sequence"] == head + 5
    )
    assert sequences(frames) == appended
    event = frames[-1]
    assert set(event) == {"type", "conversationId", "event"}
    assert set(event["event"]) == {
        "sequence",
        "type",
        "turnId",
        "toolCallId",
        "payload",
        "createdAt",
    }
    await socket.disconnect()


async def test_replay_pages_are_exact_and_bounded_then_live(user):
    token = await token_for(user)
    conversation, turn_id = await conversation_with_turn(user)
    # 250 events of ~4 KiB each: the 512 KiB budget cuts pages below 100 events.
    await say(conversation, turn_id, 250, text="x" * 4000)
    socket = await connect(token)
    await hello(socket)
    await send(socket, {"type": "subscribe", "conversationId": str(conversation.pk), "after": 3})
    frames = await frames_until(socket, lambda f: f["type"] == "replay" and f["to"] == 251)
    assert all(f["type"] == "replay" for f in frames)
    assert frames[0]["from"] == 3
    for before, after in zip(frames, frames[1:], strict=False):
        assert after["from"] == before["to"]
    for frame in frames:
        assert 1 <= len(frame["events"]) <= REPLAY_MAX_EVENTS
        size = sum(
            len(json.dumps(e, ensure_ascii=False, separators=(",", ":")).encode())
            for e in frame["events"]
        )
        assert size <= REPLAY_BUDGET_BYTES
    assert len(frames) > 2  # the byte budget, not the count, cut the pages
    assert sequences(frames) == list(range(4, 252))

    await say(conversation, turn_id, 1)
    live = await receive(socket)
    assert live["type"] == "conversation.event" and live["event"]["sequence"] == 252
    await socket.disconnect()


async def test_a_cursor_beyond_the_head_gets_a_snapshot(user):
    token = await token_for(user)
    conversation, _ = await conversation_with_turn(user)
    socket = await connect(token)
    await hello(socket)
    await send(socket, {"type": "subscribe", "conversationId": str(conversation.pk), "after": 999})
    frame = await receive(socket)
    assert frame["type"] == "snapshot" and frame["reason"] == "cursor_ahead"
    assert frame["snapshot"]["lastSequence"] == conversation.last_sequence
    await socket.disconnect()


async def test_a_cursor_at_the_head_gets_nothing_until_the_next_event(user):
    token = await token_for(user)
    conversation, turn_id = await conversation_with_turn(user)
    socket = await connect(token)
    await hello(socket)
    await send(
        socket,
        {
            "type": "subscribe",
            "conversationId": str(conversation.pk),
            "after": conversation.last_sequence,
        },
    )
    assert await socket.receive_nothing(timeout=0.3)
    await say(conversation, turn_id, 1)
    frame = await receive(socket)
    assert frame["event"]["sequence"] == conversation.last_sequence + 1
    await socket.disconnect()


async def test_another_owners_conversation_is_not_found_like_a_missing_one(user, other_user):
    token = await token_for(user)
    theirs = await sync_to_async(new_conversation)(other_user)
    socket = await connect(token)
    await hello(socket)
    answers = []
    for cid in (str(theirs.pk), "00000000-0000-0000-0000-000000000000", "not-a-uuid"):
        await send(socket, {"type": "subscribe", "conversationId": cid, "after": None})
        answers.append(await receive(socket))
    codes = [(a["type"], a["code"], a["message"]) for a in answers]
    assert codes == [("error", "not_found", "Conversation not found.")] * 3
    # Not subscribed: their events do not reach this socket.
    conversation, turn_id = await conversation_with_turn(other_user)
    await say(conversation, turn_id, 1)
    assert await socket.receive_nothing(timeout=0.2)
    await socket.disconnect()


@pytest.mark.parametrize(
    ("text", "code", "field"),
    [
        ("{not json", "malformed_json", None),
        ("[1, 2]", "validation_error", "type"),
        ('{"conversationId": "x"}', "validation_error", "type"),
        ('{"type": "dance"}', "unknown_type", "type"),
        ('{"type": "subscribe"}', "validation_error", "conversationId"),
        ('{"type": "subscribe", "conversationId": 7}', "validation_error", "conversationId"),
        (
            '{"type": "subscribe", "conversationId": "00000000-0000-0000-0000-000000000000", "after": -1}',
            "validation_error",
            "after",
        ),
        (
            '{"type": "subscribe", "conversationId": "00000000-0000-0000-0000-000000000000", "after": true}',
            "validation_error",
            "after",
        ),
        ('{"type": "subscribe", "conversationId": "x", "after": NaN}', "validation_error", "after"),
        ('{"type": "resolve", "requestId": "r"}', "validation_error", "toolCallId"),
        (
            '{"type": "resolve", "toolCallId": "00000000-0000-0000-0000-000000000000", "requestId": "r", "kind": "maybe"}',
            "validation_error",
            "kind",
        ),
    ],
)
async def test_a_bad_frame_gets_an_error_and_the_socket_stays_open(user, text, code, field):
    token = await token_for(user)
    conversation, _ = await conversation_with_turn(user)
    before = await sync_to_async(ConversationEvent.objects.count)()
    socket = await connect(token)
    await hello(socket)
    await socket.send_to(text_data=text)
    error = await receive(socket)
    assert error["type"] == "error" and error["code"] == code, error
    assert error.get("field") == field
    assert isinstance(error["message"], str) and error["message"]
    # Still open and working; nothing was written.
    await send(socket, {"type": "subscribe", "conversationId": str(conversation.pk), "after": None})
    assert (await receive(socket))["type"] == "snapshot"
    assert await sync_to_async(ConversationEvent.objects.count)() == before
    await socket.disconnect()


async def test_a_frame_over_1_mib_closes_with_1009(user):
    token = await token_for(user)
    socket = await connect(token)
    await hello(socket)
    await socket.send_to(text_data=json.dumps({"type": "subscribe", "pad": "x" * (1024 * 1024)}))
    message = await socket.receive_output(timeout=5)
    assert message["type"] == "websocket.close" and message["code"] == 1009


async def test_a_frame_of_exactly_1_mib_is_read(user):
    token = await token_for(user)
    socket = await connect(token)
    await hello(socket)
    frame = '{"type":"dance","pad":"' + "é" * 10 + "x" * (1024 * 1024 - 45) + '"}'
    assert len(frame.encode()) == 1024 * 1024
    await socket.send_to(text_data=frame)
    assert (await receive(socket))["code"] == "unknown_type"
    await socket.disconnect()


async def test_several_conversations_on_one_socket_and_unsubscribe(user):
    token = await token_for(user)
    first, first_turn = await conversation_with_turn(user)
    second, second_turn = await conversation_with_turn(user)
    socket = await connect(token)
    await hello(socket)
    for conversation in (first, second):
        await send(
            socket,
            {
                "type": "subscribe",
                "conversationId": str(conversation.pk),
                "after": conversation.last_sequence,
            },
        )
    await say(first, first_turn, 1)
    await say(second, second_turn, 1)
    # Each arrives once, live or replayed (the subscription may still be reading).
    got = [await receive(socket), await receive(socket)]
    assert {(f["conversationId"], sequences([f])[0]) for f in got} == {
        (str(first.pk), first.last_sequence + 1),
        (str(second.pk), second.last_sequence + 1),
    }
    await send(socket, {"type": "unsubscribe", "conversationId": str(first.pk)})
    await say(first, first_turn, 1)
    await say(second, second_turn, 1)
    frame = await receive(socket)
    assert frame["conversationId"] == str(second.pk)
    assert await socket.receive_nothing(timeout=0.2)
    await socket.disconnect()


async def test_resubscribing_with_the_last_sequence_misses_nothing(user):
    token = await token_for(user)
    conversation, turn_id = await conversation_with_turn(user)
    socket = await connect(token)
    await hello(socket)
    cid = str(conversation.pk)
    await send(socket, {"type": "subscribe", "conversationId": cid, "after": 0})
    seen = sequences(
        await frames_until(socket, lambda f: f.get("to") == conversation.last_sequence)
    )
    await socket.disconnect()
    await say(conversation, turn_id, 7)  # while away
    socket = await connect(token)
    await hello(socket)
    await send(socket, {"type": "subscribe", "conversationId": cid, "after": seen[-1]})
    frames = await frames_until(socket, lambda f: f.get("to") == seen[-1] + 7)
    seen += sequences(frames)
    assert seen == list(range(1, seen[-1] + 1))
    await socket.disconnect()


async def test_a_cursor_beyond_any_integer_the_database_holds_is_just_ahead(user):
    token = await token_for(user)
    conversation, _ = await conversation_with_turn(user)
    socket = await connect(token)
    await hello(socket)
    await send(
        socket, {"type": "subscribe", "conversationId": str(conversation.pk), "after": 10**30}
    )
    frame = await receive(socket)
    assert (frame["type"], frame["reason"]) == ("snapshot", "cursor_ahead")
    await socket.disconnect()


async def test_tool_updates_reach_subscribers_with_their_rev_and_stop_after_unsubscribe(user):
    token = await token_for(user)
    conversation, turn_id = await conversation_with_turn(user)
    socket = await connect(token)
    await hello(socket)
    cid = str(conversation.pk)
    await send(socket, {"type": "subscribe", "conversationId": cid, "after": None})
    await receive(socket)
    posted = await sync_to_async(assistant_calls)(
        conversation, turn_id, ("read", {"path": "a.txt"})
    )
    (call_id,) = posted.call_ids
    frames = await frames_until(socket, lambda f: f["type"] == "tool.updated")
    update = frames[-1]["update"]
    assert (update["toolCallId"], update["rev"], update["status"]) == (str(call_id), 1, "pending")
    assert update["input"] == {"path": "a.txt"}
    await published()
    await send(socket, {"type": "unsubscribe", "conversationId": cid})
    (after,) = await say(conversation, turn_id, 1)
    late = []  # what the call's moves published before the unsubscribe may still come
    while not await socket.receive_nothing(timeout=0.3):
        late.append(await receive(socket))
    assert all(f["type"] in ("tool.updated", "tool_call.changed") for f in late)
    assert after not in sequences(late)
    await socket.disconnect()


@sync_to_async
def cards_with_big_outputs(user, count: int):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    ids = assistant_calls(conversation, turn_id, *[("notes", {"n": n}) for n in range(count)])
    for call_id in ids.call_ids:
        settle_host(call_id, text="ü" * 30_000)
    return conversation


async def test_the_snapshot_frame_with_its_envelope_stays_within_896_kib(user):
    conversation = await cards_with_big_outputs(user, 60)
    token = await token_for(user)
    socket = await connect(token)
    await hello(socket)
    await send(socket, {"type": "subscribe", "conversationId": str(conversation.pk), "after": None})
    text = await socket.receive_from(timeout=10)
    assert len(text.encode()) <= FRAME_BUDGET_BYTES
    frame = json.loads(text)
    cards = frame["snapshot"]["tools"]
    assert len(cards) == 60 and any("payloadOmitted" in card for card in cards)
    await socket.disconnect()


async def test_an_instance_killed_before_it_finished_leaves_nothing_behind(user):
    """daphne cancels an application instance still running 10 s after its socket closed
    (``application_close_timeout``), as happened under load to consumers whose subscribe waited
    for the busy database thread (tests/load/): its ticker, its entry in the credential watch
    and its group memberships must go with it, not live on for a dead socket."""
    token = await token_for(user)
    conversation, _ = await conversation_with_turn(user)
    cid = str(conversation.pk)
    socket = await connect(token)
    await hello(socket)
    await send(socket, {"type": "subscribe", "conversationId": cid, "after": 0})
    assert (await receive(socket))["type"] == "replay"
    watch = credential_watch()
    [consumer] = list(watch.sockets)
    ticker, channel = consumer.ticker, consumer.channel_name

    socket.future.cancel()  # what daphne does to an instance too slow to shut down
    with contextlib.suppress(asyncio.CancelledError):
        await socket.future

    assert consumer not in watch.sockets
    await asyncio.wait([ticker], timeout=5)
    assert ticker.done()  # stopped (it was cancelled), not ticking for a dead socket
    layer = get_channel_layer(live_layer_alias())
    await layer.group_send(conversation_group(cid), {"type": "probe"})
    with pytest.raises(TimeoutError):  # no longer a member: nothing reaches its channel
        await asyncio.wait_for(layer.receive(channel), 1)


async def test_a_workbench_instance_killed_before_it_finished_leaves_its_group(user):
    token = await token_for(user)
    socket = await connect(token, path="/ws/workbench/")
    assert (await receive(socket))["type"] == "snapshot"
    [consumer] = list(credential_watch().sockets)
    channel = consumer.channel_name

    socket.future.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await socket.future

    assert consumer not in credential_watch().sockets
    layer = get_channel_layer()
    await layer.group_send(workbench_group(user.pk), {"type": "probe"})
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(layer.receive(channel), 1)


async def _sessions_while_pouring(token: str, path: str, group: str, message: dict, frame=None):
    """Forty sessions, each ending right after it took something, while ``group`` is flooded:
    a live message and the disconnect reach the consumer at once, again and again."""
    layer = get_channel_layer(live_layer_alias() if group.startswith("conv.") else "default")
    pouring = True

    async def pour() -> None:
        while pouring:
            await layer.group_send(group, message)
            await asyncio.sleep(0)

    task = asyncio.ensure_future(pour())
    try:
        for _ in range(40):
            socket = await connect(token, path=path)
            if frame is not None:
                await send(socket, frame)
            await receive(socket)
            await asyncio.sleep(0.01)
            await socket.disconnect()
    finally:
        pouring = False
        await task
    # A moment for what comes late (a leak that shows then is still seen); the tests then
    # wait, with a deadline, for the clean-up a loaded machine may finish later still.
    await asyncio.sleep(0.3)
    return layer


@pytest.mark.skipif(not settings.REDIS_URL, reason="the Redis layers keep state per channel")
async def test_a_socket_that_ends_as_a_live_message_arrives_leaves_no_channel_behind(user):
    token = await token_for(user)
    conversation = await sync_to_async(new_conversation)(user)
    await sync_to_async(open_turn)(conversation)
    cid = str(conversation.pk)
    update = {"toolCallId": "x", "rev": 1}
    layer = await _sessions_while_pouring(
        token,
        "/ws/conversations/",
        conversation_group(cid),
        {"type": "tool.updated", "conversationId": cid, "update": update},
        {"type": "subscribe", "conversationId": cid, "after": 0},
    )
    here = layer._get_layer()  # this event loop's pub/sub layer
    await until(
        lambda: (
            not here.channels
            and not here.groups
            and all(not shard._subscribed_to for shard in here._shards)
        ),
        what="every queue and subscription given up",
    )
    assert here.channels == {}  # every queue given up ...
    assert here.groups == {}
    assert all(not shard._subscribed_to for shard in here._shards)  # ... and every subscription


@pytest.mark.skipif(not settings.REDIS_URL, reason="the Redis layers keep state per channel")
async def test_a_workbench_socket_that_ends_as_a_message_arrives_leaves_no_buffer(user):
    token = await token_for(user)
    layer = await _sessions_while_pouring(
        token, "/ws/workbench/", workbench_group(user.pk), {"type": "launch.removed", "id": "x"}
    )

    def buffered() -> list[str]:
        return [c for c in layer.receive_buffer if layer.receive_buffer[c].qsize()]

    await until(lambda: not buffered(), what="every receive buffer emptied")
    assert not buffered()
