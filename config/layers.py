"""The Redis channel layer, with a connection pool that waits instead of refusing.

channels_redis builds a plain ``redis.asyncio.ConnectionPool`` per event loop, which refuses
("Too many connections") once ``max_connections`` (100) commands are in flight at once: a burst
of subscriptions in one daphne process (a deployment restarting, every client reconnecting)
then fails some of them, and a failed ``group_discard`` leaves a dead channel in its group for
a day. Here the pool waits, up to ``POOL_TIMEOUT_SECONDS``, for a connection to come back.

And a read waits longer than the layer's blocking pop (``brpop_timeout``, 5 s): redis-py's
default socket timeout is those same 5 s, so on a busy machine the read gave up first and the
consumer died with "Timeout reading from …" (found by the end-to-end tests under load).

And a cancelled receive stops. On Python 3.11, ``asyncio.wait_for`` swallows the cancellation
of its caller when the awaited operation finishes in the same step (fixed in 3.12); redis-py
sends every command through it. A consumer whose socket closed while its receive was sending a
command then kept popping its dead channel forever, one blocking pop after another. The task
still counts the request (``Task.cancelling()``), so the receive checks it before each pop.
"""

from __future__ import annotations

import asyncio
from typing import Any

from channels_redis.core import RedisChannelLayer as _RedisChannelLayer
from redis.asyncio import BlockingConnectionPool

POOL_MAX_CONNECTIONS = 100
POOL_TIMEOUT_SECONDS = 20
SOCKET_TIMEOUT_MARGIN_SECONDS = 10


class RedisChannelLayer(_RedisChannelLayer):
    def create_pool(self, index: int) -> Any:
        host = dict(self.hosts[index])
        if "address" not in host:  # sentinels and other forms: channels_redis' own pool
            return super().create_pool(index)
        address = host.pop("address")
        host.setdefault("max_connections", POOL_MAX_CONNECTIONS)
        host.setdefault("timeout", POOL_TIMEOUT_SECONDS)
        # redis-py reads with a 5 s socket timeout by default, exactly as long as the layer's
        # blocking pop waits: under load the read timed out first and the consumer died.
        host.setdefault("socket_timeout", self.brpop_timeout + SOCKET_TIMEOUT_MARGIN_SECONDS)
        return BlockingConnectionPool.from_url(address, **host)

    async def _brpop_with_clean(self, index: int, channel: str, timeout: int) -> Any:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError
        return await super()._brpop_with_clean(index, channel, timeout)
