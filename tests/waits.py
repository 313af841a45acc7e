"""Waiting for a condition with a deadline, never for a fixed time (docs/development.md,
"Waiting, not sleeping"): ``wait_for`` polls from a thread, ``until`` from a coroutine.

The deadline bounds a hang; it does not measure speed. On a loaded machine a test waits
longer, it does not fail: keep deadlines generous (``DEADLINE_SECONDS``), and say in the test
why when one must stay below some other time of the product (a poll, a lease) to mean
anything.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

DEADLINE_SECONDS = 30.0


def wait_for(
    predicate: Callable[[], Any],
    timeout: float = DEADLINE_SECONDS,
    every: float = 0.02,
    what: str = "the condition",
) -> Any:
    """Poll ``predicate`` until it returns something truthy (and return that); fail the test
    after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(every)


async def until(
    condition: Callable[[], Any],
    *,
    within: float = DEADLINE_SECONDS,
    every: float = 0.02,
    what: str = "the condition",
) -> Any:
    """Await until ``condition()`` returns something truthy (and return that); fail the test
    after ``within`` seconds. ``condition`` is a plain or an async callable; one that reads the
    database is the caller's to wrap (``sync_to_async``)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        assert loop.time() < end, f"{what}: not within {within} s"
        await asyncio.sleep(every)
