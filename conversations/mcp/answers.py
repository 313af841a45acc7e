"""What an MCP client sends back, handled from database state on whichever daphne receives it
(docs/mcp.md): the answer to an elicitation, and a ``notifications/cancelled``.

A fresh stateless SDK transport could not route either: the elicitation was sent by another
request's handler (maybe another process's), and the call a cancel names may run anywhere. Both
are found from their ids alone: an elicitation's JSON-RPC id holds its call's id, a cancelled
request's id and the session give the call's id (``calls.call_id_of``). Each runs on a pool
thread and gives its connection back.
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

from django.db import connections

from .. import selectors
from ..errors import DomainError, NotFound
from ..models import McpSession
from ..services.cancel import call_cancel
from ..services.interactions import call_resolve
from ..services.mcp_sessions import mcp_request_cancel_note
from .calls import ELICITATION_PREFIX, call_id_of, elicitation_request_id

logger = logging.getLogger(__name__)


def elicitation_decision(result: Any) -> str | None:
    """The approval an elicitation's result gives: ``allow`` or ``deny`` for a form the user
    accepted, ``deny`` for one the user declined; None when the user dismissed it (``cancel``)
    or the result makes no sense: the call keeps waiting for the page, the admin or the API."""
    if not isinstance(result, dict):
        return None
    action = result.get("action")
    if action == "decline":
        return "deny"
    content = result.get("content")
    if action == "accept" and isinstance(content, dict):
        decision = content.get("decision")
        if decision in ("allow", "deny"):
            return decision
    return None


def elicitation_answered(
    *, session: McpSession, user: Any, request_id: Any, result: Any, error: Any = None
) -> str:
    """Apply a client's answer to an elicitation of a call's approval, as the token's user
    (``call_resolve``); what came of it, for the log. An answer that lost to another decision
    finds ``not_awaiting`` (or ``resolution_conflict``) and changes nothing."""
    try:
        if not isinstance(request_id, str) or not request_id.startswith(ELICITATION_PREFIX):
            return "not ours"
        call_id = UUID(request_id[len(ELICITATION_PREFIX) :])
        if error is not None:
            return f"the client could not ask: {error}"
        decision = elicitation_decision(result)
        if decision is None:
            return "dismissed"
        call, event = selectors.call_for(user, call_id)
        conversation_id = call.conversation_id if call is not None else event.conversation_id  # type: ignore[union-attr]
        if conversation_id != session.conversation_id:
            return "another conversation's call"
        call_resolve(
            call_id=call_id,
            user=user,
            request_id=elicitation_request_id(call_id),
            resolution={"kind": "approval", "decision": decision, "persist": False},
        )
        return decision
    except ValueError:
        return "not ours"
    except DomainError as exc:  # decided elsewhere first, not the user's, no permission
        return f"{exc.code}: {exc.message}"
    finally:
        connections.close_all()


def request_cancelled(*, session: McpSession, params: Any) -> str:
    """A client's ``notifications/cancelled`` for one of its ``tools/call`` requests: the call
    settles by the Cancel rules (``call_cancel``; a running command's process group is killed
    by the runtime). What came of it, for the log."""
    try:
        request_id = params.get("requestId") if isinstance(params, dict) else None
        if isinstance(request_id, bool) or not isinstance(request_id, str | int):
            return "no request id"
        call_id = call_id_of(session.conversation_id, session.pk, request_id)
        try:
            return call_cancel(call_id=call_id)["outcome"]
        except NotFound:
            # The cancel overtook its tools/call (another connection, maybe another process):
            # noted, then looked for again. Either the call is found now, or it was committed
            # after the note, and its handler, which reads the notes once its call is made,
            # cancels it (``calls.py``).
            mcp_request_cancel_note(session_id=session.pk, request_id=request_id)
            return call_cancel(call_id=call_id)["outcome"]
    except DomainError as exc:  # no call for that request (not a tools/call, or not yet made)
        return f"{exc.code}: {exc.message}"
    finally:
        connections.close_all()


def log_answer(what: str, outcome: str, session: McpSession) -> None:
    logger.info("MCP %s: %s", what, outcome, extra={"conversation_id": session.conversation_id})
