"""Watching an async run to its end (docs/subsystems/async_runs.md, "Watching and the
heartbeat"): the worker that promoted a ``bash`` command watches it (``tools/runtime/watchers.py``),
renews its row's heartbeat and records its end with ``async_run_finish``: the notice.

A run's notice follows its call's response: its end is recorded once the call's settlement is
over (``after``), and again, backing off, while ``async_run_finish`` answers that the call has
no response yet (its settlement failed: recovery settles it after the lease). The run stays
watched meanwhile, so its heartbeat goes on and recovery does not take it for lost.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

from ..capture import ProcessCapture
from ..watchers import Watched, Watchers
from .services import CallNotSettled, async_run_finish, async_runs_heartbeat

logger = logging.getLogger(__name__)

RUN = "async run"
# A notice waiting for its call's response is tried again after 0.1 s, then twice as long each
# time, up to 2 s (the response usually commits within milliseconds; recovery takes a lease).
NOTICE_RETRY_SECONDS = 0.1
NOTICE_RETRY_MAX_SECONDS = 2.0


class _Runs:
    name = RUN

    async def heartbeat(self, watchers: Watchers, ids: list[str]) -> None:
        await watchers.db(async_runs_heartbeat, run_ids=ids)

    async def record_end(
        self, watchers: Watchers, watched: Watched, status: str, result: dict[str, Any]
    ) -> bool:
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
            files=watched.capture.files(),
        )
        return await _notice(watchers, watched, finish)


RUNS = _Runs()


def watch_run(
    watchers: Watchers,
    run_id: Any,
    capture: ProcessCapture,
    deadline: float | None,
    timeout_seconds: float | None = None,
    *,
    after: asyncio.Future[Any] | None = None,
) -> None:
    """Watch a promoted ``bash`` command to its end (``deadline``: seconds it may still run, of
    its ``timeout_seconds``; None: no limit); its end is recorded once ``after`` is done (the
    call's settlement)."""
    watchers.watch(RUNS, run_id, capture, deadline, timeout_seconds=timeout_seconds, after=after)


async def _notice(watchers: Watchers, watched: Watched, finish: Callable[[], Any]) -> bool:
    """Record a run's end once its call's settlement is over, trying again while the call has
    no response yet; False when the worker stops first (recovery then marks the run ``lost``,
    after the call's response)."""
    if watched.after is not None:
        await asyncio.shield(watched.after)
    delay = NOTICE_RETRY_SECONDS
    while True:
        try:
            await watchers.db(finish)
            return True
        except CallNotSettled:
            if watchers.stopping:
                logger.warning(
                    "async run %s ended before its call settled; left to recovery",
                    watched.id,
                    extra={"worker": watchers.worker},
                )
                return False
        await asyncio.sleep(delay)
        delay = min(delay * 2, NOTICE_RETRY_MAX_SECONDS)
