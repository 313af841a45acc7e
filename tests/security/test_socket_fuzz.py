"""Hostile frames on ``/ws/conversations/`` and ``/ws/workbench/`` (docs/realtime.md, "Errors"),
through the real ASGI application: random JSON and text from hypothesis, wrong types, missing
fields, frames over 1 MiB, subscribe storms. Every bad frame gets an ``error`` frame, the socket
stays open (but for a frame over 1 MiB: 1009), and nothing is written to the database.

Bounded for CI (``TOOLCORE_FUZZ_EXAMPLES`` sockets of up to 8 frames, default 6, derandomized);
``TOOLCORE_FUZZ_EXAMPLES=500`` is the full size (docs/security.md)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from hypothesis import given
from hypothesis import strategies as st

from conversations.api.auth import token_create
from conversations.models import Conversation, ConversationEvent, ToolCall, Turn
from conversations.realtime.base import MAX_FRAME_BYTES
from conversations.realtime.conversation import MAX_SUBSCRIPTIONS
from tests.conversations.api_helpers import bash_awaiting_approval
from tests.conversations.helpers import new_conversation, open_turn
from tests.realtime.helpers import connect, hello, receive, send, token_for
from tools.models import AsyncRun, Launch, PermissionRule

from .fuzzing import FUZZ

SENTINEL = "sentinel-"  # a subscribe to this id answers one not_found naming it: a fence
FIELDS = ("type", "conversationId", "after", "toolCallId", "requestId", "kind", "decision")


def written() -> dict[str, Any]:
    """Everything a frame could write, as plain data."""
    return {
        "conversations": sorted(Conversation.objects.values_list("pk", "last_sequence")),
        "events": ConversationEvent.objects.count(),
        "turns": sorted(Turn.objects.values_list("pk", "status")),
        "calls": sorted(ToolCall.objects.values_list("pk", "state", "resolution_request_id")),
        "rules": PermissionRule.objects.count(),
        "runs": AsyncRun.objects.count(),
        "launches": Launch.objects.count(),
    }


def _json_values():
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**70), max_value=2**70)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=12)
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
        ),
        max_leaves=8,
    )


def _frames(ids: dict[str, str]):
    """Frames as sent: JSON objects with the protocol's fields (any values), any JSON, any
    text. ``ids`` are real ids: the user's conversation, another user's conversation and call
    (never the user's own awaiting call: a valid resolution of it would write, rightly)."""
    values = _json_values() | st.sampled_from(
        [*ids.values(), str(uuid.uuid4()), "", "not-a-uuid", -1, 0, 2**63, True, 1.5]
    )
    known = {
        "type": st.sampled_from(["subscribe", "unsubscribe", "resolve", "dance", ""]) | values,
        "kind": st.sampled_from(["approval", "input"]) | values,
        "decision": st.sampled_from(["allow", "deny"]) | values,
    }
    objects = st.fixed_dictionaries(
        {}, optional={name: known.get(name, values) for name in (*FIELDS, "persist", "value")}
    )
    return objects.map(json.dumps) | _json_values().map(json.dumps) | st.text(max_size=40)


def expected(text: str, own: str) -> str:
    """What the protocol answers: ``error``, ``data`` (a snapshot or replay of the user's own
    conversation, or nothing when the client is up to date), or ``nothing``."""
    try:
        frame = json.loads(text)
    except ValueError:
        return "error"
    if not isinstance(frame, dict) or frame.get("type") not in ("subscribe", "unsubscribe"):
        return "error"  # a resolve here never names a call the user may resolve
    cid, after = frame.get("conversationId"), frame.get("after")
    if not isinstance(cid, str):
        return "error"
    if frame["type"] == "unsubscribe":
        return "nothing"  # idempotent: nothing is sent back, whatever it names
    if after is not None and (isinstance(after, bool) or not isinstance(after, int) or after < 0):
        return "error"
    return "data" if cid == own else "error"


async def send_text(socket, text: str) -> None:
    """A text frame, the empty one too (the communicator's ``send_to`` refuses it)."""
    await socket.send_input({"type": "websocket.receive", "text": text})


async def _answers(socket, text: str, fence: int) -> list[dict[str, Any]]:
    """The frames a client frame caused: read up to the sentinel's answer sent after it."""
    await send_text(socket, text)
    await send(socket, {"type": "subscribe", "conversationId": f"{SENTINEL}{fence}"})
    got = []
    while True:
        frame = await receive(socket)
        if frame.get("conversationId") == f"{SENTINEL}{fence}":
            assert (frame["type"], frame["code"]) == ("error", "not_found"), frame
            return got
        got.append(frame)


def _check_error(frame: dict[str, Any]) -> None:
    assert frame["type"] == "error", frame
    assert isinstance(frame["code"], str) and frame["code"], frame
    assert isinstance(frame["message"], str) and frame["message"], frame
    assert len(frame["message"].encode()) <= 1024 and len(frame.get("field") or "") <= 1024


@pytest.fixture
def scene(user, other_user):
    own = new_conversation(user)
    open_turn(own)
    theirs, their_call, _ = bash_awaiting_approval(other_user)
    _, secret = token_create(user=user)
    ids = {"own": str(own.pk), "theirs": str(theirs.pk), "their_call": str(their_call)}
    return ids, secret


@pytest.mark.django_db(transaction=True)
@given(data=st.data())
@FUZZ
def test_random_frames_get_their_answers_and_write_nothing(scene, data):
    ids, secret = scene
    texts = data.draw(st.lists(_frames(ids), min_size=1, max_size=8), label="frames")
    before = written()

    async def drive() -> None:
        socket = await connect(secret)
        await hello(socket)
        for fence, text in enumerate(texts):
            answers = await _answers(socket, text, fence)
            kind = expected(text, ids["own"])
            if kind == "error":
                assert len(answers) == 1, (text, answers)
                _check_error(answers[0])
            elif kind == "nothing":
                assert answers == [], (text, answers)
            else:
                assert all(a["type"] in ("snapshot", "replay") for a in answers), (text, answers)
        await socket.disconnect()

    async_to_sync(drive)()
    assert written() == before


@pytest.mark.django_db(transaction=True)
@given(data=st.data())
@FUZZ
def test_the_workbench_answers_every_frame_with_an_error(user, data):
    texts = data.draw(st.lists(_frames({}), min_size=1, max_size=8), label="frames")
    _, secret = token_create(user=user)
    before = written()

    async def drive() -> None:
        socket = await connect(secret, path="/ws/workbench/")
        assert (await receive(socket))["type"] == "snapshot"
        for text in texts:
            await send_text(socket, text)
            error = await receive(socket)
            _check_error(error)
            assert error["code"] == "unknown_type"
        await socket.send_to(bytes_data=b"\x00\xff")
        _check_error(await receive(socket))
        await socket.disconnect()

    async_to_sync(drive)()
    assert written() == before


# --- frames over 1 MiB -----------------------------------------------------------------------

WIDE = "é"  # two UTF-8 bytes: a frame can pass 1 MiB of bytes with fewer characters


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/ws/conversations/", "/ws/workbench/"])
@pytest.mark.parametrize(
    "frame",
    [
        pytest.param({"text_data": "x" * (MAX_FRAME_BYTES + 1)}, id="text"),
        pytest.param({"text_data": WIDE * (MAX_FRAME_BYTES // 2 + 1)}, id="wide-text"),
        pytest.param({"bytes_data": b"\xff" * (MAX_FRAME_BYTES + 1)}, id="bytes"),
    ],
)
async def test_a_frame_over_1_mib_closes_either_socket_with_1009(user, path, frame):
    """Regression (wide-text on the workbench): its size was counted in characters, so a frame
    of 1.5 MiB of two-byte characters was read instead of closing the socket."""
    socket = await connect(await token_for(user), path=path)
    await receive(socket)  # hello or the snapshot
    await socket.send_to(**frame)
    message = await socket.receive_output(timeout=10)
    assert message == {"type": "websocket.close", "code": 1009}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/ws/conversations/", "/ws/workbench/"])
async def test_a_frame_of_1_mib_in_wide_characters_is_answered(user, path):
    socket = await connect(await token_for(user), path=path)
    await receive(socket)
    await socket.send_to(text_data=WIDE * (MAX_FRAME_BYTES // 2))
    _check_error(await receive(socket))
    await socket.disconnect()


# --- subscribe storms ------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_subscribe_storm_is_bounded_and_answered(user):
    """100 conversations on one socket, then the 101st is ``too_many_subscriptions`` naming it;
    subscribing again to a followed one is not a new subscription; the socket stays open."""
    conversations = await sync_to_async(
        lambda: [str(new_conversation(user).pk) for _ in range(MAX_SUBSCRIPTIONS + 1)]
    )()
    socket = await connect(await token_for(user))
    await hello(socket)
    for cid in conversations[:MAX_SUBSCRIPTIONS]:
        await send(socket, {"type": "subscribe", "conversationId": cid, "after": None})
        assert (await receive(socket))["type"] == "snapshot"
    extra = conversations[MAX_SUBSCRIPTIONS]
    for _ in range(3):
        await send(socket, {"type": "subscribe", "conversationId": extra, "after": 0})
        refused = await receive(socket)
        _check_error(refused)
        assert (refused["code"], refused["conversationId"]) == ("too_many_subscriptions", extra)
    for _ in range(200):  # the same conversation again and again: still one subscription
        await send(socket, {"type": "subscribe", "conversationId": conversations[0], "after": 0})
    await send(socket, {"type": "unsubscribe", "conversationId": conversations[1]})
    await send(socket, {"type": "subscribe", "conversationId": extra, "after": None})
    answer = await receive(socket, timeout=30)
    assert (answer["type"], answer["conversationId"]) == ("snapshot", extra)
    await socket.disconnect()
