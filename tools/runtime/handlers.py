"""``ask_user``: the handler that needs no process (docs/subsystems/interactions.md).

It claims the call like any worker, then moves it ``running → awaiting_input`` with
``interaction = {kind: "input", request: {questions}}`` and releases the claim; the user's input
resolution settles it ``completed``. The server runs it at once, right after the commit that
made the call ``ready`` (a runner, registered below), so the question is on the row when the
request that made it ready answers; a worker runs it too when it finds one left ``ready`` (by a
crash in between), through the same handler registry as every tool.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from conversations.errors import DomainError
from conversations.services.claims import claim_acquire
from conversations.services.interactions import call_await_input
from conversations.services.runners import runner_register

from .base import CallContext, HandlerResult

logger = logging.getLogger(__name__)


async def ask_user(ctx: CallContext) -> HandlerResult:
    """The worker's way: the call is claimed already; move it to ``awaiting_input``."""
    await ctx.sync(
        call_await_input, call_id=ctx.call_id, token=ctx.token, generation=ctx.generation
    )
    return HandlerResult(suspended=True)


def inline_worker() -> str:
    return f"inline:{os.getpid()}"


def run_inline(call_id: Any) -> bool:
    """Claim a ready ``ask_user`` call and move it to ``awaiting_input`` in this process; False
    when there was nothing to run (another worker claimed it first, or it was cancelled or
    settled meanwhile)."""
    claim = claim_acquire(call_id=call_id, worker=inline_worker())
    if claim is None:
        return False
    try:
        call_await_input(call_id=claim.call_id, token=claim.token, generation=claim.generation)
    except DomainError as exc:  # cancelled or settled meanwhile: nothing left to do
        logger.info(
            "ask_user stopped: %s",
            exc.message,
            extra={"tool_call_id": call_id, "worker": inline_worker(), "claim_token": claim.token},
        )
        return False
    return True


def register() -> None:
    runner_register(tool_name="ask_user", runner=run_inline)
