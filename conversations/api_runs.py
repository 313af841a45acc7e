"""REST endpoints of async runs (background shell commands) and workbench launches. Thin: check
access, call one service or selector, shape the answer. The views' docstrings are the
operations' descriptions on the OpenAPI page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connections
from django.http import HttpRequest, HttpResponse
from ninja import Query, Router

from projections.logpages import PageParamError, read_page
from tools.models import Launch

from . import selectors
from .api.auth import AsyncAuth
from .api.responses import json_response
from .api.schemas.common import PathId
from .api.schemas.conversations import LinesPageOut, errors
from .api.schemas.runs import AsyncRunOut
from .detached import detached
from .errors import ValidationFailed
from .schemas_runs import LaunchIn, LaunchOut, LaunchPage, LogQuery
from .services.async_runs import async_run_end_wait, async_run_kill
from .services.launches import launch_create, launch_folder, launch_for, launch_stop, launch_wire
from .shapes import async_run_wire
from .storage import CAPTURE_MAX_BYTES, data_dir

runs_router = Router(tags=["async runs"])
launches_router = Router(tags=["launches"])

_READ = (401, 404)
_WRITE = (400, 401, 403, 404, 413, 422)


def _log_page(path: Path, query: LogQuery, status: str) -> HttpResponse:
    """A page of a capture file by lines (``truncated``: capture stopped at its cap)."""
    try:
        truncated = path.stat().st_size >= CAPTURE_MAX_BYTES
    except FileNotFoundError:  # not started yet: an empty page (a read never writes)
        empty = {"lines": [], "offset": query.offset or 0, "limit": query.limit, "totalLines": 0}
        return json_response(
            {**empty, "nextOffset": None, "status": status, "path": None, "truncated": False}
        )
    try:
        page = read_page(
            path,
            offset=query.offset,
            limit=query.limit,
            status=status,
            truncated=truncated,
            index_dir=settings.DATA_DIR / "index",
        )
    except PageParamError as exc:
        raise ValidationFailed(str(exc), field=exc.field) from exc
    return json_response(page)


@runs_router.get(
    "/async-runs/{run_id}",
    operation_id="get_async_run",
    summary="Read an async run",
    response={200: AsyncRunOut, **errors(*_READ)},
)
def get_async_run(request: HttpRequest, run_id: PathId) -> HttpResponse:
    """A background shell command started by a `bash` call (`run_in_background: true`, or a
    foreground command still running after `TOOLCORE_PROMOTE_AFTER` seconds): its status
    (`running`, `exited`, `killed`, `lost`), exit code or signal, and the sequence of the
    `async_bash_event` that tells its end (the notice the turn results' `queue` carries until
    `POST …/queue/ack`)."""
    return json_response(async_run_wire(selectors.async_run_for(request.auth, run_id)))


@runs_router.get(
    "/async-runs/{run_id}/log",
    operation_id="get_async_run_log",
    summary="Read an async run's output by lines",
    response={200: LinesPageOut, **errors(*_READ, 422)},
)
def get_async_run_log(request: HttpRequest, run_id: PathId, query: Query[LogQuery]) -> HttpResponse:
    """A page of lines of its `output` (stdout and stderr interleaved, the default), `stdout` or
    `stderr`, also while it runs: from the 0-based line `offset`, or without it the last
    `limit` lines (`limit` 1…500, default 100; outside is 422). At most 512 KiB of text a page;
    `nextOffset` is null at the end; `status` is the run's; `truncated` says capture stopped
    at 16 MiB; `path` names the file when the page does not hold it all."""
    run = selectors.async_run_for(request.auth, run_id)
    return _log_page(data_dir() / run.folder / f"{query.stream}.txt", query, run.status)


def _kill(user: Any, run_id: str) -> Any:
    """Find the user's run and ask its watcher to kill it, on a detached thread."""
    try:
        run = selectors.async_run_for(user, run_id)
        async_run_kill(run=run)
        return run.pk
    finally:
        connections.close_all()


@runs_router.post(
    "/async-runs/{run_id}/kill",
    operation_id="kill_async_run",
    auth=AsyncAuth(),
    summary="Kill an async run",
    response={200: AsyncRunOut, **errors(*_WRITE)},
)
async def kill_async_run(request: HttpRequest, run_id: PathId) -> HttpResponse:
    """Asks the worker watching the run to kill its process group (SIGTERM, then SIGKILL after
    5 s) and answers the run once it ended: `killed` (with its `signal`, or the exit code of a
    command that caught SIGTERM and exited), its notice then in the queue. Waits at most 8 s
    (holding no server thread); a run still `running` by then had no watcher to kill it yet
    (its worker is away), and ends `lost` or `killed` later. Killing a run that ended answers
    it as it is and changes nothing."""
    pk = await detached(_kill)(request.auth, run_id)
    return json_response(async_run_wire(await async_run_end_wait(run_id=pk)))


@launches_router.get(
    "/launches",
    operation_id="list_launches",
    summary="List your launches",
    response={200: LaunchPage, **errors(*_READ, 422)},
)
def list_launches(
    request: HttpRequest, cursor: str | None = None, limit: int = Query(50, ge=1, le=100)
) -> HttpResponse:
    """Your workbench launches, newest first, `limit` 1…100 (default 50) a page;
    `nextCursor` is null on the last page."""
    page, next_cursor = selectors.launches_page(request.auth, cursor=cursor, limit=limit)
    return json_response({"items": [launch_wire(x) for x in page], "nextCursor": next_cursor})


@launches_router.post(
    "/launches",
    operation_id="start_launch",
    summary="Start a launch",
    response={201: LaunchOut, **errors(*_WRITE)},
)
def start_launch(request: HttpRequest, payload: LaunchIn) -> HttpResponse:
    """Starts a workbench process (a dev server, a watcher): `command` runs with `/bin/sh` in
    `cwd` (below your workspace root; 422 outside), with the tools' minimal environment, its
    output captured in `DATA_DIR/launches/<id>/`. Needs the permission `tools.run_commands`
    (else 403). Answers 201 with the launch, `running`; a worker starts its process at once
    (its `pid` appears then). Changes are published on your workbench."""
    launch = launch_create(
        owner=request.auth, name=payload.name, command=payload.command, cwd=payload.cwd
    )
    return json_response(launch_wire(launch), 201)


@launches_router.get(
    "/launches/{launch_id}",
    operation_id="get_launch",
    summary="Read a launch",
    response={200: LaunchOut, **errors(*_READ)},
)
def get_launch(request: HttpRequest, launch_id: PathId) -> HttpResponse:
    """One of your launches: its status (`running`, `exited`, `killed`, `lost`), its pid once
    a worker started it, and how it ended (exit code or signal). Another user's launch is 404
    like a missing one."""
    return json_response(launch_wire(launch_for(request.auth, launch_id)))


@launches_router.get(
    "/launches/{launch_id}/log",
    operation_id="get_launch_log",
    summary="Read a launch's output by lines",
    response={200: LinesPageOut, **errors(*_READ, 422)},
)
def get_launch_log(request: HttpRequest, launch_id: PathId, query: Query[LogQuery]) -> HttpResponse:
    """A page of lines of its `output` (the default: stdout and stderr interleaved), `stdout`
    or `stderr`, paged as async run logs are: 0-based `offset` (without it the last lines),
    `limit` 1…500 (default 100)."""
    launch: Launch = launch_for(request.auth, launch_id)
    return _log_page(launch_folder(launch.pk) / f"{query.stream}.txt", query, launch.status)


@launches_router.post(
    "/launches/{launch_id}/stop",
    operation_id="stop_launch",
    summary="Stop a launch",
    response={200: LaunchOut, **errors(*_WRITE)},
)
def stop_launch(request: HttpRequest, launch_id: PathId) -> HttpResponse:
    """Asks the worker watching it to kill its process group (SIGTERM, then SIGKILL after
    5 s); a launch no worker started yet ends at once. Answers the launch as it is now.
    Stopping a launch that ended changes nothing."""
    return json_response(launch_wire(launch_stop(owner=request.auth, launch_id=launch_id)))
