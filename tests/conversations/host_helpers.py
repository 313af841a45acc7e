"""Helpers of the host tool port tests: ready host calls, the three requests, what a host can
observe (published messages), and a snapshot of everything a refused request must not change."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import secrets
import struct
import threading
import zlib
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

from conversations.models import Asset, ConversationEvent, ExecutionClaim, ToolActivity, ToolCall
from conversations.services.publish import (
    conversation_group,
    live_layer_alias,
    publisher,
    unpack,
)
from conversations.storage import conversation_dir
from tests.waits import wait_for

from .api_helpers import API, send
from .helpers import assistant_calls, new_conversation, open_turn

HOST_TOOL = "notes_lookup"


def ready_host_calls(owner, count: int = 1, tool: str = HOST_TOOL):
    """A conversation of ``owner`` with ``count`` ready calls of the host tool ``tool``."""
    conversation = new_conversation(owner)
    turn_id = open_turn(conversation)
    calls = [(tool, {"query": f"q{i}"}) for i in range(count)]
    call_ids = [str(c) for c in assistant_calls(conversation, turn_id, *calls).call_ids]
    assert set(ToolCall.objects.filter(pk__in=call_ids).values_list("state", flat=True)) == {
        "ready"
    }
    return conversation, turn_id, call_ids


def claim(client, tools=(HOST_TOOL,), worker: str = "host-1", **extra):
    return send(
        client, "post", f"{API}/host/claims", {"tools": list(tools), "worker": worker, **extra}
    )


def claim_one(client, call_id: str) -> dict[str, Any]:
    """Claim (through the API) and answer the claim of ``call_id``, the only ready call."""
    response = claim(client)
    assert response.status_code == 200, response.content
    (claimed,) = response.json()["claims"]
    assert claimed["toolCallId"] == call_id
    return claimed


def update(client, call_id: str, held: dict[str, Any], fields: dict[str, Any], **override):
    body = {"token": held["token"], "generation": held["generation"], "update": fields}
    return send(client, "post", f"{API}/tool-calls/{call_id}/updates", {**body, **override})


def settle(client, call_id: str, held: dict[str, Any], content, outcome="completed", **extra):
    body = {
        "token": held["token"],
        "generation": held["generation"],
        "outcome": outcome,
        "content": content,
        **extra,
    }
    return send(client, "post", f"{API}/tool-calls/{call_id}/settle", body)


def png(width: int = 2, height: int = 1, seed: int = 0) -> bytes:
    """A valid PNG (8-bit greyscale) of ``width`` × ``height`` pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(
        b"\x00" + bytes((seed + x + y) % 256 for x in range(width)) for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


# A JPEG's start (SOI, then an APP0 "JFIF" segment): the server checks the signature only.
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00\xff\xd9"


class Listener:
    """Joins a conversation's group on the layer of conversation groups, like a live client,
    and hears what is published from then on, until ``drain``. Drain it once; make a new
    listener for each stretch a test observes.

    The in-memory layer keeps what a channel was sent until it is received, in whatever event
    loop. A Redis pub/sub layer (the ``live`` one) keeps a channel's subscriptions per event
    loop, and each ``async_to_sync`` call runs in a loop of its own: there the listener listens
    from an event loop of its own, on a thread, from joining to draining.
    """

    def __init__(self, conversation_id: Any) -> None:
        publisher.drain()  # what was published before goes out before this listener joins
        self.group = conversation_group(conversation_id)
        self.layer = get_channel_layer(live_layer_alias())
        self.drained = False
        self.got: list[dict[str, Any]] = []
        self._thread: threading.Thread | None = None
        if isinstance(self.layer, InMemoryChannelLayer):
            self.channel = async_to_sync(self.layer.new_channel)()
            async_to_sync(self.layer.group_add)(self.group, self.channel)
            return
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._listen(),), daemon=True)
        self._thread.start()
        assert self._ready.wait(30), "the listener did not join its group"
        if self._failed is not None:
            raise self._failed

    async def _listen(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        try:
            channel = await self.layer.new_channel()
            await self.layer.group_add(self.group, channel)
        except BaseException as error:  # noqa: BLE001 - raised in the test's thread
            self._failed = error
            return
        finally:
            self._ready.set()
        receiving = asyncio.ensure_future(self._receive(channel))
        await self._stop.wait()
        receiving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await receiving
        await self.layer.group_discard(self.group, channel)

    async def _receive(self, channel: str) -> None:
        while True:
            self.got.extend(unpack(await self.layer.receive(channel)))

    def drain(self, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Every message published to the group before this call, batches unpacked.

        Once the publisher has handed every batch to the layer, a marker sent to the group
        arrives after all of them (the layer keeps the order of a group's messages): the drain
        ends at the marker, not after a quiet spell that a loaded machine could outlast.
        ``timeout`` bounds a hang only."""
        assert not self.drained, "drain a listener once; make a new one to listen again"
        self.drained = True
        assert publisher.drain(timeout), "the publisher kept batches it did not hand on"
        marker = {"type": "test.drained", "marker": secrets.token_hex(8)}
        if self._thread is None:
            async_to_sync(self.layer.group_send)(self.group, marker)
            return async_to_sync(self._drain_here)(marker, timeout)
        asyncio.run_coroutine_threadsafe(
            self.layer.group_send(self.group, marker), self._loop
        ).result(timeout)
        wait_for(lambda: marker in self.got, timeout=timeout, what="the listener's marker")
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
        return self.got[: self.got.index(marker)]

    async def _drain_here(self, marker: dict[str, Any], timeout: float) -> list[dict[str, Any]]:
        async with asyncio.timeout(timeout):
            while (message := await self.layer.receive(self.channel)) != marker:
                self.got.extend(unpack(message))
        return self.got

    def tool_updates(self, call_id: str) -> list[dict[str, Any]]:
        return [
            m["update"]
            for m in self.drain()
            if m["type"] == "tool.updated" and m["update"]["toolCallId"] == call_id
        ]


def snapshot(conversation) -> dict[str, Any]:
    """Everything of a conversation a refused host request must leave as it was."""
    cid = conversation.pk
    folder = conversation_dir(cid)
    files = {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }
    return {
        "events": list(
            ConversationEvent.objects.filter(conversation_id=cid)
            .order_by("sequence")
            .values_list("sequence", "type", "tool_call_id")
        ),
        "calls": list(
            ToolCall.objects.filter(conversation_id=cid)
            .order_by("id")
            .values_list("id", "state", "generation", "attempt")
        ),
        "claims": list(
            ExecutionClaim.objects.filter(call__conversation_id=cid)
            .order_by("call_id")
            .values_list("call_id", "token", "generation", "heartbeat_at", "expires_at")
        ),
        "activity": [
            (a.tool_call_id, a.rev, json.dumps(a.state_json), json.dumps(a.payload_json))
            + (a.raw_length, a.raw_sha1)
            for a in ToolActivity.objects.filter(conversation_id=cid).order_by("id")
        ],
        "assets": list(Asset.objects.filter(conversation_id=cid).values_list("id", "sha256")),
        "files": files,
    }
