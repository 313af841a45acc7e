"""Every core tool's handler, by tool name: what a worker runs (tools/runtime/base.py)."""

from __future__ import annotations

from .base import Handler
from .handlers import ask_user

HANDLERS: dict[str, Handler] = {
    "ask_user": ask_user,
}


def handler_for(name: str) -> Handler | None:
    return HANDLERS.get(name)
