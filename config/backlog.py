"""How many bytes a websocket's client has not taken yet: the server's side of backpressure.

ASGI has no flow control for websockets, and daphne (Twisted) buffers everything an application
sends to a socket that does not read, without limit. ``TransportBacklog`` wraps the websocket
application: under daphne it finds the connection's Twisted transport (daphne's ``send`` is
``partial(server.handle_reply, protocol)``) and puts a probe in
``scope["extensions"]["toolcore.backlog"]``: a callable answering the bytes written to the
transport and not yet handed to the kernel. The consumers stop sending durable frames and hold
ephemeral ones while it is high (docs/realtime.md, "Backpressure").

Under daphne it also caps what one client frame may carry at ``MAX_FRAME_BYTES`` (1 MiB) in
autobahn, the websocket engine below daphne: a larger frame or message fails the connection
with code 1009 as soon as its header announces it, before its body is read into memory (the
consumers check the size again, for servers without this cap).

And it drops a frame sent once the client has started closing. Daphne drops those itself once
the TCP connection is gone, but before that (the client's close frame read, the close reply
still queued behind frames the client has not taken) autobahn raises ``Disconnected``: the
application would die there without its disconnect handler, leaving its ticker task and its
channel-layer groups behind, and log the error of a client that merely went away.

Under another server, or in tests that call the application directly, there is no probe, and
the consumers behave as if every socket kept up (uvicorn, for one, applies backpressure itself:
its ``send`` waits while the socket's buffer is full).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from conversations.realtime.base import MAX_FRAME_BYTES

BACKLOG_EXTENSION = "toolcore.backlog"


def _buffered(transport: Any) -> int:
    """Bytes a Twisted ``FileDescriptor`` holds for writing (its documented buffers)."""
    data = getattr(transport, "dataBuffer", None)
    if data is None:
        inner = getattr(transport, "transport", None)  # a wrapper (TLS): the socket below
        return _buffered(inner) if inner is not None and inner is not transport else 0
    return len(data) - getattr(transport, "offset", 0) + getattr(transport, "_tempDataLen", 0)


def daphne_protocol(send: Any) -> Any:
    """The Twisted protocol behind daphne's ``send``; None under another server."""
    if not isinstance(send, partial) or not send.args:
        return None
    protocol = send.args[0]
    return protocol if hasattr(protocol, "transport") else None


def backlog_probe(protocol: Any) -> Callable[[], int]:
    """A probe of the bytes the connection's transport holds for writing."""

    def probe() -> int:
        transport = protocol.transport
        return 0 if transport is None else _buffered(transport)

    return probe


def closing(protocol: Any) -> bool:
    """Whether the client has started closing the connection (autobahn's closing or closed
    state): a frame sent now would raise."""
    state = getattr(protocol, "state", None)
    return state is not None and state in (
        getattr(protocol, "STATE_CLOSING", None),
        getattr(protocol, "STATE_CLOSED", None),
    )


def _dropping_when_closing(send: Any, protocol: Any) -> Callable[[dict[str, Any]], Any]:
    async def guarded(message: dict[str, Any]) -> Any:
        if message.get("type") == "websocket.send" and closing(protocol):
            return None  # what daphne does once the connection is gone
        return await send(message)

    return guarded


class TransportBacklog:
    """ASGI middleware adding the backlog probe to websocket scopes, capping client frames and
    dropping frames sent to a closing connection (see the module)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        protocol = daphne_protocol(send)
        if protocol is not None:
            if hasattr(protocol, "maxMessagePayloadSize"):  # autobahn's per-connection limits
                protocol.maxMessagePayloadSize = MAX_FRAME_BYTES
                protocol.maxFramePayloadSize = MAX_FRAME_BYTES
                protocol.failByDrop = False  # close with 1009, not a dropped connection
            extensions = {
                **(scope.get("extensions") or {}),
                BACKLOG_EXTENSION: backlog_probe(protocol),
            }
            scope = {**scope, "extensions": extensions}
            send = _dropping_when_closing(send, protocol)
        return await self.app(scope, receive, send)
