"""Workers inside the web process (``TOOLCORE_WORKERS``; docs/execution.md).

With the embedded default (one daphne process, SQLite, the in-memory channel layer) nothing
else would run tool calls, so ``config.asgi`` starts the workers here: one daemon thread with
its own event loop runs them, and they stop with the process (their runs are stopped, their
claims left to expire and be recovered).

They are stopped when the interpreter starts to shut down, before the thread pools of
``concurrent.futures`` are: those pools refuse new work from that moment, and a worker stopped
later (by a plain ``atexit`` hook) could no longer reach the database through its own pool, so
it never recorded its stop (``WorkerHeartbeat.stopped_at``) and logged failed database steps
on its way out.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from conversations.detached import before_pools_close
from tools.sandbox import sandbox_require

from .registry import FAMILIES, HANDLERS
from .worker import Worker

logger = logging.getLogger(__name__)
STOP_SECONDS = 10.0


class EmbeddedWorkers:
    def __init__(self, count: int) -> None:
        self.count = count
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="toolcore-workers", daemon=True)
        self._thread.start()
        self._started.wait(timeout=5)
        before_pools_close(self.stop)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        workers = [Worker(handlers=HANDLERS, families=FAMILIES) for _ in range(self.count)]
        self._started.set()
        await asyncio.gather(*(worker.run(self._stop) for worker in workers))

    def stop(self) -> None:
        """Stop the workers and wait for them (at most ``STOP_SECONDS``)."""
        if self._loop is not None and self._stop is not None:
            try:
                self._loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:  # the loop is closed: stopped already
                return
        if self._thread is not None:
            self._thread.join(timeout=STOP_SECONDS)


_embedded: EmbeddedWorkers | None = None


def embedded_workers_start(count: int) -> EmbeddedWorkers | None:
    """Start ``count`` workers in this process, once; None when ``count`` is 0."""
    global _embedded
    if count <= 0 or _embedded is not None:
        return _embedded
    sandbox_require()  # no usable sandbox (DEBUG off): the process stops, naming the setting
    _embedded = EmbeddedWorkers(count)
    _embedded.start()
    logger.info("%d tool worker(s) started in this process", count)
    return _embedded
