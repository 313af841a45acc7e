"""Channel layers for tests: the in-memory layer made as strict as Redis, and a lossy one.

``JsonInMemoryChannelLayer`` is the suite's in-memory layer (tests/settings.py): every message
must survive a JSON round trip unchanged, as it must to cross Redis (msgpack carries JSON
primitives only; a tuple would come back a list, a UUID not at all). ``LossyChannelLayer``
drops every third group message and swaps the others in pairs: the consumers must still deliver
every durable sequence exactly once, in order.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from channels.layers import InMemoryChannelLayer


def json_only(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` after a JSON round trip; an error when the trip would change it."""
    text = json.dumps(message, allow_nan=False)  # TypeError for anything not JSON
    back = json.loads(text)
    if back != message:
        raise TypeError(f"message does not survive JSON unchanged: {text[:200]}")
    return back


class JsonInMemoryChannelLayer(InMemoryChannelLayer):
    async def send(self, channel: str, message: dict[str, Any]) -> None:
        await super().send(channel, json_only(message))


class LossyChannelLayer(JsonInMemoryChannelLayer):
    """Group messages: every third dropped, the others delivered in swapped pairs (a lone one
    waits at most ``HOLD_SECONDS`` for its partner)."""

    HOLD_SECONDS = 0.05

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.count = 0
        self.dropped = 0
        self.held: tuple[str, dict[str, Any]] | None = None
        self.timer: asyncio.TimerHandle | None = None

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.count += 1
        if self.count % 3 == 0:
            self.dropped += 1
            return
        if self.held is None:
            self.held = (group, message)
            loop = asyncio.get_running_loop()
            self.timer = loop.call_later(
                self.HOLD_SECONDS, lambda: loop.create_task(self._release())
            )
            return
        earlier = self.held
        self.held = None
        if self.timer is not None:
            self.timer.cancel()
        await super().group_send(group, message)
        await super().group_send(*earlier)

    async def _release(self) -> None:
        if self.held is not None:
            group, message = self.held
            self.held = None
            await super().group_send(group, message)


class DeafChannelLayer(JsonInMemoryChannelLayer):
    """Loses every group message: only the database can tell a subscriber what happened."""

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        return None
