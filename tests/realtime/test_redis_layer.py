"""The Redis layer under a burst: more concurrent commands than its pool has connections."""

from __future__ import annotations

import asyncio

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
