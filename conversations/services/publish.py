"""Publishing to live subscribers, always after commit (docs/subsystems/publishing.md).

A service says what to publish where it decides it: ``later(group, message)``. The message goes
out after the current transaction commits, never before, and not at all when it rolls back (a
savepoint rolled back drops what was published inside it). Services wrap their transaction in
``publish.atomic()``: everything that transaction published is collected and sent together once
it committed, coalesced per group and in order (see "Coalescing" below). Outside a collector a
message goes out on its own after commit; outside a transaction at once.

Group names: ``conv.<conversation hex>`` for everything about a conversation and
``turn.<turn hex>`` for the turn barrier. Conversation groups go through the ``live`` channel
layer when one is configured (Redis pub/sub: one message a process, fanned out there to its
sockets), everything else through the default layer. A failure to publish never undoes a commit: durable
events are replayed from the database, ephemeral messages may be dropped by design.

Two routes, by layer:
- the in-memory layer reaches only this process, and its queues belong to the event loop its
  receivers wait on (daphne's): messages are put there on that loop's own thread
  (``_receiving_loop``), and only to groups somebody here joined. An asyncio queue put to from
  another thread wakes its waiter only when that loop next wakes for something else: a
  settlement by the embedded worker (its own thread) reached a waiting ``tools/call`` or turn
  barrier 0.2-1 s late. With no receiver waiting, ``async_to_sync`` puts it on a loop of its own;
  the next receive finds it;
- an out-of-process layer (Redis) is fed by one long-lived publisher thread with its own event
  loop and connection pool, so a request or a worker never waits on Redis round trips and no
  throw-away event loop ever opens connections. The queue is bounded: when Redis falls behind,
  the oldest batches are dropped and counted (subscribers fill durable gaps from the database).

Coalescing: each ``group_send`` to Redis costs 4-5 round trips and, worse, CPU in the publisher
thread that every request thread then waits for (the GIL). So messages for one group are sent
together: one ``group_send`` of ``{"type": "publish.batch", "messages": [...]}`` (at most
``BATCH_MAX_MESSAGES``) instead of one each, and the publisher thread merges every batch queued
while it was busy. A lone message goes as itself. Receivers unpack with ``unpack``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any
from uuid import UUID

from asgiref.sync import async_to_sync
from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings
from django.db import transaction

from .. import metrics
from ..detached import before_pools_close

logger = logging.getLogger(__name__)

Message = tuple[str, dict[str, Any]]

PUBLISH_QUEUE_BATCHES = 10_000
BATCH_TYPE = "publish.batch"
BATCH_MAX_MESSAGES = 100
# The longest a thread waits for the in-memory layer's loop to take its messages (``send_now``).
IN_MEMORY_DELIVERY_SECONDS = 5.0


LIVE_LAYER = "live"
CONVERSATION_GROUP_PREFIX = "conv."


def conversation_group(conversation_id: UUID | str) -> str:
    return f"{CONVERSATION_GROUP_PREFIX}{UUID(str(conversation_id)).hex}"


def live_layer_alias() -> str:
    """The channel layer of conversation groups: ``live`` when configured, else the default."""
    return LIVE_LAYER if LIVE_LAYER in settings.CHANNEL_LAYERS else DEFAULT_CHANNEL_LAYER


def layer_alias(group: str) -> str:
    """The channel layer a group's messages go through."""
    if group.startswith(CONVERSATION_GROUP_PREFIX):
        return live_layer_alias()
    return DEFAULT_CHANNEL_LAYER


def turn_group(turn_id: UUID | str) -> str:
    return f"turn.{UUID(str(turn_id)).hex}"


def unpack(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages one channel-layer message carries: a batch's, in order, or itself."""
    if message.get("type") == BATCH_TYPE:
        return list(message["messages"])
    return [message]


def coalesce(messages: list[Message]) -> list[Message]:
    """One channel-layer message per group and ``BATCH_MAX_MESSAGES``, order kept per group."""
    by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for group, message in messages:
        by_group[group].append(message)
    out: list[Message] = []
    for group, items in by_group.items():
        for start in range(0, len(items), BATCH_MAX_MESSAGES):
            chunk = items[start : start + BATCH_MAX_MESSAGES]
            out.append(
                (group, chunk[0] if len(chunk) == 1 else {"type": BATCH_TYPE, "messages": chunk})
            )
    return out


async def send_all(layer: Any, messages: list[Message]) -> None:
    """Send ``messages`` coalesced per group, in order within each group; groups go
    concurrently. ``layer``: one layer for every group, or None for each group's own
    (``layer_alias``)."""
    by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for group, message in coalesce(messages):
        by_group[group].append(message)

    async def one_group(group: str, items: list[dict[str, Any]]) -> None:
        target = layer if layer is not None else get_channel_layer(layer_alias(group))
        for message in items:
            try:
                await target.group_send(group, message)
            except Exception as exc:  # noqa: BLE001 - publishing is best effort
                logger.warning("publish to %s failed (%s): %r", group, message.get("type"), exc)
                metrics.outage_counted("channel_layer", "publish")
                metrics.live_dropped("send_failed", len(unpack(message)))
            else:
                metrics.live_published(m.get("type", "") for m in unpack(message))

    await asyncio.gather(*(one_group(g, items) for g, items in by_group.items()))


class Publisher:
    """One daemon thread with an event loop that sends queued batches in submission order.

    Idle, it sleeps on its own loop (a submit wakes it with one ``call_soon_threadsafe``);
    woken, it lingers ``LINGER_SECONDS`` so that a burst of commits goes out as one coalesced
    send per group instead of one each.
    """

    LINGER_SECONDS = 0.02

    def __init__(self, layer: Any = None) -> None:
        self._layer = layer  # None: each group's configured layer (``layer_alias``)
        self._lock = threading.Lock()
        self._batches: deque[list[Message]] = deque()
        self._thread: threading.Thread | None = None
        self._loop_ref: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None
        self._idle = False  # the loop waits on _event and must be woken
        self._pending = 0  # submitted and not yet handed to the layer
        self.dropped = 0

    def submit(self, messages: list[Message]) -> None:
        wake = None
        with self._lock:
            if len(self._batches) >= PUBLISH_QUEUE_BATCHES:
                metrics.live_dropped("queue_full", len(self._batches.popleft()))
                self._pending -= 1
                self.dropped += 1
                if self.dropped % 1000 == 1:
                    logger.warning("publisher behind: %d batches dropped so far", self.dropped)
            self._batches.append(messages)
            self._pending += 1
            if self._thread is None or not self._thread.is_alive():
                if self._thread is None:
                    before_pools_close(self.drain)  # a command's last messages still go out
                self._idle = False
                self._thread = threading.Thread(
                    target=self._run, name="toolcore-publisher", daemon=True
                )
                self._thread.start()
            elif self._idle:
                self._idle = False
                wake = (self._loop_ref, self._event)
        if wake is not None:
            loop, event = wake
            with contextlib.suppress(RuntimeError):  # the loop closed: the thread restarts
                loop.call_soon_threadsafe(event.set)

    def _run(self) -> None:
        try:
            asyncio.run(self._loop())
        except BaseException:  # noqa: BLE001 - a daemon thread dying with the interpreter
            if not sys.is_finalizing():
                logger.exception("the publisher thread stopped")

    async def _loop(self) -> None:
        layer = self._layer
        event = asyncio.Event()
        with self._lock:
            self._loop_ref, self._event = asyncio.get_running_loop(), event
        while True:
            with self._lock:
                idle = self._idle = not self._batches
            if idle:
                await event.wait()  # a stale wake-up only costs one empty round
                event.clear()
            await asyncio.sleep(self.LINGER_SECONDS)
            # Everything queued meanwhile goes out together (coalesced per group).
            with self._lock:
                taken = list(self._batches)
                self._batches.clear()
            try:
                if taken:
                    await send_all(layer, [m for batch in taken for m in batch])
            finally:
                with self._lock:
                    self._pending -= len(taken)

    def drain(self, timeout: float = 5.0) -> bool:
        """Wait until every submitted batch was handed to the layer (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self._pending == 0:
                    return True
            time.sleep(0.01)
        return False


publisher = Publisher()


def _receiving_loop(layer: InMemoryChannelLayer, groups: set[str]) -> Any:
    """The running event loop, not this thread's, that a receiver of ``groups`` waits on (an
    asyncio queue is bound to the loop of its first waiter); None when nobody waits."""
    for group in groups:
        for channel in list(layer.groups.get(group, ())):
            loop = getattr(layer.channels.get(channel), "_loop", None)
            if loop is not None and loop.is_running() and loop is not asyncio._get_running_loop():
                return loop
    return None


def send_now(messages: list[Message]) -> None:
    layer = get_channel_layer()
    if layer is None or not messages:
        return
    if isinstance(layer, InMemoryChannelLayer):
        # Only this process can hear it: skip groups nobody here joined, and the loop hop.
        local = [m for m in messages if layer.groups.get(m[0])]
        if not local:
            return
        loop = _receiving_loop(layer, {group for group, _ in local})
        if loop is None:
            async_to_sync(send_all)(layer, local)
            return
        delivered = asyncio.run_coroutine_threadsafe(send_all(layer, local), loop)
        try:  # waited for, so that what one thread publishes arrives in its order
            delivered.result(IN_MEMORY_DELIVERY_SECONDS)
        except Exception as exc:  # noqa: BLE001 - never undo a commit over a live message
            logger.warning("in-memory publish not delivered: %r", exc)
        return
    publisher.submit(list(messages))


# --- After commit ----------------------------------------------------------------------------

_collector = threading.local()


def later(group: str, message: dict[str, Any]) -> None:
    """Publish ``message`` to ``group`` once the current transaction commits (at once outside
    one). Django's ``on_commit`` keeps the order and drops it with a rolled-back savepoint."""
    transaction.on_commit(partial(_deliver, (group, message)))


def _deliver(item: Message) -> None:
    outbox: list[Message] | None = getattr(_collector, "outbox", None)
    if outbox is None:
        send_now([item])
    else:
        outbox.append(item)


def then(step: Callable[[], object]) -> None:
    """Take ``step`` once the enclosing ``atomic()`` block is over and what it published went
    out: what the runtime does with a change after its commit (a call made ready is handed to
    its tool's runner, ``_in_transaction.call_made_ready``). Steps run in the order given;
    nested blocks hand theirs to the outermost. Inside a block only; a block that raises takes
    none. A step whose change a savepoint rolled back still runs: it finds nothing to do (a
    runner takes only a call still ``ready``)."""
    steps: list[Callable[[], object]] | None = getattr(_collector, "then", None)
    if steps is None:
        raise RuntimeError("publish.then() needs an enclosing publish.atomic() block")
    steps.append(step)


@contextlib.contextmanager
def atomic() -> Iterator[None]:
    """``transaction.atomic()`` whose publications go out together after its commit: one
    channel-layer message per group, in the order they were published; then the steps given
    to ``then``.

    Nested in another ``atomic()`` it is a plain savepoint: the outer block sends and takes the
    steps. Under a plain ``transaction.atomic()`` each message goes out on its own after the
    outer commit, and the steps are taken when this block ends."""
    if getattr(_collector, "then", None) is not None:
        with transaction.atomic():
            yield
        return
    steps: list[Callable[[], object]] = []
    outbox: list[Message] = []
    _collector.then = steps
    try:
        if transaction.get_connection().in_atomic_block:
            with transaction.atomic():
                yield
        else:
            _collector.outbox = outbox
            with transaction.atomic():
                yield
            # The commit ran the on_commit callbacks: they filled the outbox.
    finally:
        _collector.outbox = None
        _collector.then = None
    if outbox:
        send_now(outbox)
    for step in steps:
        step()


# --- What the core publishes -----------------------------------------------------------------


def publish_turn_changed(turn_id: UUID | str, call_id: UUID | str | None = None) -> None:
    """Wake the turn barrier's waiters of ``turn_id`` after commit; they re-read the database.
    With ``call_id``, the change is that call's: a waiter for another call sleeps on."""
    message = {"type": "turn.changed", "turnId": str(turn_id)}
    if call_id is not None:
        message["toolCallId"] = str(call_id)
    later(turn_group(turn_id), message)


def publish_tool_updated(conversation_id: UUID | str, rev: int, update: dict[str, Any]) -> None:
    """The ``tool.updated`` of an update folded into a call's activity at ``rev``."""
    later(
        conversation_group(conversation_id),
        {
            "type": "tool.updated",
            "conversationId": str(conversation_id),
            "update": {**update, "rev": rev},
        },
    )
