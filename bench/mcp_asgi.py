"""The daphne application of bench/mcp.py.

Toolcore's own application (``config.asgi``, unchanged, its embedded tool worker included) plus
two additions in this process only:

- Each settlement's commit is stamped: when the publishing collector hands a
  ``tool_call_response`` event to the channel layer (``publish.send_now``, called right after
  the settlement's transaction committed), ``<call id> <time.time()>`` is appended to the file
  ``$BENCH_MCP_STAMPS``. The settlement runs in this process (the embedded worker), so the
  stamp is the commit's, on the same wall clock as the bench's stdio server. The stored event is
  untouched.
- ``/bare/mcp/``: the floor of the MCP figures, a bare server of the official SDK (its lowlevel
  ``Server`` behind its ``StreamableHTTPSessionManager``, stateless and answering on SSE as
  Toolcore's endpoint does) with one tool, ``read``, that answers a fixed text at once: no
  authentication, no session row, no database, no tool call. What a ``tools/call`` costs the
  SDK on both ends over the same daphne.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from config.asgi import application as toolcore
from conversations.services import publish

BARE_PATHS = frozenset({"/bare/mcp", "/bare/mcp/"})
BARE_TEXT = "1\tthe bench's small file\n"

_stamps = open(os.environ["BENCH_MCP_STAMPS"], "a", buffering=1)  # noqa: SIM115 - process life
_send_now = publish.send_now


def _stamped_send_now(messages: list[tuple[str, dict[str, Any]]]) -> None:
    now = time.time()
    for _, message in messages:
        event = message.get("event") if message.get("type") == "conversation.event" else None
        if event and event.get("type") == "tool_call_response":
            _stamps.write(f"{event['toolCallId']} {now:.6f}\n")
    _send_now(messages)


publish.send_now = _stamped_send_now


async def _list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    return types.ListToolsResult(tools=[types.Tool(name="read", input_schema=schema)])


async def _call_tool(ctx: Any, params: Any) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=BARE_TEXT)])


BARE = Server("bare", version="1", on_list_tools=_list_tools, on_call_tool=_call_tool)
_manager: StreamableHTTPSessionManager | None = None
_started = asyncio.Event()


async def _hold(manager: StreamableHTTPSessionManager) -> None:
    async with manager.run():
        _started.set()
        await asyncio.Event().wait()


async def _bare(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The bare SDK server; its manager entered by the first request (daphne sends no
    lifespan events), as conversations/mcp/server.py does."""
    global _manager
    if _manager is None:
        _manager = StreamableHTTPSessionManager(
            app=BARE, stateless=True, json_response=False, security_settings=None
        )
        asyncio.get_running_loop().create_task(_hold(_manager))
    await _started.wait()
    await _manager.handle_request(scope, receive, send)


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http" and scope["path"] in BARE_PATHS:
        await _bare(scope, receive, send)
    else:
        await toolcore(scope, receive, send)
