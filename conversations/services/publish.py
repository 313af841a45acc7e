"""Publishing to live subscribers, always after commit (spec lifecycle.md, "Appending").

Group names: ``conv.<conversation hex>`` for everything about a conversation and
``turn.<turn hex>`` for the turn barrier. A failure to publish never undoes a commit: durable
events are replayed from the database, ephemeral messages may be dropped by design.

Two routes, by layer:
- the in-memory layer reaches only this process, and its queues belong to the server's event
  loop: messages go there with ``async_to_sync`` (which, in a request thread, hops to that
  loop), and only to groups somebody here joined;
- an out-of-process layer (Redis) is fed by one long-lived publisher thread with its own event
  loop and connection pool, so a request or a worker never waits on Redis round trips and no
  throw-away event loop ever opens connections. The queue is bounded: when Redis falls behind,
  the oldest batches are dropped and counted (subscribers fill durable gaps from the database).
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import sys
import threading
import time
from collections import defaultdict, deque
from typing import Any
from uuid import UUID

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)

Message = tuple[str, dict[str, Any]]

PUBLISH_QUEUE_BATCHES = 10_000


def conversation_group(conversation_id: UUID | str) -> str:
    return f"conv.{UUID(str(conversation_id)).hex}"


def turn_group(turn_id: UUID | str) -> str:
    return f"turn.{UUID(str(turn_id)).hex}"


async def send_all(layer: Any, messages: list[Message]) -> None:
    """Send ``messages`` in order within each group; groups go concurrently."""
    by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for group, message in messages:
        by_group[group].append(message)

    async def one_group(group: str, items: list[dict[str, Any]]) -> None:
        for message in items:
            try:
                await layer.group_send(group, message)
            except Exception as exc:  # noqa: BLE001 - publishing is best effort
                logger.warning("publish to %s failed (%s): %r", group, message.get("type"), exc)

    await asyncio.gather(*(one_group(g, items) for g, items in by_group.items()))


class _Publisher:
    """One daemon thread with an event loop that sends queued batches in submission order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._batches: deque[list[Message]] = deque()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pending = 0  # submitted and not yet handed to the layer
        self.dropped = 0

    def submit(self, messages: list[Message]) -> None:
        with self._lock:
            if len(self._batches) >= PUBLISH_QUEUE_BATCHES:
                self._batches.popleft()
                self._pending -= 1
                self.dropped += 1
                if self.dropped % 1000 == 1:
                    logger.warning("publisher behind: %d batches dropped so far", self.dropped)
            self._batches.append(messages)
            self._pending += 1
            if self._thread is None or not self._thread.is_alive():
                if self._thread is None:
                    atexit.register(self.drain)  # a command's last messages still go out
                self._thread = threading.Thread(
                    target=self._run, name="toolcore-publisher", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        try:
            asyncio.run(self._loop())
        except BaseException:  # noqa: BLE001 - a daemon thread dying with the interpreter
            if not sys.is_finalizing():
                logger.exception("the publisher thread stopped")

    async def _loop(self) -> None:
        layer = get_channel_layer()
        while True:
            await asyncio.to_thread(self._wake.wait, 1.0)
            self._wake.clear()
            while True:
                with self._lock:
                    if not self._batches:
                        break
                    batch = self._batches.popleft()
                await send_all(layer, batch)
                with self._lock:
                    self._pending -= 1

    def drain(self, timeout: float = 5.0) -> bool:
        """Wait until every submitted batch was handed to the layer (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self._pending == 0:
                    return True
            time.sleep(0.01)
        return False


publisher = _Publisher()


def send_now(messages: list[Message]) -> None:
    layer = get_channel_layer()
    if layer is None or not messages:
        return
    if isinstance(layer, InMemoryChannelLayer):
        # Only this process can hear it: skip groups nobody here joined, and the loop hop.
        local = [m for m in messages if layer.groups.get(m[0])]
        if local:
            async_to_sync(send_all)(layer, local)
        return
    publisher.submit(list(messages))


def publish_on_commit(messages: list[Message]) -> None:
    """Send ``messages`` once the current transaction commits (at once outside one)."""
    if messages:
        transaction.on_commit(lambda: send_now(list(messages)))
