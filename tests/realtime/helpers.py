"""Websocket clients of the real ASGI application (``config.asgi``), in the test process: a
connected socket (``connect``, ``token_for``), its frames (``receive``, ``send``,
``frames_until``, ``sequences``), a conversation to watch and messages appended to it
(``conversation_with_turn``, ``say``, ``published``); and what a channel of the channel layer
received (``received``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator

from config.asgi import application
from conversations.api.auth import token_create
from conversations.services.publish import publisher, unpack
from tests.conversations.helpers import assistant_calls, new_conversation, open_turn

TIMEOUT = 5


async def token_for(user, **kwargs) -> str:
    _, secret = await sync_to_async(token_create)(user=user, **kwargs)
    return secret


async def connect(
    token: str | None = None,
    *,
    path: str = "/ws/conversations/",
    headers: list[tuple[bytes, bytes]] | None = None,
    app: Any = application,
) -> WebsocketCommunicator:
    """A connected socket; for ``/ws/conversations/`` its ``hello`` already read."""
    sent = [(b"host", b"testserver")]
    if token is not None:
        sent.append((b"authorization", f"Bearer {token}".encode()))
    sent += headers or []
    socket = WebsocketCommunicator(app, path, headers=sent)
    connected, _ = await socket.connect(timeout=TIMEOUT)
    assert connected
    return socket


async def hello(socket: WebsocketCommunicator) -> dict[str, Any]:
    frame = await receive(socket)
    assert frame == {"type": "hello", "protocolVersion": 1}
    return frame


async def receive(socket: WebsocketCommunicator, timeout: float = TIMEOUT) -> dict[str, Any]:
    return json.loads(await socket.receive_from(timeout=timeout))


async def send(socket: WebsocketCommunicator, frame: dict[str, Any]) -> None:
    await socket.send_to(text_data=json.dumps(frame))


async def frames_until(socket, predicate, timeout: float = TIMEOUT) -> list[dict[str, Any]]:
    """Frames received until one satisfies ``predicate`` (included)."""
    out = []
    while True:
        frame = await receive(socket, timeout)
        out.append(frame)
        if predicate(frame):
            return out


def sequences(frames: list[dict[str, Any]]) -> list[int]:
    """The durable sequences the frames carry, in the order received."""
    out: list[int] = []
    for frame in frames:
        if frame["type"] == "replay":
            got = [e["sequence"] for e in frame["events"]]
            assert got == list(range(frame["from"] + 1, frame["to"] + 1)), frame
            out += got
        elif frame["type"] == "conversation.event":
            out.append(frame["event"]["sequence"])
    return out


@sync_to_async
def conversation_with_turn(user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    conversation.refresh_from_db()
    return conversation, turn_id


@sync_to_async
def say(conversation, turn_id: str, count: int = 1, text: str = "thinking") -> list[int]:
    """Append ``count`` assistant text messages (one event each); their sequences."""
    out = []
    for _ in range(count):
        posted = assistant_calls(conversation, turn_id, text=text)
        out.append(posted.body["event"]["sequence"])
    return out


async def published() -> None:
    """Wait until everything committed so far went out (the Redis publisher lingers 20 ms)."""
    await sync_to_async(publisher.drain, thread_sensitive=False)()


def received(layer, channel: str, timeout: float = 0.3) -> list[dict[str, Any]]:
    """Every message ``channel`` of ``layer`` received until none comes for ``timeout`` seconds,
    batches unpacked (for a test's own channel, added to a group)."""

    async def drain() -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        while True:
            try:
                got += unpack(await asyncio.wait_for(layer.receive(channel), timeout=timeout))
            except TimeoutError:
                return got

    return async_to_sync(drain)()
