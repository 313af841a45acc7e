"""``async_bash_logs`` and ``async_bash_kill``: the model's handles on its background runs
(docs/subsystems/async_runs.md). A run id of another conversation is refused like a missing one.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from django.conf import settings

from conversations.storage import CAPTURE_MAX_BYTES, data_dir
from projections.logpages import PageParamError, read_page
from projections.process import page_where
from tools.models import AsyncRun, ProcessStatus

from ..base import CallContext, HandlerResult, ToolError
from .services import KILL_POLL_SECONDS, KILL_WAIT_SECONDS, async_run_kill


def _run_of(conversation_id: Any, run_id: str) -> AsyncRun:
    run = AsyncRun.objects.filter(pk=run_id, conversation_id=conversation_id).first()
    if run is None:
        raise ToolError(f"No async run {run_id} in this conversation.", field="id")
    return run


def _page(run: AsyncRun, stream: str, offset: int | None, limit: int) -> dict[str, Any]:
    path = data_dir() / run.folder / f"{stream}.txt"
    if not path.exists():
        raise ToolError(f"Async run {run.pk} has no {stream} captured.", field="stream")
    try:
        return read_page(
            path,
            offset=offset,
            limit=limit,
            status=run.status,
            truncated=path.stat().st_size >= CAPTURE_MAX_BYTES,
            index_dir=settings.DATA_DIR / "index",
        )
    except PageParamError as exc:
        raise ToolError(str(exc), field=exc.field) from exc


async def async_bash_logs(ctx: CallContext) -> HandlerResult:
    """A page of a run's log; the model sees it through the ``process_diagnostics`` profile
    (``project_log_page``): whole when it fits, else summarised naming the file and where to
    read on. The complete page is ``result.json``."""
    args = ctx.arguments
    stream = args.get("stream", "output")
    run = await ctx.sync(_run_of, ctx.conversation_id, args["id"])
    page = await ctx.sync(_page, run, stream, args.get("offset"), args.get("limit", 100))
    # Offsets are 0-based here, as the tool's `offset` argument and the log API count them.
    where = page_where(page["offset"], len(page["lines"]), page["totalLines"])
    footer = f"{where} in the {stream} of async run {run.pk} ({page['status']})."
    if page["nextOffset"] is not None:
        footer += f" Continue with offset={page['nextOffset']}."
    projection = {
        "lines": page["lines"],
        "offset": page["offset"],
        "total_lines": page["totalLines"],
        "next_offset": page["nextOffset"],
        "status": page["status"],
        "stream": stream,
        "run_id": str(run.pk),
        "path": str(data_dir() / run.folder / f"{stream}.txt"),
    }
    return HandlerResult(text="\n".join([*page["lines"], footer]), result=page, page=projection)


def _status_of(run_id: Any) -> str:
    return AsyncRun.objects.filter(pk=run_id).values_list("status", flat=True).get()


async def async_bash_kill(ctx: CallContext) -> HandlerResult:
    run = await ctx.sync(_run_of, ctx.conversation_id, ctx.arguments["id"])
    if run.status != ProcessStatus.RUNNING:
        text = f"Async run {run.pk} had already ended ({run.status})."
        return HandlerResult(text=text, result={"asyncRunId": str(run.pk), "status": run.status})
    await ctx.sync(async_run_kill, run=run)
    deadline = time.monotonic() + KILL_WAIT_SECONDS
    status = ProcessStatus.RUNNING
    while status == ProcessStatus.RUNNING and time.monotonic() < deadline:
        await asyncio.sleep(KILL_POLL_SECONDS)
        status = await ctx.sync(_status_of, run.pk)
    text = (
        f"Killed async run {run.pk}."
        if status != ProcessStatus.RUNNING
        else f"Asked async run {run.pk} to stop; it has not ended yet."
    )
    return HandlerResult(text=text, result={"asyncRunId": str(run.pk), "status": status})
