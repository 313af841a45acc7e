"""The Redis layer under a burst: more concurrent commands than its pool has connections."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from channels.layers import get_channel_layer
from django.conf import settings

from config.layers import POOL_MAX_CONNECTIONS

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
