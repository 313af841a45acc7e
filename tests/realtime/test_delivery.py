"""Exactly once, in order, without a gap, whatever the layer does; head frames; backpressure."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import transaction

from config.asgi import application
from conversations.realtime.delivery import (
    DURABLE_HIGH_BYTES,
    REPLAY_FIRST_READ_EVENTS,
    REPLAY_READ_BYTES,
    REPLAY_READ_EVENTS,
    replay_read_limit,
)
from conversations.services.activity import activity_fold
from projections.fold import apply_tool_update
from tests.conversations.helpers import assistant_calls

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

LOSSY = {"default": {"BACKEND": "tests.layers.LossyChannelLayer", "CONFIG": {"capacity": 1500}}}
DEAF = {"default": {"BACKEND": "tests.layers.DeafChannelLayer"}}


async def collect_until(socket, last: int, timeout: float = 10) -> list[int]:
    """Durable sequences received until ``last`` arrived (other frames ignored)."""
    got: list[int] = []
    while not got or got[-1] < last:
        got += sequences([await receive(socket, timeout)])
    return got


async def test_a_layer_that_drops_and_reorders_still_delivers_each_sequence_once_in_order(
    user, settings
):
    settings.CHANNEL_LAYERS = LOSSY
    settings.TOOLCORE_WS_HEAD_SECONDS = 1  # a lost last event is found by the head check
    token = await token_for(user)
    conversation, turn_id = await conversation_with_turn(user)
    socket = await connect(token)
    await hello(socket)
    cid = str(conversation.pk)
    await send(socket, {"type": "subscribe", "conversationId": cid, "after": 0})
    appended = []
    for _ in range(30):  # several commits, several messages each lost or swapped
        appended += await say(conversation, turn_id, 5)
    got = await collect_until(socket, appended[-1])
    assert got == list(range(1, appended[-1] + 1))
    assert get_channel_layer().dropped > 20  # the layer really lost messages
    await socket.disconnect()


async def test_an_idle_subscription_gets_head_frames(user, settings):
    settings.TOOLCORE_WS_HEAD_SECONDS = 1
    token = await token_for(user)
    conversation, _ = await conversation_with_turn(user)
    socket = await connect(token)
    await hello(socket)
    cid = str(conversation.pk)
    await send(socket, {"type": "subscribe", "conversationId": cid, "after": None})
    assert (await receive(socket))["type"] == "snapshot"
    head = await receive(socket, timeout=3)
    assert head == {"type": "head", "conversationId": cid, "sequence": conversation.last_sequence}
    await socket.disconnect()


async def test_a_lost_last_event_is_sent_before_the_next_head(user, settings):
    token = await token_for(user)
    conversation, turn_id = await conversation_with_turn(user)
    settings.TOOLCORE_WS_HEAD_SECONDS = 1
    settings.CHANNEL_LAYERS = DEAF  # nothing published reaches anyone
    socket = await connect(token)
    await hello(socket)
    cid = str(conversation.pk)
    await send(
        socket, {"type": "subscribe", "conversationId": cid, "after": conversation.last_sequence}
    )
    (lost,) = await say(conversation, turn_id, 1)
    replay = await receive(socket, timeout=3)
    assert replay["type"] == "replay" and (replay["from"], replay["to"]) == (lost - 1, lost)
    assert await receive(socket, timeout=3) == {
        "type": "head",
        "conversationId": cid,
        "sequence": lost,
    }
    await socket.disconnect()


class Backlog:
    """The transport backlog as the consumer sees it, set by the test (daphne's probe stands
    in for it in production: config/backlog.py)."""

    def __init__(self, app) -> None:
        self.app = app
        self.bytes = 0

    async def __call__(self, scope, receive, send):
        scope = {**scope, "extensions": {"toolcore.backlog": lambda: self.bytes}}
        return await self.app(scope, receive, send)


class KeptBacklog(Backlog):
    """A client that takes nothing: each frame sent adds to the backlog until the test sets it
    back to 0; ``at_sends`` is the backlog each frame was sent at."""

    def __init__(self, app) -> None:
        super().__init__(app)
        self.at_sends: list[int] = []

    async def __call__(self, scope, receive, send):
        async def kept(message):
            if message["type"] == "websocket.send" and message.get("text"):
                self.at_sends.append(self.bytes)
                self.bytes += len(message["text"].encode())
            await send(message)

        return await super().__call__(scope, receive, kept)


async def test_a_replay_sends_no_page_past_the_backlog_limit_and_the_rest_once_drained(user):
    # 1.6 MB of events, four replay pages of ~400 KB: the pages of one read stop at the limit.
    token = await token_for(user)
    conversation, turn_id = await conversation_with_turn(user)
    head = (await say(conversation, turn_id, 400, text="x" * 4000))[-1]
    app = KeptBacklog(application)
    socket = await connect(token, app=app)
    await hello(socket)
    await send(socket, {"type": "subscribe", "conversationId": str(conversation.pk), "after": 0})
    frames = [await receive(socket)]
    while not await socket.receive_nothing(timeout=0.3):
        frames.append(await receive(socket))
    assert frames[-1]["to"] < head
    app.bytes = 0  # it drained
    frames += await frames_until(socket, lambda f: f.get("to") == head)
    assert sequences(frames) == list(range(1, head + 1))
    assert app.at_sends[0] == 0  # the hello
    assert all(at <= DURABLE_HIGH_BYTES for at in app.at_sends)
    await socket.disconnect()


def test_replay_reads_are_sized_by_the_events_read_last():
    assert replay_read_limit(0) == REPLAY_FIRST_READ_EVENTS  # none seen yet
    assert replay_read_limit(300) == REPLAY_READ_EVENTS  # small events: the most at once
    assert replay_read_limit(256 * 1024) == REPLAY_READ_BYTES // (256 * 1024) == 8
    assert replay_read_limit(10**9) == 1


@sync_to_async
def output_deltas(call_id, turn_id, parts: list[str]) -> None:
    for part in parts:
        with transaction.atomic():
            activity_fold(
                tool_call_id=call_id,
                update={"toolCallId": str(call_id), "turnId": str(turn_id), "outputDelta": part},
            )


async def test_a_slow_socket_gets_durable_events_later_and_merged_updates(user):
    token = await token_for(user)
    conversation, turn_id = await conversation_with_turn(user)
    posted = await sync_to_async(assistant_calls)(
        conversation, turn_id, ("read", {"path": "a.txt"})
    )
    (call_id,) = posted.call_ids
    await sync_to_async(conversation.refresh_from_db)()
    await published()  # the call's creation is not part of what this test holds back
    app = Backlog(application)
    socket = await connect(token, app=app)
    await hello(socket)
    cid = str(conversation.pk)
    await send(
        socket, {"type": "subscribe", "conversationId": cid, "after": conversation.last_sequence}
    )
    # A round trip: the consumer takes frames in order, so the answer to this one (a frame
    # without a conversation) means the subscription is in place, however slow the machine.
    await send(socket, {"type": "unsubscribe"})
    assert (await receive(socket))["code"] == "validation_error"

    app.bytes = 2 * 1024 * 1024  # the client stopped reading
    appended = await say(conversation, turn_id, 10)
    parts = [f"line {i}\n" for i in range(50)]
    await output_deltas(call_id, turn_id, parts)
    assert await socket.receive_nothing(timeout=0.3)  # nothing more is buffered for it

    app.bytes = 0  # it drained
    frames = []
    while (
        not frames
        or sequences(frames)[-1:] != appended[-1:]
        or not any(f["type"] == "tool.updated" for f in frames)
    ):
        frames.append(await receive(socket))
    assert sequences(frames) == appended  # read again from the database, once each
    assert all(f["type"] == "replay" for f in frames if f["type"] != "tool.updated")
    (merged,) = [f for f in frames if f["type"] == "tool.updated"]
    assert merged["update"]["outputDelta"] == "".join(parts)  # 50 updates merged in one
    assert merged["update"]["rev"] - merged["revFrom"] == len(parts) - 1
    assert apply_tool_update(None, merged["update"])["output"] == {"text": "".join(parts)}
    await socket.disconnect()


async def test_merged_deltas_never_pass_16_kib_and_a_gap_in_rev_remains(user):
    token = await token_for(user)
    conversation, turn_id = await conversation_with_turn(user)
    posted = await sync_to_async(assistant_calls)(
        conversation, turn_id, ("read", {"path": "a.txt"})
    )
    (call_id,) = posted.call_ids
    await published()
    app = Backlog(application)
    socket = await connect(token, app=app)
    await hello(socket)
    await send(socket, {"type": "subscribe", "conversationId": str(conversation.pk), "after": None})
    await receive(socket)
    app.bytes = 2 * 1024 * 1024
    await output_deltas(call_id, turn_id, ["x" * 6000] * 5)  # 30,000 bytes: cannot all merge
    app.bytes = 0
    update = (await receive(socket))["update"]
    assert len(update["outputDelta"]) <= 16384
    await socket.disconnect()
