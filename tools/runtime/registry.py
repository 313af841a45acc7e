"""The core handlers the workers run, by tool name (``async def handler(ctx) -> result``;
tools/runtime/base.py), and the families of tools one handler runs whatever their name (the
MCP servers' tools, ``FAMILIES``).

A tool without a handler here is not run by the workers: a host tool, claimed by its host
through the host tool port.
"""

from __future__ import annotations

from .async_runs.handlers import async_bash_kill, async_bash_logs
from .base import Handler, HandlerFamily
from .bash import bash
from .files.find import find
from .files.grep import grep
from .files.ls import ls
from .files.read import read
from .handlers import ask_user
from .mcp import handlers as mcp

HANDLERS: dict[str, Handler] = {
    "bash": bash,
    "read": read,
    "grep": grep,
    "find": find,
    "ls": ls,
    "async_bash_logs": async_bash_logs,
    "async_bash_kill": async_bash_kill,
    "ask_user": ask_user,
}


# The tools of the MCP servers Toolcore is a client of (docs/mcp.md).
FAMILIES: tuple[HandlerFamily, ...] = (
    HandlerFamily(prefix="mcp__", claimable=mcp.claimable, handler=mcp.mcp_call),
)


def handler_for(name: str) -> Handler | None:
    """The handler of the core tool ``name``, or None when it is not a core tool."""
    return HANDLERS.get(name)
