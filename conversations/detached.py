"""The database work of async views, on a few shared threads instead of one per request.

An async view that waits (the turn barrier) still needs the database now and then: to
authenticate, to find the turn, to check it. Each of those calls runs on one of
``DETACHED_THREADS`` threads and gives its connection back before it returns, so a thousand
waiters cost this many threads and at most this many connections, not one each. (The loop's
default executor would do too, but its size follows the number of cores.)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async

DETACHED_THREADS = 4

_P = ParamSpec("_P")
_R = TypeVar("_R")

_executor = ThreadPoolExecutor(max_workers=DETACHED_THREADS, thread_name_prefix="toolcore-detached")


def detached(fn: Callable[_P, _R]) -> Callable[_P, Awaitable[_R]]:
    """``fn`` as a coroutine function run on the shared threads. ``fn`` must close its database
    connections before it returns (the thread serves other requests next)."""
    return sync_to_async(fn, thread_sensitive=False, executor=_executor)
