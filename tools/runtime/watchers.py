"""Processes a worker watches after (or without) a call: async runs and launches
(docs/subsystems/async_runs.md, docs/subsystems/launches.md).

The worker that started such a process watches it to its end: it renews the row's heartbeat
every third of the lease, kills the group when asked (or when a promoted command's ``timeout``
runs out), and records the end (``async_run_finish``: the notice; ``launch_finish``: the
summary). When a worker dies, its rows' heartbeats go stale: recovery marks them ``lost`` and
records the groups they left, which the sweep of a worker on the same host kills
(``Watchers.kill_left``: only when the leader's start time still matches, so a recycled pid is
never killed).

A run's notice follows its call's response: its end is recorded once the call's settlement is
over (``after``), and again, backing off, while ``async_run_finish`` answers that the call has
no response yet (its settlement failed: recovery settles it after the lease). The run stays
watched meanwhile, so its heartbeat goes on and recovery does not take it for lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.conf import settings

from conversations.services.async_runs import (
    CallNotSettled,
    async_run_finish,
    async_runs_heartbeat,
)
from conversations.services.launches import (
    launch_cwd,
    launch_finish,
    launch_folder,
    launch_started,
    launch_take,
    launches_heartbeat,
)
from conversations.services.left_processes import left_processes_forget, left_processes_of
from tools.models import Launch, ProcessStatus

from .capture import ProcessCapture, tool_environment
from .processes import kill_group

if TYPE_CHECKING:
    from .base import AttemptFile

logger = logging.getLogger(__name__)

RUN, LAUNCH = "async run", "launch"
Database = Callable[..., Awaitable[Any]]
# A notice waiting for its call's response is tried again after 0.1 s, then twice as long each
# time, up to 2 s (the response usually commits within milliseconds; recovery takes a lease).
NOTICE_RETRY_SECONDS = 0.1
NOTICE_RETRY_MAX_SECONDS = 2.0


@dataclass
class Watched:
    kind: str
    id: str
    capture: ProcessCapture
    kill_requested: bool = False
    timeout_seconds: float | None = None  # the command's timeout, for its summary
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    # A run's notice is recorded once this is done: the settlement of the call it came from.
    after: asyncio.Future[Any] | None = field(default=None, repr=False)


def _end(capture: ProcessCapture, killed: bool) -> tuple[str, dict[str, Any]]:
    result = capture.result()
    status = ProcessStatus.KILLED if killed or result["timedOut"] else ProcessStatus.EXITED
    return status, result


class Watchers:
    """The async runs and launches one worker watches."""

    def __init__(self, *, db: Database, host: str, worker: str) -> None:
        self._db, self.host, self.worker = db, host, worker
        self._watched: dict[tuple[str, str], Watched] = {}
        self._stopping = False

    def pgids(self) -> set[int]:
        return {w.capture.pgid for w in self._watched.values() if w.capture.pgid is not None}

    # --- async runs -----------------------------------------------------------------------

    def watch_run(
        self,
        run_id: Any,
        capture: ProcessCapture,
        deadline: float | None,
        timeout_seconds: float | None = None,
        *,
        after: asyncio.Future[Any] | None = None,
    ) -> None:
        """Watch a promoted ``bash`` command to its end (``deadline``: seconds it may still
        run, of its ``timeout_seconds``; None: no limit); its end is recorded once ``after``
        is done (the call's settlement)."""
        watched = Watched(RUN, str(run_id), capture, timeout_seconds=timeout_seconds, after=after)
        self._watched[(RUN, watched.id)] = watched
        watched.task = asyncio.create_task(self._watch(watched, deadline))

    # --- launches -------------------------------------------------------------------------

    async def start_launch(self, launch_id: Any) -> bool:
        """Take a launch nobody took yet and start its process; False when another worker
        took it first (or it was stopped meanwhile)."""
        launch: Launch | None = await self._db(launch_take, launch_id=launch_id, host=self.host)
        if launch is None:
            return False
        folder = launch_folder(launch.pk)
        try:
            cwd = launch_cwd(launch.owner_id, launch.cwd)
            cwd.mkdir(parents=True, exist_ok=True)
            capture = ProcessCapture(
                command=launch.command,
                cwd=cwd,
                env=tool_environment(cwd),
                folder=folder,
                index_dir=settings.DATA_DIR / "index",
            )
            await capture.start()
        except Exception:  # noqa: BLE001 - it could not start: say so, end it
            logger.exception("launch %s could not start", launch.pk, extra={"worker": self.worker})
            await self._db(
                launch_finish,
                launch_id=launch.pk,
                status=ProcessStatus.EXITED,
                exit_code=None,
                signal=None,
            )
            return True
        await self._db(
            launch_started,
            launch_id=launch.pk,
            pid=capture.pid,
            pgid=capture.pgid,
            process_start=capture.process_start_ticks,
        )
        watched = Watched(LAUNCH, str(launch.pk), capture)
        self._watched[(LAUNCH, watched.id)] = watched
        watched.task = asyncio.create_task(self._watch(watched, None))
        return True

    # --- both -----------------------------------------------------------------------------

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
                watched.kind,
                watched.id,
                exc_info=True,
                extra={"worker": self.worker},
            )
        try:
            await self._record_end(watched)
        except Exception:  # noqa: BLE001 - its row may be gone (a deleted conversation)
            logger.warning(
                "recording the end of %s %s failed",
                watched.kind,
                watched.id,
                exc_info=True,
                extra={"worker": self.worker},
            )
        finally:
            self._watched.pop((watched.kind, watched.id), None)

    async def _record_end(self, watched: Watched) -> None:
        capture = watched.capture
        status, result = _end(capture, watched.kill_requested)
        if watched.kind == RUN:
            output = result["capture"]["output"]
            finish = functools.partial(
                async_run_finish,
                run_id=watched.id,
                status=status,
                exit_code=result["exitCode"],
                signal=result["signal"],
                timed_out=result["timedOut"],
                timeout_seconds=watched.timeout_seconds,
                not_stored_bytes=output["bytes"] - output["storedBytes"],
                files=capture.files(),
            )
            if not await self._notice(watched, finish):
                return
        else:
            await self._db(
                launch_finish,
                launch_id=watched.id,
                status=status,
                exit_code=result["exitCode"],
                signal=result["signal"],
            )
        logger.info(
            "%s %s ended %s", watched.kind, watched.id, status, extra={"worker": self.worker}
        )

    async def _notice(self, watched: Watched, finish: Callable[[], Any]) -> bool:
        """Record a run's end once its call's settlement is over, trying again while the call
        has no response yet; False when the worker stops first (recovery then marks the run
        ``lost``, after the call's response)."""
        if watched.after is not None:
            await asyncio.shield(watched.after)
        delay = NOTICE_RETRY_SECONDS
        while True:
            try:
                await self._db(finish)
                return True
            except CallNotSettled:
                if self._stopping:
                    logger.warning(
                        "async run %s ended before its call settled; left to recovery",
                        watched.id,
                        extra={"worker": self.worker},
                    )
                    return False
            await asyncio.sleep(delay)
            delay = min(delay * 2, NOTICE_RETRY_MAX_SECONDS)

    async def heartbeat(self) -> None:
        runs = [w.id for w in self._watched.values() if w.kind == RUN]
        launches = [w.id for w in self._watched.values() if w.kind == LAUNCH]
        if runs:
            await self._db(async_runs_heartbeat, run_ids=runs)
        if launches:
            await self._db(launches_heartbeat, launch_ids=launches)

    async def stop_all(self) -> None:
        """End every watched process with the worker (each recorded ``killed``)."""
        self._stopping = True
        tasks = [w.task for w in self._watched.values() if w.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- what dead workers left on this host ----------------------------------------------

    async def kill_left(self) -> list[str]:
        """Kill the process groups dead workers of this host left (recorded by recovery,
        wherever it ran), then forget them. A group is killed only while its leader pid still
        has the recorded start time; one this worker runs itself is never touched."""
        left = await self._db(left_processes_of, host=self.host)
        done, killed = [], []
        for row in left:
            if row.pgid not in self.pgids() and await kill_group(row.pgid, row.process_start):
                killed.append(row.label)
                logger.warning(
                    "killed the process group %s left by %s",
                    row.pgid,
                    row.label,
                    extra={"worker": self.worker},
                )
            done.append(row.pk)
        if done:
            await self._db(left_processes_forget, ids=done)
        return killed
