"""The SDK's side: Toolcore's lowlevel ``Server`` (``tools/list``, ``tools/call``) behind the
SDK's ``StreamableHTTPSessionManager`` in stateless mode, run once per event loop.

Stateless: the manager makes a fresh transport for each request and keeps nothing between them,
so no request depends on the process that served the one before (``transport.py`` keeps the
sessions in the database). The manager's ``run()`` holds the task group its transports run in
and must be entered once before the first request. daphne sends no ASGI lifespan events, so it
is entered lazily, by the first request of each event loop (daphne has one; each in-process test
its own), in a task that holds it for the loop's life.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from .calls import call_tool, on_database
from .stream import current
from .tools import tools_list

INSTRUCTIONS = (
    "Toolcore runs these tools in the workspace of one conversation, under its permission "
    "rules: a command no rule allows waits for a person's approval (progress notifications say "
    "where), and every call is recorded in the conversation's event log. A call that outlives "
    "this client's wait goes on; its structuredContent and progress messages give its "
    "toolCallId, which GET /api/v1/tool-calls/{id} reads later."
)


async def _list_tools(ctx: Any, params: Any) -> Any:
    return await on_database(tools_list)(current.get().session.user_id)


SERVER: Server[Any] = Server(
    "toolcore",
    version="1",
    title="Toolcore",
    instructions=INSTRUCTIONS,
    on_list_tools=_list_tools,
    on_call_tool=call_tool,
)


@dataclass
class _Running:
    manager: StreamableHTTPSessionManager
    started: asyncio.Event
    task: asyncio.Task | None = None


_running: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Running] = (
    weakref.WeakKeyDictionary()
)


async def _hold(running: _Running) -> None:
    try:
        async with running.manager.run():
            running.started.set()
            await asyncio.Event().wait()  # for the loop's life
    finally:
        running.started.set()  # a manager that failed to start must not leave waiters hanging


async def session_manager() -> StreamableHTTPSessionManager:
    """The running manager of this event loop, started by its first caller."""
    loop = asyncio.get_running_loop()
    running = _running.get(loop)
    if running is None:
        manager = StreamableHTTPSessionManager(
            app=SERVER,
            stateless=True,
            json_response=False,  # SSE: a waiting call's progress and elicitation need a stream
            security_settings=None,  # hosts and origins are checked before (transport.py)
            max_request_body_size=settings.TOOLCORE_MAX_BODY,
        )
        running = _running[loop] = _Running(manager, asyncio.Event())
        running.task = loop.create_task(_hold(running), name="toolcore-mcp-sdk")
    await running.started.wait()
    if running.task is not None and running.task.done():
        del _running[loop]  # the next request tries again
        raise RuntimeError("The MCP session manager stopped.")
    return running.manager
