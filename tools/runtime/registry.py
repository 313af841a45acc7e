"""The core handlers the workers run, by tool name (``async def handler(ctx) -> result``;
tools/runtime/base.py).

A tool without a handler here is not run by the workers: a host tool, claimed by its host
through the host tool port.
"""

from __future__ import annotations

from .async_runs.handlers import async_bash_kill, async_bash_logs
from .base import Handler
from .bash import bash
from .files.find import find
from .files.grep import grep
from .files.ls import ls
from .files.read import read
from .handlers import ask_user

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


def handler_for(name: str) -> Handler | None:
    """The handler of the core tool ``name``, or None when the workers do not run it."""
    return HANDLERS.get(name)
