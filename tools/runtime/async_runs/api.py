"""REST endpoints of async runs (background shell commands). Thin: check access, call one
service or selector, shape the answer. The views' docstrings are the operations' descriptions on
the OpenAPI page."""

from __future__ import annotations

from typing import Any

from django.db import connections
from django.http import HttpRequest, HttpResponse
from ninja import Query, Router

from conversations import selectors
from conversations.api.auth import AsyncAuth
from conversations.api.responses import json_response
from conversations.api.schemas.common import PathId
from conversations.api.schemas.conversations import LinesPageOut, errors
from conversations.api.schemas.runs import AsyncRunOut
from conversations.detached import detached
from conversations.shapes import async_run_wire

from ..logs import LogQuery, log_page
from .services import async_run_end_wait, async_run_kill

runs_router = Router(tags=["async runs"])

_READ = (401, 404)
_WRITE = (400, 401, 403, 404, 413, 422)


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
    response={200: LinesPageOut, **errors(*_READ, 422, 503)},
)
def get_async_run_log(request: HttpRequest, run_id: PathId, query: Query[LogQuery]) -> HttpResponse:
    """A page of lines of its `output` (stdout and stderr interleaved, the default), `stdout` or
    `stderr`, also while it runs: from the 0-based line `offset`, or without it the last
    `limit` lines (`limit` 1…500, default 100; outside is 422). At most 512 KiB of text a page;
    `nextOffset` is null at the end; `status` is the run's; `truncated` says capture stopped
    at 16 MiB; `path` names the file when the page does not hold it all. A page of a process running on
    another host is asked of that host's workers; none answering is 503 `unavailable` with
    `Retry-After`, naming the host."""
    run = selectors.async_run_for(request.auth, run_id)
    return log_page(run.folder, query, run.status, host=run.host)


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
