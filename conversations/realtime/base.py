"""What both websockets share: the limits and close codes of the protocol (docs/realtime.md), a
frame's text, and a consumer that gives back what its socket holds however its instance ends.
"""

from __future__ import annotations

import logging
from typing import Any

from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncWebsocketConsumer

from .. import metrics
from ..api.outages import OUTAGES, outage_noted
from ..fields import dumps
from .ws_auth import credential_watch

logger = logging.getLogger(__name__)

MAX_FRAME_BYTES = 1024 * 1024  # a client frame above this closes the socket with 1009
CLOSE_UNAUTHENTICATED = 4401
# A failed bearer token from an address locked out for too many of them
# (conversations/api/throttle.py); the close reason says until when.
CLOSE_THROTTLED = 4429
CLOSE_TOO_BIG = 1009


def too_big(raw: str | bytes) -> bool:
    """Whether a client frame is over ``MAX_FRAME_BYTES`` of UTF-8 (a text frame's length in
    characters is not its size: a character takes up to 4 bytes)."""
    if len(raw) <= MAX_FRAME_BYTES // 4:
        return False  # cannot be over, whatever its characters
    return (
        len(raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw) > MAX_FRAME_BYTES
    )


def frame_text(value: dict[str, Any]) -> str:
    return dumps(value)


class ReleasedConsumer(AsyncWebsocketConsumer):
    """A consumer whose ``release`` runs however its instance ends: after ``disconnect``, and
    also when the server cancels it. daphne cancels an instance still running
    ``application_close_timeout`` (10 s) after its socket closed — under load, one whose handler
    waited that long for the busy database thread, so its ``websocket.disconnect`` never ran —
    and without this its ticker, its entry in the credential watch and its group memberships
    lived on for a dead socket (found by tests/load/).

    It also counts itself in ``toolcore_websockets`` (by ``endpoint``) from its ``accept`` until
    it is released, once however often ``release`` runs."""

    endpoint = "other"  # the label of this socket's endpoint in toolcore_websockets
    _counted = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.release()
            await self._channel_discard()

    async def _channel_discard(self) -> None:
        """Tell the channel layer this instance's channel is gone, when it can be told (the Redis
        layers, ``channel_discard``): Channels only stops receiving, which leaves a layer that
        keeps per-channel state holding it when the last receive had completed (a live message
        and the disconnect at once), one per such session (found by tests/load/)."""
        discard = getattr(self.channel_layer, "channel_discard", None)
        name = getattr(self, "channel_name", None)
        if discard is not None and name:
            try:
                await discard(name)
            except Exception as exc:  # noqa: BLE001 - Redis away: its reconnect forgets it anyway
                outage_noted(exc, "websocket")
                logger.warning("could not give up channel %s", name, exc_info=True)

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Channels' dispatch without its ``close_old_connections`` before every message: that
        is a hop to the process's one thread-sensitive thread, where nothing here keeps a
        connection (every database call gives its own back, ``socket_database``)."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def accept(self, subprotocol: str | None = None, headers: Any = None) -> None:
        await super().accept(subprotocol, headers)
        if not self._counted:
            self._counted = True
            metrics.WEBSOCKETS.labels(self.endpoint).inc()

    async def disconnect(self, code: int) -> None:
        await self.release()

    async def release(self) -> None:
        """Give back what the socket holds; idempotent (it may run twice)."""
        credential_watch().discard(self)
        if self._counted:
            self._counted = False
            metrics.WEBSOCKETS.labels(self.endpoint).dec()

    async def refuse(self) -> None:
        """Close a socket without valid credentials: 4401; or, when its failed token's address
        is locked out, an ``error`` frame saying until when, then 4429."""
        locked = self.scope.get("auth", {}).get("locked")
        if not locked:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        frame = {"type": "error", "code": "throttled", **locked}
        await self.send(frame_text(frame))
        await self.close(code=CLOSE_THROTTLED)


async def group_discard(layer: Any, group: str, channel: str) -> None:
    """Leave ``group``; a channel layer that is away is let be (Redis forgets a connection's
    subscriptions with it, and group memberships expire)."""
    try:
        await layer.group_discard(group, channel)
    except OUTAGES as exc:
        outage_noted(exc, "websocket")
        logger.warning("could not leave %s: %s", group, exc)
