"""Database work of async code, on a few shared threads instead of one per request or socket.

Two pools, each of a fixed size, whose threads give their database connections back after
every call, so any number of waiters or sockets cost this many threads and at most this many
connections:

- ``detached``: the async views that wait (the turn barrier) — authenticating, finding the
  turn, checking it. ``fn`` must close its connections itself before it returns.
- ``socket_database``: the websocket consumers and their credential checks. Channels would run
  them all, and every message's ``close_old_connections``, on one thread per process (asgiref's
  thread-sensitive executor), so under load every handshake, subscription read and head check
  of a process queued behind the others (tests/load/ measured handshakes waiting over 10 s).
  Here ``SOCKET_DATABASE_THREADS`` run them side by side, and each call gives its connections
  back when it returns (to the pool on PostgreSQL).

(The loop's default executor would do too, but its size follows the number of cores, and its
threads would keep their connections.)

And ``before_pools_close``: work that must still reach a thread pool when the process exits.
"""

from __future__ import annotations

import atexit
import functools
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import connections

DETACHED_THREADS = 4
SOCKET_DATABASE_THREADS = 4

_P = ParamSpec("_P")
_R = TypeVar("_R")

_executor = ThreadPoolExecutor(max_workers=DETACHED_THREADS, thread_name_prefix="toolcore-detached")
_socket_executor = ThreadPoolExecutor(
    max_workers=SOCKET_DATABASE_THREADS, thread_name_prefix="toolcore-sockets"
)


def detached(fn: Callable[_P, _R]) -> Callable[_P, Awaitable[_R]]:
    """``fn`` as a coroutine function run on the shared threads. ``fn`` must close its database
    connections before it returns (the thread serves other requests next)."""
    return sync_to_async(fn, thread_sensitive=False, executor=_executor)


def socket_database(fn: Callable[_P, _R]) -> Callable[_P, Awaitable[_R]]:
    """``fn`` as a coroutine function run on the sockets' database threads, its connections
    given back when it returns (whatever it raised)."""

    @functools.wraps(fn)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return fn(*args, **kwargs)
        finally:
            connections.close_all()

    return sync_to_async(run, thread_sensitive=False, executor=_socket_executor)


def before_pools_close(fn: Callable[[], None]) -> None:
    """Call ``fn`` when the interpreter starts to exit, before ``concurrent.futures`` closes
    every thread pool to new work (its threads then mark their pool shut down, and an
    ``atexit`` hook, which runs after, could hand nothing to one). ``threading``'s own exit
    hooks run first, the latest registered first, and ``concurrent.futures`` registered its
    hook when it was imported, before this module. A Python without them uses ``atexit``.

    Users: the publisher's last drain (its first Redis connection resolves the host name on the
    loop's default executor) and the stop of the workers a web process runs itself
    (``tools/runtime/embedded.py``: their database steps go through a pool of their own)."""
    register = getattr(threading, "_register_atexit", None)
    if register is None:
        atexit.register(fn)
    else:
        register(fn)
