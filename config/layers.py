"""The Redis channel layer, with a connection pool that waits instead of refusing.

channels_redis builds a plain ``redis.asyncio.ConnectionPool`` per event loop, which refuses
("Too many connections") once ``max_connections`` (100) commands are in flight at once: a burst
of subscriptions in one daphne process (a deployment restarting, every client reconnecting)
then fails some of them, and a failed ``group_discard`` leaves a dead channel in its group for
a day. Here the pool waits, up to ``POOL_TIMEOUT_SECONDS``, for a connection to come back.
"""

from __future__ import annotations

from typing import Any

from channels_redis.core import RedisChannelLayer as _RedisChannelLayer
from redis.asyncio import BlockingConnectionPool

POOL_MAX_CONNECTIONS = 100
POOL_TIMEOUT_SECONDS = 20


class RedisChannelLayer(_RedisChannelLayer):
    def create_pool(self, index: int) -> Any:
        host = dict(self.hosts[index])
        if "address" not in host:  # sentinels and other forms: channels_redis' own pool
            return super().create_pool(index)
        address = host.pop("address")
        host.setdefault("max_connections", POOL_MAX_CONNECTIONS)
        host.setdefault("timeout", POOL_TIMEOUT_SECONDS)
        return BlockingConnectionPool.from_url(address, **host)
