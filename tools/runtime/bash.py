"""``bash``: one shell command, captured, in the foreground or promoted to an async run
(docs/execution.md).

Foreground, it runs until it exits or its ``timeout`` (default 120 s) passes; then SIGTERM to
its group, SIGKILL after 5 s, and the result says it timed out. With ``run_in_background: true``,
or when a foreground command still runs after ``TOOLCORE_PROMOTE_AFTER`` seconds, it becomes an
async run: the call settles ``completed`` at once (``Running in background as async run <id>.``)
and the worker watches the process to its end, which leaves an ``async_bash_event``. A promoted
command keeps the rest of its ``timeout``; an explicit background run has one only when the
call gave it, and is promoted even when it has already exited. Cancelled (its claim taken), the
handler kills the group before it lets go.

Once the process started, an error of the server's own (the database, the disk: recording the
process, a live update, the promotion) kills the group (SIGTERM, SIGKILL after 5 s) and the call
settles ``indeterminate`` with what was captured, never ``failed``: the command may have had
its effect (docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import Any

from django.conf import settings

from conversations.errors import StaleClaim
from conversations.services.claims import claim_process_record
from conversations.storage import relative_to_data
from tools.sandbox import sandbox_for

from .async_runs.services import async_run_start
from .base import AttemptFile, CallContext, HandlerResult, stopped_reason
from .capture import ProcessCapture, tool_environment
from .live import LiveOutput
from .paths import workspace_ready

logger = logging.getLogger(__name__)

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
        sandbox=sandbox_for(workspace),
    )
    pump = asyncio.create_task(live.pump(ctx.update))
    started = time.monotonic()
    try:
        await capture.start()  # raising, nothing ran: the call settles failed
        try:
            return await _run_started(ctx, capture, live, pump, background, timeout, started)
        except (asyncio.CancelledError, StaleClaim):
            # Its claim was taken (a cancel, recovery): whoever took it settles.
            live.close()
            pump.cancel()
            if not capture.finished:
                await asyncio.shield(capture.terminate())
            raise
        except Exception as exc:  # noqa: BLE001 - the server's own error: stop, indeterminate
            logger.warning(
                "bash: stopping the command after an error of the server",
                exc_info=True,
                extra={"tool_call_id": ctx.call_id},
            )
            return await _stopped(capture, live, pump, command, exc)
    finally:
        if not pump.done():
            live.close()
            pump.cancel()


async def _run_started(
    ctx: CallContext,
    capture: ProcessCapture,
    live: LiveOutput,
    pump: asyncio.Task[None],
    background: bool,
    timeout: float,
    started: float,
) -> HandlerResult:
    """The command, started: recorded on the claim, then waited for (or promoted)."""
    command: str = ctx.arguments["command"]
    await _watching(
        pump,
        ctx.sync(
            claim_process_record,
            call_id=ctx.call_id,
            token=ctx.token,
            generation=ctx.generation,
            host=settings.TOOLCORE_HOST_NAME,
            pgid=capture.pgid,
            start=capture.process_start_ticks,
        ),
    )
    if background:  # always an async run, even when it has already exited
        return await _promote(ctx, capture, live, pump, command, background, timeout, started)
    promote_after = settings.TOOLCORE_PROMOTE_AFTER
    first = min(timeout, promote_after) if promote_after > 0 else timeout
    if not await _watching(pump, capture.wait(first)) and first >= timeout:
        await capture.terminate(timed_out=True)
        await _watching(pump, capture.wait())
    if not capture.finished:
        return await _promote(ctx, capture, live, pump, command, background, timeout, started)
    live.close()
    # The last live update: failing, it is an error before the settlement like any other
    # (the call settles indeterminate, its files linked), never a failed call.
    await pump
    result = capture.result()
    files = _named(capture.files())
    result["command"] = command
    result["assets"] = {f.kind: str(f.asset_id) for f in files}
    return HandlerResult(result=result, process=process_summary(result, timeout), files=files)


async def _watching(pump: asyncio.Task[None], step: Any) -> Any:
    """``await step`` while the live output goes on; a live update that fails (the database)
    raises its error here at once, so a running command is not left unrecorded."""
    task = asyncio.ensure_future(step)
    try:
        await asyncio.wait({task, pump}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done() and pump.done() and not pump.cancelled() and pump.exception():
            raise pump.exception()
        return await task
    finally:
        if not task.done():
            task.cancel()


async def _stopped(
    capture: ProcessCapture,
    live: LiveOutput,
    pump: asyncio.Task[None],
    command: str,
    exc: BaseException,
) -> HandlerResult:
    """Kill the group (SIGTERM, SIGKILL after 5 s), let capture finish, and settle
    ``indeterminate`` with the files as they were captured: they are final now."""
    live.close()
    pump.cancel()
    if not capture.finished:
        await asyncio.shield(capture.terminate())
    with contextlib.suppress(Exception):  # e.g. the disk that failed: link what is there
        await capture.wait()
    files = _named(capture.files())
    result = {
        **capture.result(),
        "command": command,
        "assets": {f.kind: str(f.asset_id) for f in files},
        "stopped": type(exc).__name__,
    }
    return HandlerResult(
        outcome="indeterminate", result=result, reason=stopped_reason(exc), files=files
    )


async def _promote(
    ctx: CallContext,
    capture: ProcessCapture,
    live: LiveOutput,
    pump: asyncio.Task[None],
    command: str,
    background: bool,
    timeout: float,
    started: float,
) -> HandlerResult:
    """The call becomes an async run: its row, handed to the worker to watch; the call settles
    with the run's id. The run's notice is recorded only after that settlement
    (``async_run_finish`` checks it), whenever the process ends."""
    run_id = uuid.uuid4()
    await _watching(
        pump,
        ctx.sync(
            async_run_start,
            run_id=run_id,
            conversation_id=ctx.conversation_id,
            tool_call_id=ctx.call_id,
            command=command,
            cwd=str(capture.cwd),
            folder=relative_to_data(ctx.attempt_dir),
            host=settings.TOOLCORE_HOST_NAME,
            pid=capture.pid,
            pgid=capture.pgid,
            process_start=capture.process_start_ticks,
        ),
    )
    # The live output of the call stops here: the run's output is paged from its files.
    live.close()
    pump.cancel()
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
