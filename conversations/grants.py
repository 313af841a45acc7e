"""What a user may do beyond owning a thing: run programs of their own choosing.

Typing a ``!command``, approving a tool that runs programs and starting a launch all need the
Django permission ``tools.run_commands``. One check, so that every path (REST, websocket, admin,
web page) refuses alike, with the same 403 ``forbidden``.
"""

from __future__ import annotations

from typing import Any

from .errors import Forbidden

RUN_COMMANDS = "tools.run_commands"


def may_run_commands(user: Any) -> bool:
    """Whether ``user`` holds ``tools.run_commands`` (directly, by a group, or as superuser)."""
    return bool(user.has_perm(RUN_COMMANDS))


def run_commands_require(*, user: Any, doing: str) -> None:
    """``Forbidden`` ("<doing> needs the permission tools.run_commands.") unless ``user`` may
    run commands. Called before anything is written."""
    if not may_run_commands(user):
        raise Forbidden(f"{doing} needs the permission {RUN_COMMANDS}.")
