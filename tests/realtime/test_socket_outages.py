"""Sockets when the database is away: an ``error`` frame with the code ``unavailable`` (the
socket stays open and the frame may be sent again), or, where no frame can be answered yet, a
close with 1013 ("try again later"); never a consumer that crashes.

The outage is a real ``OperationalError`` raised once from a patched function (fault injection:
a database that fails at one precise step of a socket's life cannot be produced on demand)."""

from __future__ import annotations

import pytest
from django.db import OperationalError

from conversations.api.outages import CLOSE_TRY_AGAIN_LATER
from conversations.realtime import conversation as conversation_socket
from conversations.realtime import ws_auth
from tools.runtime.launches.consumer import WorkbenchConsumer

from .helpers import connect, conversation_with_turn, hello, receive, send, token_for
from .test_resolve_and_workbench import ALLOW, awaiting_bash

pytestmark = pytest.mark.django_db(transaction=True)

OUTAGE = OperationalError("terminating connection due to administrator command")


def _failing_once(real):
    failed = []

    def once(*args, **kwargs):
        if not failed:
            failed.append(True)
            raise OUTAGE
        return real(*args, **kwargs)

    return once


async def test_a_subscription_that_meets_an_outage_is_refused_and_may_be_sent_again(
    user, monkeypatch
):
    monkeypatch.setattr(
        conversation_socket, "snapshot_read", _failing_once(conversation_socket.snapshot_read)
    )
    conversation, _ = await conversation_with_turn(user)
    cid = str(conversation.pk)
    socket = await connect(await token_for(user))
    await hello(socket)
    subscribe = {"type": "subscribe", "conversationId": cid, "after": None}
    await send(socket, subscribe)
    refused = await receive(socket)
    assert refused == {
        "type": "error",
        "code": "unavailable",
        "message": "The database is unavailable: nothing was changed; try again shortly.",
        "conversationId": cid,
    }
    await send(socket, subscribe)  # the same frame again: served
    snapshot = await receive(socket)
    assert (snapshot["type"], snapshot["reason"]) == ("snapshot", "initial")
    assert snapshot["snapshot"]["lastSequence"] == conversation.last_sequence
    await socket.disconnect()


async def test_a_resolution_that_meets_an_outage_records_nothing_and_may_be_sent_again(
    user, monkeypatch
):
    call_id = await awaiting_bash(user)
    monkeypatch.setattr(
        conversation_socket, "call_resolve", _failing_once(conversation_socket.call_resolve)
    )
    socket = await connect(await token_for(user))
    await hello(socket)
    frame = {"type": "resolve", "toolCallId": call_id, "requestId": "r1", **ALLOW}
    await send(socket, frame)
    refused = await receive(socket)
    assert (refused["type"], refused["code"]) == ("error", "unavailable")
    assert (refused["toolCallId"], refused["requestId"]) == (call_id, "r1")
    await send(socket, frame)
    assert (await receive(socket))["type"] == "resolved"
    await socket.disconnect()


async def test_a_handshake_that_cannot_authenticate_is_closed_1013(user, monkeypatch):
    async def authenticate(scope):
        raise OUTAGE

    monkeypatch.setattr(ws_auth, "_authenticate", authenticate)
    socket = await connect(await token_for(user))
    assert await socket.receive_output(timeout=5) == {
        "type": "websocket.close",
        "code": CLOSE_TRY_AGAIN_LATER,
    }


async def test_a_workbench_socket_without_its_snapshot_is_closed_1013(user, monkeypatch):
    async def launches(self):
        raise OUTAGE

    monkeypatch.setattr(WorkbenchConsumer, "_launches", launches)
    socket = await connect(await token_for(user), path="/ws/workbench/")
    assert await socket.receive_output(timeout=5) == {
        "type": "websocket.close",
        "code": CLOSE_TRY_AGAIN_LATER,
    }
