"""The core handlers the workers run, by tool name (``async def handler(ctx) -> result``).

The path tools are here; ``bash``, ``async_bash_logs``, ``async_bash_kill`` and ``ask_user``
join as they are built. A tool without a handler here is not run by the workers (a host tool,
or one still run inline by ``handlers.py``).
"""

from __future__ import annotations

from .base import Handler
from .files.find import find
from .files.grep import grep
from .files.ls import ls
from .files.read import read

HANDLERS: dict[str, Handler] = {
    "read": read,
    "grep": grep,
    "find": find,
    "ls": ls,
}


def handler_for(name: str) -> Handler | None:
    """The handler of the core tool ``name``, or None when the workers do not run it."""
    return HANDLERS.get(name)
