"""The turn barrier: wait until a turn has no unfinished call, without pinning resources.

The waiter joins the turn's group on the channel layer and sleeps on it; settlement publishes
``turn.changed`` after commit. Each check runs on one of the few shared ``detached`` threads and
returns its database connection at once, and a re-check every ``RECHECK_SECONDS`` covers a lost
notification. No thread and no connection is held while waiting.

The channel layer only makes the answer early; the database decides it. A failing layer (Redis
unreachable, timing out, a connection dropped mid-wait) leaves the wait to the periodic
re-check: no layer call raises out of here, and none keeps the waiter past its deadline. A call
that has not ended in time is cancelled and left to unwind in the background instead of being
awaited, because a client library may take seconds to do so: redis-py on Python 3.11 can lose a
cancellation that lands while it sets up a connection (``asyncio.wait_for`` swallows it), and
then blocks until its 5 s socket timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from channels.layers import get_channel_layer
from django.db import connections

from .detached import detached
from .selectors import turn_results
from .services.publish import turn_group

logger = logging.getLogger(__name__)

RECHECK_SECONDS = 2.0
# How long leaving the group may delay the answer; a slower leave ends in the background.
LEAVE_SECONDS = 0.25
# A layer that is down fails for every waiter: warn once per this period, not once per waiter.
WARN_EVERY_SECONDS = 60.0

_left_behind: set[asyncio.Task] = set()  # strong references until the tasks end
_last_warning = -WARN_EVERY_SECONDS


class _NoAnswer(Exception):
    """A channel-layer call did not end in time (or was cancelled from elsewhere)."""


def _check_detached(conversation_id: Any, turn_id: Any) -> dict[str, Any]:
    try:
        return turn_results(conversation_id, turn_id)
    finally:
        connections.close_all()


_check = detached(_check_detached)


async def turn_results_wait(*, conversation_id: Any, turn_id: Any, wait: float) -> dict[str, Any]:
    """The turn's results once it has no unfinished call, or its pending calls after ``wait`` s.

    Whatever the channel layer does, it answers by ``wait`` s plus one database check (and at
    most ``LEAVE_SECONDS`` more when the layer hangs), never raising because of the layer.
    """
    return await until_settled(
        lambda: _check(conversation_id, turn_id), group=turn_group(turn_id), wait=wait
    )


async def until_settled(
    check: Callable[[], Awaitable[dict[str, Any]]], *, group: str, wait: float
) -> dict[str, Any]:
    """``check()``'s answer once it says ``settled``, or its last answer after ``wait`` s: the
    turn barrier's way of waiting, for any waiter woken by a group's messages (an MCP
    ``tools/call`` waits for its call so, on the call's turn group).

    ``check`` reads the database on a pool thread and gives its connection back. Whatever the
    channel layer does, the answer comes by ``wait`` s plus one check (and at most
    ``LEAVE_SECONDS`` more when the layer hangs), never raising because of the layer.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    answer = await check()
    if answer["settled"] or wait <= 0:
        return answer
    wakeups = _Wakeups(get_channel_layer(), group)
    try:
        await wakeups.join(min(RECHECK_SECONDS, deadline - loop.time()))
        # Joined before this re-check, so a settlement after it cannot go unnoticed.
        answer = await check()
        while not answer["settled"]:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            await wakeups.sleep(min(remaining, RECHECK_SECONDS))
            answer = await check()
    finally:
        await wakeups.leave()
    return answer


class _Wakeups:
    """The turn's group on the channel layer as a best-effort alarm clock.

    Without a layer, or once joining failed, ``sleep`` just sleeps (polling).
    """

    def __init__(self, layer: Any, group: str) -> None:
        self.layer = layer
        self.group = group
        self.channel: str | None = None
        self.joined = False

    async def join(self, timeout: float) -> None:
        if self.layer is None:
            return
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        try:
            channel = await _bounded(self.layer.new_channel, timeout)
            self.channel = channel  # from here on, leave() tries to take it out again
            await _bounded(lambda: self.layer.group_add(self.group, channel), end - loop.time())
        except Exception as exc:  # noqa: BLE001 - any layer failure means: poll
            _layer_failed("join", exc)
        else:
            self.joined = True

    async def sleep(self, seconds: float) -> None:
        """Until a message for the group arrives or ``seconds`` have passed."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        if self.joined:
            channel = self.channel
            try:
                await _bounded(lambda: self.layer.receive(channel), seconds)
                return  # woken: any message on the group means "check again"
            except _NoAnswer:
                return  # the usual case: nothing happened this round
            except Exception as exc:  # noqa: BLE001 - a failed receive is a round without news
                _layer_failed("receive", exc)
        await asyncio.sleep(max(0.0, end - loop.time()))

    async def _leave(self, channel: str) -> None:
        await self.layer.group_discard(self.group, channel)
        discard = getattr(self.layer, "channel_discard", None)  # the Redis layers keep state
        if discard is not None:
            await discard(channel)

    async def leave(self) -> None:
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
            "turn barrier: channel layer %s failed (%r); waiters re-check every %s s",
            operation,
            exc,
            RECHECK_SECONDS,
        )
    else:
        logger.debug("turn barrier: channel layer %s failed (%r)", operation, exc)
