"""Core handlers that need no process, run at once by the server as its own worker.

``ask_user``: its handler claims the call like any worker, then moves it
``running → awaiting_input`` with ``interaction = {kind: "input", request: {questions}}`` and
releases the claim; the user's input resolution settles it ``completed``. It runs right after
the commit that made the call ``ready`` (supervision, or an approval). A call left ``ready`` by
a crash in between is run again by recovery (it hands ``ready`` calls to their runner).

Handlers that run processes (``bash``, file tools) belong to the workers.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from conversations.errors import DomainError
from conversations.services.claims import Claim, claim_acquire
from conversations.services.interactions import call_await_input
from conversations.services.runners import runner_register

logger = logging.getLogger(__name__)


def _ask_user(claim: Claim) -> None:
    call_await_input(call_id=claim.call_id, token=claim.token, generation=claim.generation)


INLINE_HANDLERS: dict[str, Callable[[Claim], None]] = {"ask_user": _ask_user}


def inline_worker() -> str:
    return f"inline:{os.getpid()}"


def run_inline(call_id: Any, handler: Callable[[Claim], None]) -> bool:
    """Claim a ``ready`` call and run ``handler`` on it; False when there was nothing to run
    (another worker claimed it first, or it was cancelled or settled meanwhile)."""
    claim = claim_acquire(call_id=call_id, worker=inline_worker())
    if claim is None:
        return False
    try:
        handler(claim)
    except DomainError as exc:  # cancelled or settled meanwhile: nothing left to do
        logger.info(
            "inline handler stopped: %s",
            exc.message,
            extra={"tool_call_id": call_id, "worker": inline_worker(), "claim_token": claim.token},
        )
        return False
    return True


def register() -> None:
    for tool_name, handler in INLINE_HANDLERS.items():
        runner_register(
            tool_name=tool_name,
            runner=lambda call_id, handler=handler: run_inline(call_id, handler),
        )
