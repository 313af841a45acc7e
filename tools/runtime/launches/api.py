"""REST endpoints of workbench launches. Thin: check access, call one service or selector,
shape the answer. The views' docstrings are the operations' descriptions on the OpenAPI page."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from ninja import Query, Router

from conversations import selectors
from conversations.api.responses import json_response
from conversations.api.schemas.common import PathId
from conversations.api.schemas.conversations import LinesPageOut, errors
from tools.models import Launch

from ..logs import LogQuery, log_page
from .schemas import LaunchIn, LaunchOut, LaunchPage
from .services import launch_create, launch_for, launch_stop, launch_wire

launches_router = Router(tags=["launches"])

_READ = (401, 404)
_WRITE = (400, 401, 403, 404, 413, 422)


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
    output captured in `DATA_DIR/launches/<id>/`, in the command sandbox. Needs the permission
    `tools.run_commands` (else 403), and a command the global `bash` rules do not deny (else
    403 naming the rule, nothing started). Answers 201 with the launch, `running`; a worker
    starts its process at once (its `pid` appears then). Changes are published on your
    workbench."""
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
    response={200: LinesPageOut, **errors(*_READ, 422, 503)},
)
def get_launch_log(request: HttpRequest, launch_id: PathId, query: Query[LogQuery]) -> HttpResponse:
    """A page of lines of its `output` (the default: stdout and stderr interleaved), `stdout`
    or `stderr`, paged as async run logs are: 0-based `offset` (without it the last lines),
    `limit` 1…500 (default 100). A page of a process running on
    another host is asked of that host's workers; none answering is 503 `unavailable` with
    `Retry-After`, naming the host."""
    launch: Launch = launch_for(request.auth, launch_id)
    return log_page(f"launches/{launch.pk}", query, launch.status, host=launch.host)


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
