"""The daphne application of bench/realtime.py's fan-out and memory benches.

Toolcore's own application (``config.asgi``, unchanged) plus ``/ws/bare/``: the baseline, a
bare Channels consumer served by the same daphne, listening on the channel layer the product
publishes conversation groups to (``publish.live_layer_alias()``: the ``live`` pub/sub layer with
Redis, the default one without), as ``ConversationConsumer`` does.

One addition for the fan-out's latency, in this process only: each ``conversation.event`` that
the publishing collector hands to the channel layer carries ``committedAt`` (``time.time()``
when ``publish.send_now`` is called, right after the transaction committed), so a client on the
same machine measures commit → receipt to the microsecond. The stored event is untouched.
"""

from __future__ import annotations

import json
import time
from typing import Any

from channels.generic.websocket import AsyncWebsocketConsumer

from config.asgi import application as toolcore
from conversations.services import publish

_send_now = publish.send_now


def _stamped_send_now(messages: list[tuple[str, dict[str, Any]]]) -> None:
    now = time.time()
    for _, message in messages:
        if message.get("type") == "conversation.event":
            message["event"]["committedAt"] = now
    _send_now(messages)


publish.send_now = _stamped_send_now


class BareConsumer(AsyncWebsocketConsumer):
    """Forwards every group message as text, nothing else: no authentication, no sequence
    bookkeeping, no backpressure. ``{"type": "subscribe", "conversationId"}`` joins the
    conversation's group and answers ``{"type": "subscribed"}``.

    Like ``ConversationConsumer`` it unpacks the publisher's batches and handles group messages
    in its own ``dispatch``, so it skips the database-connection clean-up that channels' stock
    ``dispatch`` runs before every handler (~250 µs a message, a thread hop): the fastest a
    Channels consumer forwards, the baseline to beat."""

    @property
    def channel_layer_alias(self) -> str:  # type: ignore[override]
        """The layer of conversation groups, where the product publishes: on the default layer
        a Redis bare consumer heard nothing (its groups are on ``live``)."""
        return publish.live_layer_alias()

    async def connect(self) -> None:
        self.joined: list[str] = []
        await self.accept()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        frame = json.loads(text_data or "{}")
        group = publish.conversation_group(frame["conversationId"])
        await self.channel_layer.group_add(group, self.channel_name)
        self.joined.append(group)
        await self.send(
            json.dumps({"type": "subscribed", "conversationId": frame["conversationId"]})
        )

    async def disconnect(self, code: int) -> None:
        for group in self.joined:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def dispatch(self, message: dict[str, Any]) -> None:
        if message.get("type", "").startswith("websocket."):
            await super().dispatch(message)
            return
        for item in publish.unpack(message):
            await self.send(json.dumps(item, ensure_ascii=False, separators=(",", ":")))


_bare = BareConsumer.as_asgi()


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "websocket" and scope["path"] == "/ws/bare/":
        await _bare(scope, receive, send)
    else:
        await toolcore(scope, receive, send)
