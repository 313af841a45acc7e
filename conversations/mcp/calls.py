"""An MCP ``tools/call``: a tool call of the session's conversation, created, supervised and
settled by the core's services like any model call, and waited for here (docs/mcp.md).

The call is an assistant message with one ``tool_call`` block in the conversation's MCP turn
(``services/messages.py`` ``mcp_call_post``). Its ``messageId`` is derived from the session
and the JSON-RPC request id (``message_id_of``), so the call's id follows from them too: a
``notifications/cancelled`` naming the request finds its call, on any daphne.

Waiting uses the turn barrier's way (``barrier.waiting`` for the call): woken by a
``turn.changed`` naming the call (its settlement, its approval) or by the process's watch, which
reads every waited-for call in one query every 2 s; the call is read again only then, and no
thread or connection is held. Every ``TOOLCORE_MCP_PROGRESS_SECONDS`` of waiting the client gets a
``notifications/progress`` (when it sent a ``progressToken``) saying what the call waits for and
where to decide or read it. A call awaiting approval is also put to the client's user as an
``elicitation/create`` (form: allow once or deny) when the client declared the capability;
whichever decides first wins, and an elicitation someone else answered first is withdrawn
(``notifications/cancelled``).

The wait ends with the HTTP stream: a client that goes away stops the handler, never the call,
which settles on its own (read it with ``GET /api/v1/tool-calls/{id}``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar
from uuid import UUID

import mcp_types as types
from django.conf import settings
from django.db import connections
from django.urls import reverse
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST
from mcp_types.version import is_version_at_least

from .. import selectors
from ..api.outages import OUTAGES, outage_noted, unavailable_message
from ..barrier import waiting
from ..detached import detached
from ..errors import DomainError, NotFound, TurnOpen
from ..models import ToolCall
from ..services.calls import model_call_id
from ..services.cancel import call_cancel
from ..services.mcp_sessions import mcp_request_cancelled
from ..services.messages import mcp_call_post
from .results import call_result, refusal_result, result_parts
from .stream import McpRequest, current
from .tools import published_spec

logger = logging.getLogger(__name__)

S = ToolCall.State
# The JSON-RPC id of the elicitation that asks for a call's approval: the call is in it, so its
# answer finds the call on any daphne (``transport.py``).
ELICITATION_PREFIX = "toolcore-approval-"
PROVIDER_ID_MAX = 200
# How long a wait without progress notifications sleeps between its (empty) ticks: a day.
QUIET_SECONDS = 86_400

_R = TypeVar("_R")


def on_database(fn: Callable[..., _R]) -> Callable[..., Any]:
    """``fn`` on the shared pool threads (``detached``), its connections given back."""

    def run(*args: Any, **kwargs: Any) -> _R:
        try:
            return fn(*args, **kwargs)
        finally:
            connections.close_all()

    return detached(run)


def message_id_of(session_id: str, request_id: Any) -> str:
    """The ``messageId`` of the call a session's request made: derived from both (the JSON-RPC
    id with its type: ``1`` and ``"1"`` differ), the session id itself kept out of the log."""
    key = f"{session_id}\n{json.dumps(request_id)}".encode()
    return "mcp-" + hashlib.sha256(key).hexdigest()[:32]


def call_id_of(conversation_id: Any, session_id: str, request_id: Any) -> UUID:
    return model_call_id(conversation_id, message_id_of(session_id, request_id), 0)


def provider_call_id_of(request_id: Any) -> str:
    """The call's ``providerCallId``: ``mcp-`` and the JSON-RPC id (a digest of a long one)."""
    text = str(request_id)
    if len(text) > PROVIDER_ID_MAX:
        text = hashlib.sha256(text.encode()).hexdigest()[:32]
    return f"mcp-{text}"


def elicitation_id(call_id: Any) -> str:
    return f"{ELICITATION_PREFIX}{call_id}"


def elicitation_request_id(call_id: Any) -> str:
    """The ``requestId`` of the resolution an elicitation's answer records."""
    return f"mcp-elicitation-{call_id}"


def _post(session_conversation: Any, message_id: str, request_id: Any, params: Any) -> Any:
    return mcp_call_post(
        conversation_id=session_conversation,
        message_id=message_id,
        provider_call_id=provider_call_id_of(request_id),
        tool_name=params.name,
        arguments=params.arguments or {},
    )


# ``tools/call`` requests waiting in this process, per user: at most TOOLCORE_MCP_MAX_WAITING.
# They all wait on this process's event loop, so a plain counter is exact for it.
_waiting: Counter[Any] = Counter()


async def call_tool(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    """The SDK's ``tools/call`` handler: create the call, wait until it settles, answer it;
    refused, with no call made, when the user has ``TOOLCORE_MCP_MAX_WAITING`` waiting here."""
    user_id = current.get().session.user_id
    limit = settings.TOOLCORE_MCP_MAX_WAITING
    if _waiting[user_id] >= limit:
        raise MCPError(
            code=INVALID_REQUEST,
            message=f"{limit} of your tools/call requests are waiting already, the most one "
            "user may have at once (TOOLCORE_MCP_MAX_WAITING): wait for one to end, or decide "
            "the calls that await approval.",
        )
    _waiting[user_id] += 1
    try:
        return await _call_tool(ctx, params)
    finally:
        _waiting[user_id] -= 1
        if _waiting[user_id] <= 0:
            del _waiting[user_id]


async def _call_tool(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    request = current.get()
    if await on_database(published_spec)(params.name, request.session.user_id) is None:
        raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {params.name}")
    session = request.session
    message_id = message_id_of(session.pk, ctx.request_id)
    try:
        posted = await on_database(_post)(
            session.conversation_id, message_id, ctx.request_id, params
        )
    except TurnOpen as exc:
        return refusal_result(exc.message)
    except DomainError as exc:  # too many bytes, the request id reused with other arguments
        raise MCPError(code=INVALID_PARAMS, message=exc.message) from None
    except OUTAGES as exc:
        outage_noted(exc, "mcp")
        raise MCPError(code=INTERNAL_ERROR, message=unavailable_message(exc)) from None
    call_id = call_id_of(session.conversation_id, session.pk, ctx.request_id)
    await on_database(_cancelled_early)(session.pk, ctx.request_id, call_id)
    return await _Waiter(ctx, request, call_id, posted.body["turnId"]).result()


def _cancelled_early(session_id: str, request_id: Any, call_id: UUID) -> None:
    """Cancel the call just made when its ``notifications/cancelled`` came first and was noted
    (``answers.py`` ``request_cancelled``); the wait then answers the cancelled call."""
    if mcp_request_cancelled(session_id=session_id, request_id=request_id):
        call_cancel(call_id=call_id)


class _Waiter:
    """One ``tools/call`` waiting for its call: progress, the elicitation, the answer."""

    def __init__(
        self, ctx: ServerRequestContext[Any, Any], request: McpRequest, call_id: UUID, turn_id: str
    ) -> None:
        self.ctx = ctx
        self.request = request
        self.call_id = call_id
        self.turn_id = turn_id
        self.progress = 0
        self.elicited = False
        self.withdrawn = False
        self.wants_progress = progress_token_from_params(ctx.params) is not None

    async def _check(self) -> dict[str, Any]:
        return await on_database(selectors.call_progress)(self.call_id)

    async def result(self) -> types.CallToolResult:
        try:
            answer = await self._check()
            if not answer["settled"]:
                answer = await self._wait(answer)
            await self._withdraw(answer["payload"].get("resolutionRequestId"))
            payload = answer["payload"]
            parts = await on_database(result_parts)(self.call_id, payload)
        except NotFound:  # its conversation was deleted meanwhile
            raise MCPError(
                code=INVALID_REQUEST,
                message=f"Tool call {self.call_id} is gone: its conversation was deleted.",
            ) from None
        except OUTAGES as exc:
            outage_noted(exc, "mcp")
            raise MCPError(
                code=INTERNAL_ERROR,
                message=f"{unavailable_message(exc)} Tool call {self.call_id} goes on: read it "
                f"later with GET {self._call_url()}.",
            ) from None
        return call_result(
            call_id=self.call_id,
            conversation_id=self.request.session.conversation_id,
            payload=payload,
            parts=parts,
            base_url=self.request.base_url,
        )

    async def _wait(self, answer: dict[str, Any]) -> dict[str, Any]:
        """Until the call settled: checked on news only (``barrier.waiting``: a message that
        names it, or a change the watch saw); the client told at once when it awaits approval,
        and every ``TOOLCORE_MCP_PROGRESS_SECONDS`` what it last was, with no database read."""
        loop = asyncio.get_running_loop()
        # A client that asked for no progress hears nothing until the answer: no ticks at all.
        period = settings.TOOLCORE_MCP_PROGRESS_SECONDS if self.wants_progress else QUIET_SECONDS
        async with waiting(turn_id=self.turn_id, call_id=self.call_id) as news:
            answer = await self._check()  # joined before this check: no change goes unseen
            if not answer["settled"] and answer["state"] == S.AWAITING_APPROVAL:
                await self._tell(answer)
            told = loop.time()
            while not answer["settled"]:
                if await news.sleep(told + period - loop.time()):
                    before, answer = answer["state"], await self._check()
                    if answer["settled"]:
                        break
                    if answer["state"] != S.AWAITING_APPROVAL:
                        await self._withdraw(answer.get("resolutionRequestId"))
                    elif before != S.AWAITING_APPROVAL:  # asks now: at once, not at the tick
                        await self._tell(answer)
                        told = loop.time()
                else:
                    await self._tell(answer)
                    told = loop.time()
        return answer

    async def _tell(self, answer: dict[str, Any]) -> None:
        """What the call waits for, to the client: the elicitation once (when it may be asked),
        and a progress notification."""
        if answer["state"] == S.AWAITING_APPROVAL:
            if self.request.session.elicitation and not self.elicited:
                self.elicited = await self.request.stream.event(self._elicitation(answer))
        else:
            await self._withdraw(answer.get("resolutionRequestId"))
        self.progress += 1
        await self.ctx.session.report_progress(self.progress, None, self._progress_text(answer))

    async def _withdraw(self, decided_by: str | None) -> None:
        """Cancel the elicitation still open on the client once the call was decided otherwise
        (the page, the admin, the REST API, a cancel); its answer would find ``not_awaiting``."""
        if (
            not self.elicited
            or self.withdrawn
            or decided_by == elicitation_request_id(self.call_id)
        ):
            return
        self.withdrawn = True
        await self.request.stream.event(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {
                    "requestId": elicitation_id(self.call_id),
                    "reason": "The call was decided elsewhere.",
                },
            }
        )

    def _call_url(self) -> str:
        return f"{self.request.base_url}/api/v1/tool-calls/{self.call_id}"

    def _page_url(self) -> str:
        path = reverse("conversation", args=[self.request.session.conversation_id])
        return f"{self.request.base_url}{path}"

    def _progress_text(self, answer: dict[str, Any]) -> str:
        state = answer["state"]
        call = f"Tool call {self.call_id}"
        if state == S.AWAITING_APPROVAL:
            reason = ((answer.get("interaction") or {}).get("request") or {}).get("reason") or ""
            here = ", or answer this client's prompt" if self.elicited else ""
            return (
                f"{call} awaits approval. {reason} Approve or deny it on {self._page_url()}, in "
                f"the admin, or with POST {self._call_url()}/resolution{here}."
            ).replace("  ", " ")
        if state == S.AWAITING_INPUT:
            return f"{call} awaits an answer on {self._page_url()}."
        if state == S.RUNNING:
            return (
                f"{call} is running. If this client stops waiting, the call goes on: read it "
                f"with GET {self._call_url()}."
            )
        return f"{call} is {state.replace('_', ' ')}; GET {self._call_url()} reads it."

    def _elicitation(self, answer: dict[str, Any]) -> dict[str, Any]:
        reason = ((answer.get("interaction") or {}).get("request") or {}).get("reason") or ""
        decision: dict[str, Any] = {"type": "string", "title": "Decision"}
        choices = [("allow", "Allow once"), ("deny", "Deny")]
        params: dict[str, Any] = {
            "message": f"Toolcore asks: {reason} Allow it once, or deny it? (Tool call "
            f"{self.call_id}.)",
        }
        if is_version_at_least(self.request.session.protocol_version, "2025-11-25"):
            decision["oneOf"] = [{"const": value, "title": title} for value, title in choices]
            params["mode"] = "form"
        else:  # 2025-06-18: titles of an enum as enumNames
            decision["enum"] = [value for value, _ in choices]
            decision["enumNames"] = [title for _, title in choices]
        params["requestedSchema"] = {
            "type": "object",
            "properties": {"decision": decision},
            "required": ["decision"],
        }
        return {
            "jsonrpc": "2.0",
            "id": elicitation_id(self.call_id),
            "method": "elicitation/create",
            "params": params,
        }
