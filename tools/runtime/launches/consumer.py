"""``/ws/workbench/``: the user's launches, live (docs/realtime.md). Routed by ``config/routing.py``
beside the core's websockets, on the core's consumer base (credentials re-checked, released
however the socket ends)."""

from __future__ import annotations

import logging
from typing import Any

from conversations.api.outages import CLOSE_TRY_AGAIN_LATER, OUTAGES, outage_noted
from conversations.detached import socket_database
from conversations.realtime.base import (
    CLOSE_TOO_BIG,
    CLOSE_UNAUTHENTICATED,
    ReleasedConsumer,
    frame_text,
    group_discard,
    too_big,
)
from conversations.realtime.ws_auth import credential_watch
from conversations.services.publish import unpack
from tools.models import Launch

from .services import launch_wire, workbench_group

logger = logging.getLogger(__name__)


class WorkbenchConsumer(ReleasedConsumer):
    """``/ws/workbench/``: a snapshot of the user's launches, then ``launch.changed`` and
    ``launch.removed``. No replay: a reconnecting client gets a new snapshot."""

    endpoint = "workbench"

    async def connect(self) -> None:
        self.user = self.scope.get("user")
        self.joined = False
        await self.accept()
        if self.user is None or not self.user.is_authenticated:
            await self.refuse()
            return
        try:
            await self.channel_layer.group_add(workbench_group(self.user.pk), self.channel_name)
            self.joined = True
            launches = await self._launches()
        except OUTAGES as exc:
            outage_noted(exc, "websocket")
            # No snapshot can be sent: the client connects again later.
            logger.warning("workbench socket closed: %s", exc)
            await self.close(code=CLOSE_TRY_AGAIN_LATER)
            return
        await self.send(frame_text({"type": "snapshot", "launches": launches}))
        credential_watch().add(self, self.scope.get("auth", {}), self.user.pk, self._revoked)

    async def _revoked(self) -> None:
        await self.close(code=CLOSE_UNAUTHENTICATED)

    @socket_database
    def _launches(self) -> list[dict[str, Any]]:
        rows = Launch.objects.filter(owner_id=self.user.pk).order_by("-created_at")[:100]
        return [launch_wire(launch) for launch in rows]

    async def release(self) -> None:
        await super().release()
        if getattr(self, "joined", False):
            self.joined = False
            await group_discard(
                self.channel_layer, workbench_group(self.user.pk), self.channel_name
            )

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        raw = text_data if text_data is not None else bytes_data or b""
        if too_big(raw):
            await self.close(code=CLOSE_TOO_BIG)
            return
        await self.send(
            frame_text(
                {
                    "type": "error",
                    "code": "unknown_type",
                    "message": "The workbench socket takes no frames.",
                }
            )
        )

    async def dispatch(self, message: dict[str, Any]) -> None:
        kind = message.get("type", "")
        if kind.startswith("websocket."):
            await super().dispatch(message)
            return
        for item in unpack(message):
            if item.get("type") in ("launch.changed", "launch.removed"):
                await self.send(frame_text(item))
