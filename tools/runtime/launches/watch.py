"""Starting and watching a launch (docs/subsystems/launches.md): a worker takes a launch nobody
took, starts its process, watches it (``tools/runtime/watchers.py``), renews its heartbeat and
records its end with ``launch_finish``: the summary."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from tools.models import Launch, ProcessStatus
from tools.sandbox import sandbox_for

from ..capture import ProcessCapture, tool_environment
from ..watchers import Watched, Watchers
from .services import (
    launch_cwd,
    launch_finish,
    launch_folder,
    launch_started,
    launch_take,
    launches_heartbeat,
)

logger = logging.getLogger(__name__)

LAUNCH = "launch"


class _Launches:
    name = LAUNCH

    async def heartbeat(self, watchers: Watchers, ids: list[str]) -> None:
        await watchers.db(launches_heartbeat, launch_ids=ids)

    async def record_end(
        self, watchers: Watchers, watched: Watched, status: str, result: dict[str, Any]
    ) -> bool:
        await watchers.db(
            launch_finish,
            launch_id=watched.id,
            status=status,
            exit_code=result["exitCode"],
            signal=result["signal"],
        )
        return True


LAUNCHES = _Launches()


async def launch_start(watchers: Watchers, launch_id: Any) -> bool:
    """Take a launch nobody took yet and start its process, watched by ``watchers``; False
    when another worker took it first (or it was stopped meanwhile)."""
    launch: Launch | None = await watchers.db(launch_take, launch_id=launch_id, host=watchers.host)
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
            sandbox=sandbox_for(cwd),
        )
        await capture.start()
    except Exception:  # noqa: BLE001 - it could not start: say so, end it
        logger.exception("launch %s could not start", launch.pk, extra={"worker": watchers.worker})
        await watchers.db(
            launch_finish,
            launch_id=launch.pk,
            status=ProcessStatus.EXITED,
            exit_code=None,
            signal=None,
        )
        return True
    await watchers.db(
        launch_started,
        launch_id=launch.pk,
        pid=capture.pid,
        pgid=capture.pgid,
        process_start=capture.process_start_ticks,
    )
    watchers.watch(LAUNCHES, launch.pk, capture, None)
    return True
