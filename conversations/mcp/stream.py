"""One MCP request as Toolcore's handlers see it, the response stream they may write to, and the
plain HTTP answers of the transport.

``current`` holds the request's ``McpRequest`` (session, user, where the server is reached,
the response stream). The transport sets it before handing the request to the SDK; the SDK
runs the handler in a copy of the context of the request that wrote the message, so the
handler reads it there.

``ResponseStream`` wraps the ASGI ``send`` of one POST. The SDK writes its SSE events through it;
Toolcore adds its own JSON-RPC messages between them (``event``): the server-to-client requests
the stateless SDK has no back-channel for (an elicitation) and their withdrawal. Each SSE event
is one body message, so an added event never lands inside another.
"""

from __future__ import annotations

import asyncio
import json
import logging
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from ..models import McpSession

logger = logging.getLogger(__name__)

SESSION_HEADER = b"mcp-session-id"
SSE_CONTENT_TYPE = b"text/event-stream"


@dataclass
class McpRequest:
    """What a handler of one request needs: whose session, on which conversation, and how the
    client reaches this server (for the links of the answers)."""

    session: McpSession
    user: Any
    base_url: str
    stream: ResponseStream


current: ContextVar[McpRequest] = ContextVar("toolcore_mcp_request")


def _compact(message: dict[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class ResponseStream:
    """The response of one POST as the SDK sends it, with ``headers`` added to its start; an
    SSE response also carries what ``event`` adds."""

    def __init__(self, send: Any, headers: list[tuple[bytes, bytes]] | None = None) -> None:
        self._send = send
        self._headers = headers or []
        self._lock = asyncio.Lock()
        self.status: int | None = None
        self.sse = False
        self.open = False

    async def send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            headers = [*message.get("headers", []), *self._headers]
            message = {**message, "headers": headers}
            self.status = message["status"]
            self.sse = any(
                k.lower() == b"content-type" and v.startswith(SSE_CONTENT_TYPE) for k, v in headers
            )
            self.open = True
        elif kind == "http.response.body" and not message.get("more_body", False):
            self.open = False
        async with self._lock:
            await self._send(message)

    async def event(self, message: dict[str, Any]) -> bool:
        """Write a JSON-RPC ``message`` as one SSE event of this response; False when it cannot
        carry one (not SSE, not started, already ended, or the client went away)."""
        body = b"event: message\r\ndata: " + _compact(message) + b"\r\n\r\n"
        async with self._lock:
            if not (self.sse and self.open):
                return False
            try:
                await self._send({"type": "http.response.body", "body": body, "more_body": True})
            except Exception:  # noqa: BLE001 - the connection is gone: nothing more to carry
                logger.debug("MCP: an added event could not be sent", exc_info=True)
                self.open = False
                return False
        return True


def rpc_error(code: int, message: str, request_id: Any = None, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC error object (``id`` null when the request's is unknown)."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


async def answer(
    send: Any,
    status: int,
    body: dict[str, Any] | None = None,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """A whole HTTP answer: ``body`` as compact JSON (none for 202 and 204)."""
    content = b"" if body is None else _compact(body)
    head = list(headers or [])
    if body is not None:
        head.append((b"content-type", b"application/json"))
    head.append((b"content-length", str(len(content)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": content, "more_body": False})
