"""The turn barrier: wait until a turn has no unfinished call, without pinning resources.

The waiter joins the turn's group on the channel layer and sleeps on it; settlement publishes
``turn.changed`` after commit. Each check runs on one of the few shared ``detached`` threads and
returns its database connection at once. A lost notification, or one that never comes (the
in-memory layer does not reach across processes), is caught by the process's watch: one task
that every ``RECHECK_SECONDS`` reads, in one query, the unfinished calls of every turn and call
waited for in the process, and wakes the waiters of whatever changed. No thread and no
connection is held while waiting, and a waiter runs no code until there is news.

The channel layer only makes the answer early; the database decides it. A failing layer (Redis
unreachable, timing out, a connection dropped mid-wait) leaves the wait to the watch: no layer
call raises out of here, and none keeps the waiter past its deadline. A call that has not ended
in time is cancelled and left to unwind in the background instead of being awaited, because a
client library may take seconds to do so: redis-py on Python 3.11 can lose a cancellation that
lands while it sets up a connection (``asyncio.wait_for`` swallows it), and then blocks until
its 5 s socket timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from channels.layers import get_channel_layer
from django.db import connections

from .detached import detached
from .per_loop import PerLoop
from .selectors import turn_results, unfinished_marks
from .services.publish import turn_group

logger = logging.getLogger(__name__)

# The watch's sweep: one database query, every RECHECK_SECONDS, for every waiter of the process.
RECHECK_SECONDS = 2.0
# How long leaving the group may delay the answer; a slower leave ends in the background.
LEAVE_SECONDS = 0.25
# A layer that is down fails for every waiter: warn once per this period, not once per waiter.
WARN_EVERY_SECONDS = 60.0

_left_behind: set[asyncio.Task] = set()  # strong references until the tasks end
_last_warning = -WARN_EVERY_SECONDS

Key = tuple[str, str]  # ("turn", turn id) or ("call", call id): what a waiter watches


class _NoAnswer(Exception):
    """A channel-layer call did not end in time (or was cancelled from elsewhere)."""


def _check_detached(conversation_id: Any, turn_id: Any) -> dict[str, Any]:
    try:
        return turn_results(conversation_id, turn_id)
    finally:
        connections.close_all()


def _marks_detached(keys: list[Key]) -> dict[Key, frozenset]:
    try:
        return unfinished_marks(
            [i for kind, i in keys if kind == "turn"], [i for kind, i in keys if kind == "call"]
        )
    finally:
        connections.close_all()


_check = detached(_check_detached)
_marks = detached(_marks_detached)


async def turn_results_wait(*, conversation_id: Any, turn_id: Any, wait: float) -> dict[str, Any]:
    """The turn's results once it has no unfinished call, or its pending calls after ``wait`` s.

    Whatever the channel layer does, it answers by ``wait`` s plus one database check (and at
    most ``LEAVE_SECONDS`` more when the layer hangs), never raising because of the layer.
    """
    return await until_settled(lambda: _check(conversation_id, turn_id), turn_id=turn_id, wait=wait)


async def until_settled(
    check: Callable[[], Awaitable[dict[str, Any]]],
    *,
    turn_id: Any,
    wait: float,
    call_id: Any = None,
) -> dict[str, Any]:
    """``check()``'s answer once it says ``settled``, or its last answer after ``wait`` s: the
    turn barrier's way of waiting for a turn, or (``call_id``) for one call of it.

    ``check`` reads the database on a pool thread and gives its connection back; it runs at
    the start, once joined, and then only on news (``Waiting.sleep``). Whatever the channel
    layer does, the answer comes by ``wait`` s plus one check (and at most ``LEAVE_SECONDS``
    more when the layer hangs), never raising because of the layer.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    answer = await check()
    if answer["settled"] or wait <= 0:
        return answer
    async with waiting(
        turn_id=turn_id, call_id=call_id, join_within=deadline - loop.time()
    ) as news:
        # Joined before this re-check, so a settlement after it cannot go unnoticed.
        answer = await check()
        while not answer["settled"]:
            remaining = deadline - loop.time()
            if remaining <= 0 or not await news.sleep(remaining):
                break
            answer = await check()
    return answer


@contextlib.asynccontextmanager
async def waiting(
    *, turn_id: Any, call_id: Any = None, join_within: float = RECHECK_SECONDS
) -> AsyncIterator[Waiting]:
    """News of a turn (or of one of its calls) while the block runs: joined to the turn's group
    (within ``join_within`` s at most) and watched by the process's sweep; left at the end."""
    news = Waiting(turn_id, call_id)
    try:
        await news.join(min(RECHECK_SECONDS, join_within))
        yield news
    finally:
        await news.leave()


class Waiting:
    """What wakes one waiter: a message on the turn's group (for a call's waiter, one that
    names the call or no call), or a change the process's watch saw in the database.

    The channel layer only makes the news early; the watch, one query a sweep for every waiter
    of the process, makes it certain: a lost message, a layer that is down, or one that does not
    reach across processes (the in-memory layer, with a worker in another process) costs at
    most ``RECHECK_SECONDS``. While nothing happens a waiter runs no code: one receive stays
    pending on its channel, and it costs the sweep one id of its query.
    """

    def __init__(self, turn_id: Any, call_id: Any = None) -> None:
        self.layer = get_channel_layer()
        self.group = turn_group(turn_id)
        self.call_id = None if call_id is None else str(call_id)
        self.key: Key = ("call", self.call_id) if self.call_id else ("turn", str(turn_id))
        self.channel: str | None = None
        self.joined = False
        self._news: asyncio.Future | None = None
        self._receiving: asyncio.Task | None = None
        self._watch: _Watch | None = None

    async def join(self, timeout: float) -> None:
        self._watch = _watches.get()
        self._watch.add(self.key, self)
        if self.layer is None:
            return
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        try:
            channel = await _bounded(self.layer.new_channel, timeout)
            self.channel = channel  # from here on, leave() tries to take it out again
            await _bounded(lambda: self.layer.group_add(self.group, channel), end - loop.time())
        except Exception as exc:  # noqa: BLE001 - any layer failure means: the watch alone
            _layer_failed("join", exc)
        else:
            self.joined = True

    def wake(self) -> None:
        """News from the watch."""
        if self._news is None:
            self._news = asyncio.get_running_loop().create_future()
        if not self._news.done():
            self._news.set_result(None)

    async def sleep(self, seconds: float) -> bool:
        """True once there is news (then check again), False when ``seconds`` passed first."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while True:
            if self._news is None:
                self._news = loop.create_future()
            if self._news.done():
                self._news = None
                return True
            if self.joined and self._receiving is None:
                self._receiving = asyncio.ensure_future(self.layer.receive(self.channel))
            remaining = end - loop.time()
            if remaining <= 0:
                return False
            waits = {self._news} | ({self._receiving} if self._receiving else set())
            await asyncio.wait(waits, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            if self._receiving is not None and self._receiving.done():
                received, self._receiving = self._receiving, None
                if self._accepts(received):
                    return True

    def _accepts(self, received: asyncio.Task) -> bool:
        """Whether a finished receive is news; a failed one leaves this waiter to the watch."""
        if received.cancelled() or received.exception() is not None:
            failure = received.exception() if not received.cancelled() else _NoAnswer("cancelled")
            _layer_failed("receive", failure)
            self.joined = False
            return False
        message = received.result()
        named = message.get("toolCallId") if isinstance(message, dict) else None
        return self.call_id is None or named is None or named == self.call_id

    async def _leave(self, channel: str) -> None:
        await self.layer.group_discard(self.group, channel)
        discard = getattr(self.layer, "channel_discard", None)  # the Redis layers keep state
        if discard is not None:
            await discard(channel)

    async def leave(self) -> None:
        if self._watch is not None:
            self._watch.discard(self.key, self)
        if self._receiving is not None and not self._receiving.done():
            self._receiving.cancel()
            _leave_behind(self._receiving, cancel=True)
        self._receiving = None
        if self.channel is None:
            return
        task = asyncio.ensure_future(self._leave(self.channel))
        try:
            await asyncio.wait({task}, timeout=LEAVE_SECONDS)
        finally:
            if not task.done():
                _leave_behind(task, cancel=False)  # let it finish: the group is cleaned later
            elif not task.cancelled() and task.exception() is not None:
                _layer_failed("leave", task.exception())


class _Watch:
    """Every waiter of one event loop, watched by one task: every ``RECHECK_SECONDS`` one query
    (``unfinished_marks``) reads the marks of every turn and call waited for, and the waiters of
    each mark that changed are woken. A key seen for the first time wakes its waiters once (they
    joined before their last check, so a change just before this first reading is not missed).
    A failed query wakes everyone: their own checks then meet the outage and answer it."""

    def __init__(self) -> None:
        self.waiters: dict[Key, set[Waiting]] = {}
        self.marks: dict[Key, frozenset] = {}
        self.task: asyncio.Task | None = None

    def add(self, key: Key, waiter: Waiting) -> None:
        self.waiters.setdefault(key, set()).add(waiter)
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._sweep())

    def discard(self, key: Key, waiter: Waiting) -> None:
        waiters = self.waiters.get(key)
        if waiters is None:
            return
        waiters.discard(waiter)
        if not waiters:
            del self.waiters[key]
            self.marks.pop(key, None)

    async def _sweep(self) -> None:
        try:
            while self.waiters:
                await asyncio.sleep(RECHECK_SECONDS)
                keys = list(self.waiters)
                try:
                    marks: dict[Key, frozenset] | None = await _marks(keys)
                except Exception as exc:  # noqa: BLE001 - the waiters' checks report it
                    logger.warning("turn barrier: the watch's query failed (%r)", exc)
                    marks = None
                for key in keys:
                    mark = None if marks is None else marks.get(key, frozenset())
                    if key not in self.waiters or (
                        mark is not None and self.marks.get(key) == mark
                    ):
                        continue
                    if mark is not None:
                        self.marks[key] = mark
                    for waiter in list(self.waiters[key]):
                        waiter.wake()
        finally:
            self.task = None


_watches: PerLoop[_Watch] = PerLoop(_Watch)


async def _bounded(make: Callable[[], Awaitable[Any]], timeout: float) -> Any:
    """``await make()`` if it ends within ``timeout`` s: its result, or its exception. Else
    ``_NoAnswer``, the call cancelled and left to unwind in the background."""
    if timeout <= 0:
        raise _NoAnswer("no time left")
    task = asyncio.ensure_future(make())
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    finally:
        if not task.done():  # late, or this waiter is being cancelled (the client went away)
            task.cancel()
            _leave_behind(task, cancel=True)
    if not done or task.cancelled():
        raise _NoAnswer(f"no answer within {timeout:.2f} s")
    return task.result()


def _leave_behind(task: asyncio.Task, *, cancel: bool) -> None:
    """Let ``task`` end on its own, its outcome ignored; with ``cancel``, cancel it again every
    ``RECHECK_SECONDS`` while it runs (a cancellation can get lost, see the module docstring)."""
    _left_behind.add(task)
    task.add_done_callback(_forget)
    if cancel and not task.done():
        loop = task.get_loop()

        def again() -> None:
            if not task.done():
                task.cancel()
                loop.call_later(RECHECK_SECONDS, again)

        loop.call_later(RECHECK_SECONDS, again)


def _forget(task: asyncio.Task) -> None:
    _left_behind.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.debug("turn barrier: a layer call left behind failed: %r", task.exception())


def _layer_failed(operation: str, exc: BaseException) -> None:
    global _last_warning
    now = time.monotonic()
    if now - _last_warning >= WARN_EVERY_SECONDS:
        _last_warning = now
        logger.warning(
            "turn barrier: channel layer %s failed (%r); waiters hear of changes from the "
            "database, every %s s",
            operation,
            exc,
            RECHECK_SECONDS,
        )
    else:
        logger.debug("turn barrier: channel layer %s failed (%r)", operation, exc)
