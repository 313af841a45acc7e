"""The processes a worker watches after (or without) a call: async runs and launches
(docs/subsystems/async_runs.md, docs/subsystems/launches.md).

The worker that started such a process watches it to its end: it renews the rows' heartbeats
every third of the lease, kills the group when asked (or when a promoted command's ``timeout``
runs out), and records the end. This module is what every kind of watched process shares;
what a kind does with its rows (its heartbeat, recording its end) is its own
(``tools/runtime/async_runs/watch.py``: the notice; ``tools/runtime/launches/watch.py``: the
summary). When a worker dies, its rows' heartbeats go stale: recovery marks them ``lost`` and
records the groups they left, which the sweep of a worker on the same host kills
(``tools/runtime/left_processes/watch.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tools.models import ProcessStatus

from .capture import ProcessCapture

if TYPE_CHECKING:
    from .base import AttemptFile

logger = logging.getLogger(__name__)

Database = Callable[..., Awaitable[Any]]


class WatchKind(Protocol):
    """What one kind of watched process does with its rows."""

    name: str  # names it in the log and in ``Watchers.kill`` (``async run``, ``launch``)

    async def heartbeat(self, watchers: Watchers, ids: list[str]) -> None:
        """The watcher of these rows is alive."""

    async def record_end(
        self, watchers: Watchers, watched: Watched, status: str, result: dict[str, Any]
    ) -> bool:
        """Record how the process ended (``status``; ``result``: the capture's); False when
        it was not recorded (left to recovery)."""


@dataclass
class Watched:
    kind: WatchKind
    id: str
    capture: ProcessCapture
    kill_requested: bool = False
    timeout_seconds: float | None = None  # the command's timeout, for its summary
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    # A run's notice is recorded once this is done: the settlement of the call it came from.
    after: asyncio.Future[Any] | None = field(default=None, repr=False)


def process_end(capture: ProcessCapture, killed: bool) -> tuple[str, dict[str, Any]]:
    """How a watched process ended: ``killed`` when asked or timed out, else ``exited``; and
    the capture's result."""
    result = capture.result()
    status = ProcessStatus.KILLED if killed or result["timedOut"] else ProcessStatus.EXITED
    return status, result


class Watchers:
    """The async runs and launches one worker watches."""

    def __init__(self, *, db: Database, host: str, worker: str) -> None:
        self.db, self.host, self.worker = db, host, worker
        self._watched: dict[tuple[str, str], Watched] = {}
        self.stopping = False

    def pgids(self) -> set[int]:
        return {w.capture.pgid for w in self._watched.values() if w.capture.pgid is not None}

    def watch(
        self,
        kind: WatchKind,
        value: Any,
        capture: ProcessCapture,
        deadline: float | None,
        *,
        timeout_seconds: float | None = None,
        after: asyncio.Future[Any] | None = None,
    ) -> None:
        """Watch a started process to its end (``deadline``: seconds it may still run; None:
        no limit), then let its kind record the end."""
        watched = Watched(kind, str(value), capture, timeout_seconds=timeout_seconds, after=after)
        self._watched[(kind.name, watched.id)] = watched
        watched.task = asyncio.create_task(self._watch(watched, deadline))

    def kill(self, kind: str, value: str) -> None:
        """Kill the group of a run or launch watched here (asked through the API or a tool);
        its end is then recorded ``killed``."""
        watched = self._watched.get((kind, value))
        if watched is not None and not watched.kill_requested:
            watched.kill_requested = True
            asyncio.create_task(watched.capture.terminate())

    async def stop(self, kind: str, value: str) -> list[AttemptFile]:
        """Kill the group of a run or launch watched here (SIGTERM, SIGKILL after 5 s) and wait
        for its capture to end: its files, final (none when it is not watched here). Its end
        is then recorded ``killed``, as for :meth:`kill`."""
        watched = self._watched.get((kind, value))
        if watched is None:
            return []
        watched.kill_requested = True
        capture = watched.capture
        if not capture.finished:
            await asyncio.shield(capture.terminate())
        with contextlib.suppress(Exception):  # a capture that failed: its files as they are
            await capture.wait()
        return capture.files()

    async def _watch(self, watched: Watched, deadline: float | None) -> None:
        capture = watched.capture
        try:
            if not await capture.wait(deadline):
                await capture.terminate(timed_out=True)
                await capture.wait()
        except asyncio.CancelledError:
            # The worker stops: the process goes with it, and its end is recorded below.
            watched.kill_requested = True
            await asyncio.shield(capture.terminate())
            await asyncio.shield(capture.wait())
        except Exception:  # noqa: BLE001 - e.g. its folder went with its conversation
            logger.warning(
                "watching %s %s failed",
                watched.kind.name,
                watched.id,
                exc_info=True,
                extra={"worker": self.worker},
            )
        try:
            await self._record_end(watched)
        except Exception:  # noqa: BLE001 - its row may be gone (a deleted conversation)
            logger.warning(
                "recording the end of %s %s failed",
                watched.kind.name,
                watched.id,
                exc_info=True,
                extra={"worker": self.worker},
            )
        finally:
            self._watched.pop((watched.kind.name, watched.id), None)

    async def _record_end(self, watched: Watched) -> None:
        status, result = process_end(watched.capture, watched.kill_requested)
        if not await watched.kind.record_end(self, watched, status, result):
            return
        logger.info(
            "%s %s ended %s", watched.kind.name, watched.id, status, extra={"worker": self.worker}
        )

    async def heartbeat(self) -> None:
        """Every third of the lease: each kind renews the heartbeat of its rows watched here."""
        kinds: dict[str, tuple[WatchKind, list[str]]] = {}
        for watched in self._watched.values():
            kinds.setdefault(watched.kind.name, (watched.kind, []))[1].append(watched.id)
        for kind, ids in kinds.values():
            await kind.heartbeat(self, ids)

    async def stop_all(self) -> None:
        """End every watched process with the worker (each recorded ``killed``)."""
        self.stopping = True
        tasks = [w.task for w in self._watched.values() if w.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
