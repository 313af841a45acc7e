"""The Redis layers: the default one under a burst (more concurrent commands than its pool has
connections), the live one (pub/sub) fanning out and cleaning up."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest
from channels.layers import get_channel_layer
from django.conf import settings

from config.layers import POOL_MAX_CONNECTIONS, RedisPubSubChannelLayer
from conversations.services.publish import live_layer_alias

pytestmark = pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL")


async def test_a_burst_beyond_the_pool_waits_instead_of_failing():
    layer = get_channel_layer()
    burst = 3 * POOL_MAX_CONNECTIONS
    channels = [await layer.new_channel() for _ in range(burst)]
    await asyncio.gather(*(layer.group_add("burst", name) for name in channels))
    await layer.group_send("burst", {"type": "ping"})
    got = await asyncio.gather(*(layer.receive(name) for name in channels[:5]))
    assert got == [{"type": "ping"}] * 5
    await asyncio.gather(*(layer.group_discard("burst", name) for name in channels))


async def test_a_receive_whose_cancellation_was_swallowed_still_stops():
    """Python 3.11's ``asyncio.wait_for`` (inside redis-py) can swallow a cancellation; the
    receive loop must not then pop its channel forever."""
    layer = get_channel_layer()
    channel = await layer.new_channel()

    async def swallowed() -> object:
        asyncio.current_task().cancel()
        # Swallowed, as wait_for does when its operation finished first.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)
        return await layer.receive(channel)

    task = asyncio.ensure_future(swallowed())
    done, _ = await asyncio.wait([task], timeout=layer.brpop_timeout * 3)
    assert done, "the receive kept waiting after its task was cancelled"
    assert task.cancelled()


# --- the live layer (Redis pub/sub) ------------------------------------------------------------


async def test_the_live_layer_fans_a_group_message_out_to_every_local_member():
    layer = get_channel_layer(live_layer_alias())
    assert isinstance(layer, RedisPubSubChannelLayer)
    channels = [await layer.new_channel() for _ in range(5)]
    for name in channels:
        await layer.group_add("conv.fanout", name)
    await layer.group_send("conv.fanout", {"type": "conversation.event", "n": 1})
    got = await asyncio.gather(*(asyncio.wait_for(layer.receive(n), 5) for n in channels))
    assert got == [{"type": "conversation.event", "n": 1}] * 5
    for name in channels:
        await layer.group_discard("conv.fanout", name)


async def test_a_live_receive_cancelled_twice_still_gives_its_channel_up(caplog):
    """daphne cancels a consumer slow to stop while its first cancellation is still cleaning
    up: the channel must still be unsubscribed, and nothing logged as an error."""
    layer = get_channel_layer(live_layer_alias())
    channel = await layer.new_channel()
    loop_layer = layer._get_layer()
    shard = loop_layer._get_shard(channel)
    assert channel in shard._subscribed_to
    receiving = asyncio.ensure_future(layer.receive(channel))
    await asyncio.sleep(0.05)
    async with shard._lock:  # the connection is busy, as under load: the clean-up must wait
        receiving.cancel()
        await asyncio.sleep(0)
        receiving.cancel()  # the second cancellation
        with contextlib.suppress(asyncio.CancelledError):
            await receiving
        assert channel in shard._subscribed_to  # not yet: the connection is still busy
    for _ in range(100):
        if channel not in shard._subscribed_to:
            break
        await asyncio.sleep(0.02)
    assert channel not in shard._subscribed_to
    assert channel not in loop_layer.channels
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
