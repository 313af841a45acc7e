"""The Redis channel layers: the list-based one (``default``), with a connection pool that waits
instead of refusing, and the pub/sub one of live conversation events (``live``, at the end).

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
import collections
import logging
import time
from collections import OrderedDict
from typing import Any

from channels_redis.core import RedisChannelLayer as _RedisChannelLayer
from channels_redis.pubsub import RedisPubSubChannelLayer as _RedisPubSubChannelLayer
from channels_redis.pubsub import RedisPubSubLoopLayer
from channels_redis.utils import _wrap_close
from redis.asyncio import BlockingConnectionPool

logger = logging.getLogger(__name__)

POOL_MAX_CONNECTIONS = 100
POOL_TIMEOUT_SECONDS = 20
SOCKET_TIMEOUT_MARGIN_SECONDS = 10


class _Buffers(collections.defaultdict):
    """channels_redis' receive buffers (a queue per local channel, made on first use), which
    drop what comes for a channel given up in the last ``GONE_SECONDS``: otherwise a message
    already on its way to a channel whose consumer ended made its buffer again, for good."""

    GONE_SECONDS = 60.0
    GONE_MAX = 100_000

    def __init__(self, factory: Any) -> None:
        super().__init__(factory)
        self.gone: OrderedDict[str, float] = OrderedDict()

    def forget(self, channel: str) -> None:
        self.pop(channel, None)
        now = time.monotonic()
        self.gone[channel] = now
        self.gone.move_to_end(channel)
        while self.gone and (
            len(self.gone) > self.GONE_MAX
            or next(iter(self.gone.values())) < now - self.GONE_SECONDS
        ):
            self.gone.popitem(last=False)

    def __missing__(self, channel: str) -> Any:
        if channel in self.gone:
            return self.default_factory()  # a sink: filled, never kept
        return super().__missing__(channel)


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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.receive_buffer = _Buffers(self.receive_buffer.default_factory)

    async def channel_discard(self, channel: str) -> None:
        """Forget the receive buffer of ``channel``, whose consumer has ended: the process's
        receive loop files every message it pops under its channel, and a buffer nobody
        receives from any more would stay. Messages still on their way to it (sent before it
        left its groups) are dropped for a while after (``_Buffers``)."""
        self.receive_buffer.forget(channel)

    async def _brpop_with_clean(self, index: int, channel: str, timeout: int) -> Any:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError
        return await super()._brpop_with_clean(index, channel, timeout)


_cleanups: set[asyncio.Task] = set()  # unsubscribes under way (held so they are not collected)


class _PubSubLoopLayer(RedisPubSubLoopLayer):
    """channels_redis' pub/sub layer of one event loop, with the clean-up of a cancelled receive
    made safe (``receive``)."""

    async def receive(self, channel: str) -> Any:
        """As the library's, but a receive that is cancelled gives its channel up in a task of
        its own: the library awaits the UNSUBSCRIBE in the cancelled task itself, where a second
        cancellation (daphne killing a consumer that is slow to stop) broke it off and logged an
        error, leaving the channel subscribed."""
        if channel not in self.channels:
            await self._subscribe_to_channel(channel)
        queue = self.channels[channel]
        try:
            message = await queue.get()
        except (TimeoutError, asyncio.CancelledError, GeneratorExit):
            if self.channels.pop(channel, None) is not None:
                task = asyncio.ensure_future(self._unsubscribe(channel))
                _cleanups.add(task)
                task.add_done_callback(_cleanups.discard)
            raise
        return self.channel_layer.deserialize(message)

    async def channel_discard(self, channel: str) -> None:
        """Forget ``channel`` for good: its consumer has ended. Its receive gives it up only
        when cancelled while it waits; a consumer that stops right after a receive completed
        (a live message and the disconnect at once, common under load) left its queue and its
        Redis subscription behind, one per such session (tests/load/ measured the growth)."""
        if self.channels.pop(channel, None) is not None:
            await self._unsubscribe(channel)
        for group_channel, members in list(self.groups.items()):
            if channel in members:
                members.discard(channel)
                if not members:
                    del self.groups[group_channel]
                    await self._unsubscribe(group_channel)

    async def _unsubscribe(self, channel: str) -> None:
        try:
            await self._get_shard(channel).unsubscribe(channel)
        except Exception as exc:  # noqa: BLE001 - Redis away: the reconnect drops it anyway
            logger.warning("could not unsubscribe %s: %r", channel, exc)


class RedisPubSubChannelLayer(_RedisPubSubChannelLayer):
    """The layer of live conversation events with Redis (``CHANNEL_LAYERS["live"]``).

    Each process subscribes once to a conversation's channel however many of its sockets follow
    it, and fans a message out to them in memory: one Redis message a process per batch,
    instead of one (three round trips) per socket with the list-based layer. Pub/sub keeps
    nothing for a process that is not listening (a reconnect, a restart of Redis); the
    conversation sockets fill any gap from the database, so that costs latency, not events.
    """

    def _get_layer(self) -> Any:
        loop = asyncio.get_running_loop()
        try:
            return self._layers[loop]
        except KeyError:
            layer = _PubSubLoopLayer(*self._args, **self._kwargs, channel_layer=self)
            self._layers[loop] = layer
            _wrap_close(self, loop)
            return layer
