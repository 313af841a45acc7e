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
from tests.waits import until

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
    await until(lambda: channel not in shard._subscribed_to, what="the channel given up")
    assert channel not in shard._subscribed_to
    assert channel not in loop_layer.channels
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_worker_answering_log_pages_leaves_the_shared_layer_to_the_sockets():
    """The embedded worker runs on a loop of its own in daphne's process and answers other
    hosts' log page questions; it receives on a layer instance of its own, so the sockets,
    receiving on the shared instance from daphne's loop, keep theirs
    (tools/runtime/host_pages.py)."""
    import threading

    from tools.runtime.host_pages import _ask, answer_pages, pages_channel

    started = threading.Event()
    answering: dict[str, object] = {}

    def worker_loop() -> None:
        async def run() -> None:
            layer, channel = await pages_channel()
            answering["channel"] = channel
            task = asyncio.create_task(answer_pages(layer, channel, lambda asked: {"n": 1}))
            started.set()
            answering["task"] = task
            with contextlib.suppress(asyncio.CancelledError):
                await task

        loop = asyncio.new_event_loop()
        answering["loop"] = loop
        loop.run_until_complete(run())
        loop.close()

    thread = threading.Thread(target=worker_loop, daemon=True)
    thread.start()
    assert await asyncio.to_thread(started.wait, 10)
    try:
        # A socket's receive on the shared instance, on this (daphne's) loop, while the worker
        # waits for questions on its own.
        shared = get_channel_layer()
        mine = await shared.new_channel()
        await shared.send(mine, {"type": "ping"})
        assert await asyncio.wait_for(shared.receive(mine), 5) == {"type": "ping"}
        # And a question is answered.
        answer = await _ask(answering["channel"], {"folder": "x"})
        assert answer == {"type": "host.page.answer", "page": {"n": 1}}
    finally:
        loop = answering["loop"]
        loop.call_soon_threadsafe(answering["task"].cancel)
        await asyncio.to_thread(thread.join, 10)
