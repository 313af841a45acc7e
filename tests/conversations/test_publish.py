"""Publishing after commit: coalesced per group, order kept, nothing lost on the way."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

from conversations.services.publish import (
    BATCH_MAX_MESSAGES,
    BATCH_TYPE,
    Publisher,
    _receiving_loop,
    coalesce,
    conversation_group,
    layer_alias,
    send_now,
    turn_group,
    unpack,
)
from tests.realtime.helpers import received
from tests.waits import wait_for


def _m(group: str, n: int) -> tuple[str, dict]:
    return group, {"type": "conversation.event", "n": n}


def test_coalesce_sends_one_message_per_group_in_order():
    messages = [_m("conv.a", 1), _m("turn.b", 2), _m("conv.a", 3), _m("conv.a", 4)]
    out = coalesce(messages)
    assert out == [
        ("conv.a", {"type": BATCH_TYPE, "messages": [m for _, m in messages if _ == "conv.a"]}),
        ("turn.b", {"type": "conversation.event", "n": 2}),  # a lone message goes as itself
    ]


def test_coalesce_caps_a_batch_and_keeps_the_order_across_chunks():
    count = 2 * BATCH_MAX_MESSAGES + 1
    out = coalesce([_m("conv.a", i) for i in range(count)])
    assert [len(unpack(m)) for _, m in out] == [BATCH_MAX_MESSAGES, BATCH_MAX_MESSAGES, 1]
    assert [m["n"] for _, sent in out for m in unpack(sent)] == list(range(count))


def test_unpack_a_single_message_is_itself():
    assert unpack({"type": "turn.changed"}) == [{"type": "turn.changed"}]


async def _receive_all(layer, channel, timeout: float = 0.5) -> list[dict]:
    got = []
    while True:
        try:
            got.append(await asyncio.wait_for(layer.receive(channel), timeout=timeout))
        except TimeoutError:
            return got


IN_MEMORY = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


def test_conversation_groups_go_through_the_live_layer_when_there_is_one(settings):
    some = "7f1d8a0e-2a43-4c77-9a52-9d0c5b8e1f00"
    settings.CHANNEL_LAYERS = {**IN_MEMORY, "live": IN_MEMORY["default"]}
    assert layer_alias(conversation_group(some)) == "live"
    assert layer_alias(turn_group(some)) == "default"
    assert layer_alias("workbench.1") == "default"
    settings.CHANNEL_LAYERS = IN_MEMORY  # the embedded default: one layer for everything
    assert layer_alias(conversation_group(some)) == "default"


def test_in_memory_layer_gets_one_batch_per_group(settings):
    settings.CHANNEL_LAYERS = IN_MEMORY  # this route whatever the run configures
    layer = get_channel_layer()
    assert isinstance(layer, InMemoryChannelLayer)
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("conv.x", channel)
    send_now([_m("conv.x", 1), _m("conv.x", 2), _m("conv.nobody", 3)])
    received = async_to_sync(_receive_all)(layer, channel)
    assert received == [{"type": BATCH_TYPE, "messages": [_m("conv.x", 1)[1], _m("conv.x", 2)[1]]}]


WOKEN_WITHIN = 10


def test_a_message_sent_from_another_thread_wakes_a_receiver_on_its_loop_at_once(settings):
    """A receiver waits on an event loop of its own thread (daphne's); a thread without a loop
    (the embedded worker's database thread, a request thread) publishes. The receiver is woken
    at once, not whenever its idle loop next wakes for something else (a settlement reached a
    waiting ``tools/call`` or turn barrier 0.2-1 s late; here, never)."""
    settings.CHANNEL_LAYERS = IN_MEMORY  # this route whatever the run configures
    layer = get_channel_layer()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def on_loop(coroutine, timeout: float = 5):
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(timeout)

    try:
        channel = on_loop(layer.new_channel())
        on_loop(layer.group_add("conv.woken", channel))
        waiting = asyncio.run_coroutine_threadsafe(layer.receive(channel), loop)
        # It waits: the loop ``send_now`` looks for is that receiver's.
        wait_for(lambda: _receiving_loop(layer, {"conv.woken"}) is loop, what="the receiver")
        time.sleep(0.05)  # its loop sleeps in select (a slow machine only makes that likelier)
        sent = time.monotonic()
        send_now([_m("conv.woken", 1)])
        # Nothing else wakes this idle loop: a receiver not woken at once is never woken, so
        # the bound only catches that (it is no measure of speed).
        assert waiting.result(WOKEN_WITHIN) == _m("conv.woken", 1)[1]
        assert time.monotonic() - sent < WOKEN_WITHIN
        on_loop(layer.group_discard("conv.woken", channel))
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


class RecordingLayer:
    """Stands for an out-of-process layer where none is configured: records each group_send
    (the publisher's own batching and ordering are what is under test)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict]] = []

    async def group_send(self, group: str, message: dict) -> None:
        await asyncio.sleep(0.001)  # a round trip: commits pile up meanwhile
        self.sent.append((group, message))


def test_publisher_coalesces_a_burst_and_loses_nothing():
    """300 commits of 3 messages each, as fast as they come: every message arrives, in order,
    in far fewer sends. Through Redis when the run configures it, else a recording layer."""
    configured = get_channel_layer()
    redis = not isinstance(configured, InMemoryChannelLayer)
    layer = configured if redis else RecordingLayer()
    burst = Publisher(layer=layer)
    if redis:
        channel = async_to_sync(layer.new_channel)()
        async_to_sync(layer.group_add)("conv.burst", channel)
    for i in range(300):
        burst.submit(
            [_m("conv.burst", 3 * i), _m("conv.burst", 3 * i + 1), _m("conv.burst", 3 * i + 2)]
        )
    assert burst.drain(timeout=30)  # a hang bound: 900 messages on a loaded machine
    if redis:
        received = async_to_sync(_receive_all)(layer, channel)
    else:
        assert {group for group, _ in layer.sent} == {"conv.burst"}
        received = [message for _, message in layer.sent]
    flat = [m["n"] for sent in received for m in unpack(sent)]
    assert flat == list(range(900))
    assert len(received) < 300  # fewer sends than commits
    assert burst.dropped == 0


# --- The collector around a transaction --------------------------------------------------------


def _joined(group: str):
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(group, channel)
    return layer, channel


@pytest.mark.django_db(transaction=True)
def test_a_transaction_publishes_once_committed_in_order_one_batch_per_group(settings):
    from conversations.services import publish

    settings.CHANNEL_LAYERS = IN_MEMORY
    layer, channel = _joined("conv.c1")
    with publish.atomic():
        publish.later("conv.c1", {"type": "t", "n": 1})
        publish.later("turn.t1", {"type": "t", "n": 2})
        publish.later("conv.c1", {"type": "t", "n": 3})
        assert received(layer, channel) == []  # nothing before the commit
    sent = async_to_sync(_receive_all)(layer, channel, 0.3)
    assert sent == [
        {"type": BATCH_TYPE, "messages": [{"type": "t", "n": 1}, {"type": "t", "n": 3}]}
    ]


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_transaction_or_savepoint_publishes_nothing_of_it(settings):
    from django.db import transaction

    from conversations.services import publish

    settings.CHANNEL_LAYERS = IN_MEMORY
    layer, channel = _joined("conv.c1")
    with pytest.raises(RuntimeError), publish.atomic():
        publish.later("conv.c1", {"type": "t", "n": 1})
        raise RuntimeError("rolled back")
    assert received(layer, channel) == []
    with publish.atomic():
        publish.later("conv.c1", {"type": "t", "n": 2})
        with pytest.raises(RuntimeError), transaction.atomic():  # a savepoint
            publish.later("conv.c1", {"type": "t", "n": 3})
            raise RuntimeError("savepoint rolled back")
        with publish.atomic():  # nested: the outer collector sends it
            publish.later("conv.c1", {"type": "t", "n": 4})
    assert [m["n"] for m in received(layer, channel)] == [2, 4]


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_a_message_goes_at_once(settings):
    from conversations.services import publish

    settings.CHANNEL_LAYERS = IN_MEMORY
    layer, channel = _joined("conv.c1")
    publish.later("conv.c1", {"type": "t", "n": 1})
    assert received(layer, channel) == [{"type": "t", "n": 1}]


@pytest.mark.django_db(transaction=True)
def test_steps_given_to_then_follow_the_commit_and_its_publications(settings):
    """``publish.then``: the runtime's steps (a call handed to its runner) are taken after the
    commit, once what the block published went out, in order; a nested block hands its steps
    to the outermost; a block that raises takes none."""
    from django.db import connection

    from conversations.services import publish

    settings.CHANNEL_LAYERS = IN_MEMORY
    layer, channel = _joined("conv.c1")
    taken = []

    def step(n):
        def take():
            taken.append(
                (n, connection.in_atomic_block, [m["n"] for m in received(layer, channel)])
            )

        return take

    with publish.atomic():
        publish.later("conv.c1", {"type": "t", "n": 1})
        publish.then(step("a"))
        with publish.atomic():  # nested: its step waits for the outer block
            publish.then(step("b"))
        assert taken == []
    # After the commit (no transaction open), the publications already sent.
    assert taken == [("a", False, [1]), ("b", False, [])]
    with pytest.raises(RuntimeError), publish.atomic():
        publish.then(step("c"))
        raise RuntimeError("rolled back")
    assert [n for n, *_ in taken] == ["a", "b"]
    with pytest.raises(RuntimeError, match="publish.atomic"):
        publish.then(step("d"))  # a step needs a block to follow
