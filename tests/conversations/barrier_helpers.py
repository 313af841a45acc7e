"""Turn-barrier test helpers: a turn with open calls, a settlement from a thread of its own,
barrier requests sent through the real ASGI application (``config.asgi.application``), many at
once in one loop, and the size of a turn's group on the channel layer."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from channels.layers import InMemoryChannelLayer, get_channel_layer
from channels.testing import HttpCommunicator
from channels_redis.core import RedisChannelLayer
from django.conf import settings
from django.db import connections

from config.asgi import application
from conversations.api.auth import token_create
from conversations.services.publish import turn_group

from .helpers import assistant_calls, new_conversation, open_turn, settle

# How much later than its ``wait`` (or than a settlement plus the re-check) a waiter may
# answer: a bound on a hang, not a measure of speed. Its share of the shared database threads
# at the start and the end, with up to 100 waiters, on a loaded 2-core machine; still far
# from what a waiter that missed its deadline or its wake-up would take (its whole ``wait``,
# 30 s in the tests that settle mid-wait, or never).
LATE_SECONDS = 10.0


@dataclass
class BarrierTurn:
    call_ids: list[Any]
    turn_id: str
    url: str
    token: str


@dataclass
class Answer:
    status: int
    body: dict[str, Any]
    elapsed: float  # seconds from sending the request to the whole response
    finished_at: float  # loop time


def barrier_turn(user, calls: int = 1) -> BarrierTurn:
    """A new conversation whose open turn has ``calls`` calls still ``ready``."""
    try:
        conversation = new_conversation(user)
        turn_id = open_turn(conversation)
        posted = assistant_calls(
            conversation, turn_id, *[("notes", {"n": i}) for i in range(calls)]
        )
        _, token = token_create(user=user, name="barrier")
        url = f"/api/v1/conversations/{conversation.pk}/turns/{turn_id}/results"
        return BarrierTurn(list(posted.call_ids), turn_id, url, token)
    finally:
        connections.close_all()  # the calling thread must not keep a connection checked out


def settle_in_thread(call_id, text: str) -> None:
    """``settle`` the call ``completed`` with ``text``, from a thread of its own (through
    ``sync_to_async(thread_sensitive=False)``): the thread's connection goes back after."""
    try:
        settle(call_id, text=text)
    finally:
        connections.close_all()


async def asgi_get(path: str, headers: list[tuple[bytes, bytes]], *, timeout: float = 90) -> Answer:
    """``GET path`` through the ASGI application, as a server would run it."""
    loop = asyncio.get_running_loop()
    communicator = HttpCommunicator(
        application, "GET", path, headers=[(b"host", b"testserver"), *headers]
    )
    started = loop.time()
    response = await communicator.get_response(timeout=timeout)
    finished = loop.time()
    await communicator.wait(timeout=5)
    return Answer(response["status"], json.loads(response["body"]), finished - started, finished)


async def barrier_get(turn: BarrierTurn, wait: float | str, *, timeout: float = 90) -> Answer:
    """``GET …/results?wait=`` with the turn's token, through the ASGI application."""
    bearer = (b"authorization", f"Bearer {turn.token}".encode())
    return await asgi_get(f"{turn.url}?wait={wait}", [bearer], timeout=timeout)


async def group_size(turn_id: str, layer: Any = None) -> int:
    """How many channels the turn's group holds on ``layer`` (default: the configured one)."""
    layer = layer or get_channel_layer()
    group = turn_group(turn_id)
    if isinstance(layer, InMemoryChannelLayer):
        return len(layer.groups.get(group, {}))
    assert isinstance(layer, RedisChannelLayer)
    client = aioredis.Redis.from_url(settings.REDIS_URL)
    try:
        return await client.zcard(f"{layer.prefix}:group:{group}")
    finally:
        await client.aclose()


class CountingRedisLayer(RedisChannelLayer):
    """The real Redis layer, counting the channels it hands out: a test then knows when every
    waiter holds it, and can put the configured layer back before it settles a call (the
    publisher thread keeps the layer it first finds)."""

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.channels_made = 0

    async def new_channel(self, prefix: str = "specific") -> str:
        self.channels_made += 1
        return await super().new_channel(prefix)
