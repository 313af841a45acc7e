"""Publishing after commit: coalesced per group, order kept, nothing lost on the way."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

from conversations.services.publish import (
    BATCH_MAX_MESSAGES,
    BATCH_TYPE,
    coalesce,
    publisher,
    send_now,
    unpack,
)


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


def test_in_memory_layer_gets_one_batch_per_group():
    layer = get_channel_layer()
    if not isinstance(layer, InMemoryChannelLayer):
        pytest.skip("the in-memory layer's route")
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("conv.x", channel)
    send_now([_m("conv.x", 1), _m("conv.x", 2), _m("conv.nobody", 3)])
    received = async_to_sync(_receive_all)(layer, channel)
    assert received == [{"type": BATCH_TYPE, "messages": [_m("conv.x", 1)[1], _m("conv.x", 2)[1]]}]


def test_redis_publisher_coalesces_a_burst_and_loses_nothing():
    layer = get_channel_layer()
    if isinstance(layer, InMemoryChannelLayer):
        pytest.skip("needs REDIS_URL: the publisher thread serves out-of-process layers")
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("conv.burst", channel)
    for i in range(300):  # 300 commits of 3 messages each, as fast as they come
        send_now(
            [_m("conv.burst", 3 * i), _m("conv.burst", 3 * i + 1), _m("conv.burst", 3 * i + 2)]
        )
    assert publisher.drain()
    received = async_to_sync(_receive_all)(layer, channel)
    flat = [m["n"] for sent in received for m in unpack(sent)]
    assert flat == list(range(900))
    assert len(received) < 300  # fewer group_sends than commits
    assert publisher.dropped == 0
