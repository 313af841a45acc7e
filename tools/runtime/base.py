"""What a handler gets and gives: the interface between the worker and the tools it runs.

A handler is ``async def handler(ctx: CallContext) -> HandlerResult``. The worker claims the
call, builds the context, runs the handler as an asyncio task (cancelled when the call is
cancelled or its claim is lost), and settles the call with the result under its claim
(token + generation). A handler never writes rows itself: it reads and writes files, asks
``ctx.update`` to publish live progress, and returns what settlement needs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

from conversations.services.settlement import INDETERMINATE_REASON, AttemptFile

__all__ = [
    "AttemptFile",
    "CallContext",
    "Handler",
    "HandlerFamily",
    "HandlerResult",
    "ToolError",
    "stopped_reason",
]


class ToolError(Exception):
    """The tool could not do its work (a refused path, a missing file, a run that is not the
    conversation's): the call settles ``failed`` with this message, which names what was
    refused and never quotes more than a bounded part of user input."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


@dataclass(frozen=True)
class CallContext:
    """One claimed call, as its handler sees it."""

    call_id: UUID
    conversation_id: UUID
    owner_id: int
    tool_name: str
    arguments: dict[str, Any]
    generation: int
    token: UUID
    worker: str
    # The conversation's workspace (absolute; the handler creates it on first use) and the
    # conversation's managed files (DATA_DIR/conversations/<id>/), readable by absolute path.
    workspace: Path
    managed_root: Path
    # This attempt's folder (DATA_DIR/.../tool-calls/<call>/g<generation>/), for files the
    # attempt writes (captures, reports); created by whoever writes first.
    attempt_dir: Path
    # Publish live progress: ``tool.updated`` fields (``outputDelta``, ``title``, …) folded into
    # the call's activity. The worker coalesces: at most one update a call every 100 ms.
    update: Callable[[dict[str, Any]], Awaitable[None]] = field(repr=False)
    # Run a blocking function that uses the database on the worker's database threads (each
    # gives its connection back), e.g. a core service: ``await ctx.sync(service, **kwargs)``.
    sync: Callable[..., Awaitable[Any]] | None = field(default=None, repr=False)
    # Hand a process that goes on after the call settles to the worker, which watches it to its
    # end: ``ctx.background(run_id, capture, deadline, timeout)`` (a ``bash`` call promoted to
    # an async run; ``deadline``: seconds it may still run of its ``timeout``, None: no limit).
    background: Callable[..., None] | None = field(default=None, repr=False)


@dataclass
class HandlerResult:
    """What settlement needs: the outcome and what the projections summarise."""

    # "completed", "failed", or "indeterminate" (a command stopped by an error of the server's)
    outcome: str = "completed"
    result: Any = None  # the complete result, written as result.json
    text: str | None = None
    items: Sequence[str] | None = None
    # An item listing (grep, find, ls): how many items it found in all, when ``items`` holds
    # only the ones its projections can show (``projections/items.py``), and its closing note.
    item_count: int | None = None
    note: str | None = None
    process: dict[str, Any] | None = None
    # A log page (``async_bash_logs``): the keyword arguments of ``project_log_page``.
    page: dict[str, Any] | None = None
    reason: str | None = None
    files: Sequence[AttemptFile] = ()
    # The handler moved the call on itself and released its claim (``ask_user`` waits for the
    # person): the worker settles nothing.
    suspended: bool = False
    # The call became this background run (its response says ``asyncRunId``).
    async_run_id: UUID | None = None


Handler = Callable[[CallContext], Awaitable[HandlerResult]]


@dataclass(frozen=True)
class HandlerFamily:
    """Tools whose names are not known in advance, run by one handler: the tools of the MCP
    servers (``mcp__<server>__<tool>``). ``claimable()`` answers the names under ``prefix`` a
    worker may claim now (blocking; the worker calls it on a database thread, at each pickup)."""

    prefix: str
    claimable: Callable[[], Sequence[str]]
    handler: Handler


def stopped_reason(exc: BaseException) -> str:
    """The reason of a command the worker stopped after an error of the server's own (the
    database, the disk), which settles ``indeterminate``: the error is named by its type only
    (its message may hold connection details)."""
    return (
        f"{INDETERMINATE_REASON} The server could not keep track of the command "
        f"({type(exc).__name__}), so it stopped it."
    )
