"""Core handlers that need no process, run at once by the server as its own worker.

``ask_user`` (tools.md): its handler claims the call like any worker, then moves it
``running → awaiting_input`` with ``interaction = {kind: "input", request: {questions}}`` and
releases the claim; the user's input resolution settles it ``completed``. It runs in the request
that made the call ``ready`` (supervision, or an approval), after that commit. A call left
``ready`` by a crash in between is run again by ``recover`` (a ``ready`` row is picked up again).

Handlers that run processes (``bash``, file tools) belong to the workers.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)


def _ask_user(claim: Any) -> None:
    from conversations.services.interactions import call_await_input

    call_await_input(call_id=claim.call_id, token=claim.token, generation=claim.generation)


INLINE_HANDLERS: dict[str, Callable[[Any], None]] = {"ask_user": _ask_user}


def inline_worker() -> str:
    return f"inline:{os.getpid()}"


def run_inline(*, call_id: Any, tool_name: str) -> bool:
    """Run a ``ready`` call whose handler needs no process; False when there is none to run
    (another worker claimed it first, or the tool is not one of these)."""
    handler = INLINE_HANDLERS.get(tool_name)
    if handler is None:
        return False
    from conversations.errors import DomainError
    from conversations.services.claims import claim_acquire

    claim = claim_acquire(call_id=call_id, worker=inline_worker())
    if claim is None:
        return False
    try:
        handler(claim)
    except DomainError as exc:  # cancelled or settled meanwhile: nothing left to do
        logger.info("inline handler of %s stopped: %s", call_id, exc.message)
        return False
    return True
