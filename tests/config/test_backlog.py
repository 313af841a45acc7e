"""``config.backlog`` with stand-ins for daphne's connection (the real one: test_e2e_daphne.py)."""

from __future__ import annotations

from functools import partial

from config.backlog import BACKLOG_EXTENSION, TransportBacklog


class _Transport:
    """What a Twisted ``FileDescriptor`` holds for writing."""

    def __init__(self) -> None:
        self.dataBuffer = b"x" * 100
        self.offset = 30
        self._tempDataLen = 5


class _Protocol:
    """Autobahn's states, as daphne's websocket protocol has them."""

    STATE_CLOSED, STATE_CONNECTING, STATE_CLOSING, STATE_OPEN = 0, 1, 2, 3

    def __init__(self) -> None:
        self.transport = _Transport()
        self.state = self.STATE_OPEN
        self.sent: list[dict] = []

    async def handle_reply(self, protocol, message):  # daphne's Server.handle_reply
        if message["type"] == "websocket.send" and protocol.state != protocol.STATE_OPEN:
            raise RuntimeError("Attempt to send on a closed protocol")  # autobahn's Disconnected
        protocol.sent.append(message)


async def _run(send):
    seen = {}

    async def app(scope, receive, send):
        seen["probe"] = scope.get("extensions", {}).get(BACKLOG_EXTENSION)
        seen["send"] = send

    await TransportBacklog(app)({"type": "websocket", "extensions": {}}, None, send)
    return seen["probe"], seen["send"]


async def test_under_daphne_the_probe_reads_the_transports_buffers():
    protocol = _Protocol()
    probe, _ = await _run(partial(protocol.handle_reply, protocol))
    assert probe() == 100 - 30 + 5
    protocol.transport = None  # the connection is gone
    assert probe() == 0


async def test_a_frame_sent_while_the_client_closes_is_dropped_not_raised():
    protocol = _Protocol()
    _, send = await _run(partial(protocol.handle_reply, protocol))
    await send({"type": "websocket.send", "text": "one"})
    for state in (protocol.STATE_CLOSING, protocol.STATE_CLOSED):
        protocol.state = state
        await send({"type": "websocket.send", "text": "dropped"})
    await send({"type": "websocket.close", "code": 1000})  # daphne ignores it when closing
    assert [m.get("text") for m in protocol.sent] == ["one", None]


async def test_under_another_server_nothing_changes():
    async def send(message):
        pass

    probe, passed = await _run(send)
    assert probe is None
    assert passed is send
