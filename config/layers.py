"""The Redis channel layer, with a connection pool that waits instead of refusing.

channels_redis builds a plain ``redis.asyncio.ConnectionPool`` per event loop, which refuses
("Too many connections") once ``max_connections`` (100) commands are in flight at once: a burst
of subscriptions in one daphne process (a deployment restarting, every client reconnecting)
then fails some of them, and a failed ``group_discard`` leaves a dead channel in its group for
a day. Here the pool waits, up to ``POOL_TIMEOUT_SECONDS``, for a connection to come back.

And a read waits longer than the layer's blocking pop (``brpop_timeout``, 5 s): redis-py's
default socket timeout is those same 5 s, so on a busy machine the read gave up first and the
consumer died with "Timeout reading from …" (found by the end-to-end tests under load).
"""

from __future__ import annotations

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
