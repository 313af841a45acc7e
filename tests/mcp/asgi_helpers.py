"""One request through the real ASGI application of ``config.asgi`` (the MCP endpoint, the SDK
behind it), its whole answer read back: the in-process MCP tests' and the metrics tests' way in."""

from __future__ import annotations

import asyncio
import json
from typing import Any

ACCEPT = "application/json, text/event-stream"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {"form": {}}},
        "clientInfo": {"name": "probe", "version": "0.9"},
    },
}


class Answer:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)

    def sse(self) -> list[Any]:
        """The JSON-RPC messages of an SSE body."""
        text = self.body.decode()
        return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


async def request(
    method: str = "POST",
    body: Any = None,
    *,
    token: str | None = None,
    session: str | None = None,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
    path: str = "/mcp/",
    query: str = "",
) -> Answer:
    """One request through ``config.asgi.application``; the whole answer (an SSE one to its
    end)."""
    from config.asgi import application

    head = {"host": "testserver", "accept": ACCEPT, "content-type": "application/json"}
    if token is not None:
        head["authorization"] = f"Bearer {token}"
    if session is not None:
        head["mcp-session-id"] = session
    head.update(headers or {})
    content = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": [(k.encode(), v.encode()) for k, v in head.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    given = False
    forever = asyncio.Event()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": content, "more_body": False}
        await forever.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await asyncio.wait_for(application(scope, receive, send), timeout=30)
    start = next(m for m in sent if m["type"] == "http.response.start")
    headers_out = {k.decode().lower(): v.decode() for k, v in start.get("headers", [])}
    data = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return Answer(start["status"], headers_out, data)
