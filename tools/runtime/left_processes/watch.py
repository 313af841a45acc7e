"""Killing the process groups dead workers of this host left (docs/subsystems/claims_and_recovery.md,
"Orphan process groups"): after each recovery sweep, a worker kills those recorded for its own
host, only when the leader's start time still matches (a recycled pid is never killed)."""

from __future__ import annotations

import logging

from ..processes import kill_group
from ..watchers import Watchers
from .services import left_processes_forget, left_processes_of

logger = logging.getLogger(__name__)


async def kill_left(watchers: Watchers) -> list[str]:
    """Kill the process groups dead workers of this host left (recorded by recovery, wherever
    it ran), then forget them; the labels of those killed. A group is killed only while its
    leader pid still has the recorded start time; one ``watchers`` watches itself is never
    touched."""
    left = await watchers.db(left_processes_of, host=watchers.host)
    done, killed = [], []
    for row in left:
        if row.pgid not in watchers.pgids() and await kill_group(row.pgid, row.process_start):
            killed.append(row.label)
            logger.warning(
                "killed the process group %s left by %s",
                row.pgid,
                row.label,
                extra={"worker": watchers.worker},
            )
        done.append(row.pk)
    if done:
        await watchers.db(left_processes_forget, ids=done)
    return killed
