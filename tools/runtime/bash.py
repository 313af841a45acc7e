"""``bash``: one shell command, captured, in the foreground or promoted to an async run
(docs/execution.md).

Foreground, it runs until it exits or its ``timeout`` (default 120 s) passes; then SIGTERM to
its group, SIGKILL after 5 s, and the result says it timed out. With ``run_in_background: true``,
or when a foreground command still runs after ``TOOLCORE_PROMOTE_AFTER`` seconds, it becomes an
async run: the call settles ``completed`` at once (``Running in background as async run <id>.``)
and the worker watches the process to its end, which leaves an ``async_bash_event``. A promoted
command keeps the rest of its ``timeout``; an explicit background run has one only when the
call gave it. Cancelled (its claim taken), the handler kills the group before it lets go.
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from typing import Any

from django.conf import settings

from conversations.services.async_runs import async_run_start
from conversations.services.claims import claim_process_record
from conversations.storage import relative_to_data

from .base import AttemptFile, CallContext, HandlerResult
from .capture import ProcessCapture, tool_environment
from .live import LiveOutput
from .paths import workspace_ready

DEFAULT_TIMEOUT_SECONDS = 120


def process_summary(result: dict[str, Any], timeout: float | None) -> dict[str, Any]:
    """The process projection's arguments of a capture result."""
    output = result["capture"]["output"]
    return {
        "exit_code": result["exitCode"],
        "signal": result["signal"],
        "timed_out": result["timedOut"],
        "timeout_seconds": timeout if result["timedOut"] else None,
        "not_stored_bytes": output["bytes"] - output["storedBytes"],
    }


def _named(files: list[AttemptFile]) -> list[AttemptFile]:
    """The capture files with their asset ids chosen now, so the complete result can cite
    them."""
    return [
        AttemptFile(f.path, f.kind, f.media_type, f.truncated, asset_id=uuid.uuid4()) for f in files
    ]


async def bash(ctx: CallContext) -> HandlerResult:
    command: str = ctx.arguments["command"]
    explicit_timeout = ctx.arguments.get("timeout")
    timeout = explicit_timeout if explicit_timeout is not None else DEFAULT_TIMEOUT_SECONDS
    background = bool(ctx.arguments.get("run_in_background"))
    workspace = workspace_ready(ctx)
    live = LiveOutput()
    capture = ProcessCapture(
        command=command,
        cwd=workspace,
        env=tool_environment(workspace),
        folder=ctx.attempt_dir,
        on_output=live.feed,
        index_dir=settings.DATA_DIR / "index",
    )
    pump = asyncio.create_task(live.pump(ctx.update))
    started = time.monotonic()
    try:
        await capture.start()
        await ctx.sync(
            claim_process_record,
            call_id=ctx.call_id,
            token=ctx.token,
            generation=ctx.generation,
            host=socket.gethostname(),
            pgid=capture.pgid,
            start=capture.process_start_ticks,
        )
        promote_after = 0 if background else settings.TOOLCORE_PROMOTE_AFTER
        if not background:
            first = min(timeout, promote_after) if promote_after > 0 else timeout
            if not await capture.wait(first) and first >= timeout:
                await capture.terminate(timed_out=True)
                await capture.wait()
        if capture.finished:
            live.close()
            await pump
            result = capture.result()
            files = _named(capture.files())
            result["command"] = command
            result["assets"] = {f.kind: str(f.asset_id) for f in files}
            return HandlerResult(
                result=result, process=process_summary(result, timeout), files=files
            )
        return await _promote(ctx, capture, command, workspace, background, timeout, started)
    except asyncio.CancelledError:
        live.close()
        pump.cancel()
        if capture.pgid is not None and not capture.finished:
            await asyncio.shield(capture.terminate())
        raise
    finally:
        if not pump.done():
            live.close()
            pump.cancel()


async def _promote(
    ctx: CallContext,
    capture: ProcessCapture,
    command: str,
    workspace: Any,
    background: bool,
    timeout: float,
    started: float,
) -> HandlerResult:
    """The call becomes an async run: its row, handed to the worker to watch; the call settles
    with the run's id."""
    run_id = uuid.uuid4()
    await ctx.sync(
        async_run_start,
        run_id=run_id,
        conversation_id=ctx.conversation_id,
        tool_call_id=ctx.call_id,
        command=command,
        cwd=str(workspace),
        folder=relative_to_data(ctx.attempt_dir),
        host=socket.gethostname(),
        pid=capture.pid,
        pgid=capture.pgid,
        process_start=capture.process_start_ticks,
    )
    explicit = ctx.arguments.get("timeout") is not None
    deadline = (
        None if background and not explicit else max(0.0, timeout - (time.monotonic() - started))
    )
    ctx.background(run_id, capture, deadline, None if deadline is None else timeout)
    return HandlerResult(
        text=f"Running in background as async run {run_id}.",
        result={"asyncRunId": str(run_id), "command": command},
        async_run_id=run_id,
    )
