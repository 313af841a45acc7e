"""Connecting to one MCP server with the official SDK (``mcp``): what a connection needs
(``ServerConfig``), the connection itself (``mcp_connect``), the listing of its tools
(``tools_list``), and a listing on a connection of its own (``tools_list_once``: ``mcp_add``,
the admin).

A stdio server is started by the SDK's ``stdio_client``, which runs the command in a new session
and process group (``start_new_session``) with stdin and stdout as the protocol's pipes; its
environment is the SDK's few safe variables (``HOME``, ``LOGNAME``, ``PATH``, ``SHELL``,
``TERM``, ``USER``) and the server's own, nothing else of the worker's; its stderr is the
worker's. Closing the connection closes its stdin, waits 2 s, then sends SIGTERM to the group
and SIGKILL 2 s later.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import sys
import threading
from collections.abc import AsyncIterator
from typing import Any, TextIO

import httpx
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, Implementation

from projections.units import cut_text

from .addresses import AddressRefused, url_address_check
from .server_config import ServerConfig

# The handshake and the listing of the tools must answer within this many seconds.
CONNECT_SECONDS = 30.0
# A listing stops after this many pages (a server whose cursor never ends cannot hang it).
LIST_PAGES_MAX = 100
CLIENT_NAME = "toolcore"


def _errlog() -> TextIO:
    """Where a stdio server's stderr goes: the worker's own, when it is a real file."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    return sys.stderr


@contextlib.asynccontextmanager
async def mcp_connect(
    config: ServerConfig, *, message_handler: Any = None
) -> AsyncIterator[Client]:
    """A connected ``Client`` (handshake done: ``server/discover``, else ``initialize``)."""
    options: dict[str, Any] = {
        "message_handler": message_handler,
        "read_timeout_seconds": CONNECT_SECONDS,
        "cache": None,  # every listing asks the server
        "client_info": _client_info(),
    }
    if config.transport == "stdio":
        params = StdioServerParameters(
            command=config.command, args=list(config.arguments), env=dict(config.environment)
        )
        async with Client(stdio_client(params, errlog=_errlog()), **options) as client:
            yield client
        return
    await asyncio.to_thread(url_address_check, config.url)  # again: a name may move
    async with create_mcp_http_client(headers=dict(config.headers)) as http:
        transport = streamable_http_client(config.url, http_client=http)
        async with Client(transport, **options) as client:
            yield client


def _client_info() -> Implementation:
    return Implementation(name=CLIENT_NAME, version="1")


def error_text(exc: BaseException, *, quoted: bool = True) -> str:
    """What went wrong, in one line a person can act on: the first error inside the SDK's
    exception groups, named by its type (and the server's message for a protocol error).
    ``quoted`` False names it without a word of what the other side answered (an HTTP URL's
    answer at registration: the URL may be any service's)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError) and exc.error.code == CONNECTION_CLOSED:
        return "the connection closed (a stdio server's process exited: its stderr says why)"
    if isinstance(exc, MCPError):
        if not quoted:
            return f"the server answered an error ({exc.error.code})"
        return cut_text(f"the server answered an error ({exc.error.code}): {exc.error.message}")
    if isinstance(exc, TimeoutError):
        return "it did not answer in time"
    if isinstance(exc, AddressRefused):
        return str(exc)
    if isinstance(exc, httpx.HTTPStatusError) and not quoted:
        return f"it answered HTTP {exc.response.status_code}, not an MCP response"
    if isinstance(exc, httpx.TransportError) and not quoted:
        return f"it could not be reached ({type(exc).__name__})"
    if not quoted:
        return f"its answer was not an MCP response ({type(exc).__name__})"
    detail = str(exc).strip()
    return cut_text(f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__)


def tool_row(tool: Any) -> dict[str, Any]:
    """A listed tool as plain data: name, description, input schema, annotations."""
    annotations = (
        tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else {}
    )
    return {
        "name": tool.name,
        "description": tool.description or "",
        "inputSchema": tool.input_schema or {"type": "object"},
        "annotations": annotations,
    }


async def tools_list(client: Client) -> list[dict[str, Any]]:
    """Every tool the server lists, page after page (at most ``LIST_PAGES_MAX``)."""
    rows: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(LIST_PAGES_MAX):
        page = await client.list_tools(cursor=cursor, cache_mode="bypass")
        rows.extend(tool_row(tool) for tool in page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return rows


def tools_list_once(
    config: ServerConfig, *, timeout: float = CONNECT_SECONDS
) -> list[dict[str, Any]]:
    """Connect, list the tools, disconnect: on a thread and an event loop of its own, so any
    caller (a command, an admin view, a test already in a loop) can wait for it."""
    outcome: dict[str, Any] = {}

    async def listing() -> list[dict[str, Any]]:
        async with asyncio.timeout(timeout), mcp_connect(config) as client:
            return await tools_list(client)

    def run() -> None:
        try:
            outcome["tools"] = asyncio.run(listing())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            outcome["error"] = exc

    thread = threading.Thread(target=run, name=f"mcp-list-{config.name}", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["tools"]
