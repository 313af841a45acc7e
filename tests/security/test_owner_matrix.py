"""The owner matrix: user B never reaches user A's objects (docs/subsystems/api.md, "Owner
scoping"). Every REST operation is taken from ``/api/v1/openapi.json``, so a new route is in the
matrix the day it is added (a new path parameter, body or collection fails the test until it is
classified here); then every websocket subscription and resolution, the web pages.

For each operation naming an object, B's answer for A's object equals B's answer for a missing
one: 404 ``not_found``, the same body. A's objects are unchanged afterwards."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from conversations.models import Conversation
from tests.conftest import client_for
from tests.conversations.api_helpers import (
    API,
    PATH_OBJECTS,
    assert_error,
    build_world,
    filled,
    grant_run_commands,
    world_state,
)
from tests.conversations.api_helpers import send as api_send
from tests.conversations.helpers import assistant_calls
from tests.realtime.helpers import connect, hello, receive, send, token_for
from tools.workspaces import conversation_workspace

from .errors import error_of

pytestmark = pytest.mark.django_db(transaction=True)


# A valid body for each request schema, ids as ``{placeholders}`` filled with the same ids as
# the path: B must be refused for the object, not for the body.
BODIES: dict[str, Any] = {
    "ConversationIn": {"title": "B's"},
    "MessageIn": {"messageId": "m-b", "role": "assistant", "turnId": "{tid}", "content": []},
    "CommandIn": {"inputId": "i-b", "command": "ls", "includeInContext": True},
    "LiveIn": {"turnId": "{tid}", "kind": "text", "delta": "hi"},
    "QueueAckIn": {"upTo": 1},
    "TurnEndIn": {"reason": "stopped"},
    "ApprovalIn": {"requestId": "r-b", "kind": "approval", "decision": "allow"},
    "LaunchIn": {"name": "b", "command": "true"},
    "HostClaimsIn": {"tools": ["notes"], "worker": "b"},
    "HostUpdateIn": {"token": str(uuid.UUID(int=1)), "generation": 1, "update": {}},
    "HostSettleIn": {
        "token": str(uuid.UUID(int=1)),
        "generation": 1,
        "outcome": "completed",
        "content": [],
    },
}


def operations() -> list[tuple[str, str, dict[str, Any]]]:
    document = json.loads(Client().get(f"{API}/openapi.json").content)
    return [
        (method, path.removeprefix(API), operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
    ]


def _schema_name(operation: dict[str, Any]) -> str | None:
    """The first component the request body refers to (a union's first branch)."""
    body = operation.get("requestBody")
    if body is None:
        return None
    text = json.dumps(body["content"]["application/json"]["schema"])
    name = text.split("#/components/schemas/", 1)[1].split('"', 1)[0]
    assert name in BODIES, f"request body {name}: add a valid one to BODIES"
    return name


def _choices(path: str) -> list[dict[str, str]]:
    """For each object the path can name, the world key of each of its parameters."""
    names = [part[1:-1] for part in path.split("/") if part.startswith("{")]
    for name in names:
        assert name in PATH_OBJECTS, f"path parameter {name!r}: add it to PATH_OBJECTS"
    widest = max((len(PATH_OBJECTS[n]) for n in names), default=0)
    return [{n: PATH_OBJECTS[n][i % len(PATH_OBJECTS[n])] for n in names} for i in range(widest)]


def _collection_checks(a_world, a_user, b_user, b_api) -> dict[tuple[str, str], Any]:
    """The operations that name no object, each with what B must not get of A's."""
    a_ids = a_world.ids()

    def list_conversations():
        items = b_api.get(f"{API}/conversations").json()["items"]
        assert all(item["id"] != a_ids["cid"] for item in items) and len(items) <= 1

    def create_conversation():
        theirs = Conversation.objects.get(pk=a_ids["cid"])
        answer = b_api.post_json(f"{API}/conversations", {"workspace": theirs.workspace})
        assert answer.status_code == 201, answer.content
        mine = Conversation.objects.get(pk=answer.json()["id"])
        assert mine.owner_id == b_user.pk
        assert conversation_workspace(mine) != conversation_workspace(theirs)
        for escape in ("..", f"../{a_user.pk}", "/"):
            refused = b_api.post_json(f"{API}/conversations", {"workspace": escape})
            assert refused.status_code == 422, (escape, refused.content)

    def list_launches():
        assert b_api.get(f"{API}/launches").json() == {"items": [], "nextCursor": None}

    def start_launch():
        for cwd in ("..", f"../{a_user.pk}", "/tmp"):
            refused = b_api.post_json(
                f"{API}/launches", {"name": "x", "command": "true", "cwd": cwd}
            )
            assert_error(refused, 422, "validation_error", field="cwd")

    def claim_host_calls():
        answer = b_api.post_json(f"{API}/host/claims", {"tools": ["notes"], "worker": "b"})
        assert answer.status_code == 200 and answer.json() == {"claims": []}, answer.content

    return {
        ("get", "/conversations"): list_conversations,
        ("post", "/conversations"): create_conversation,
        ("get", "/launches"): list_launches,
        ("post", "/launches"): start_launch,
        ("post", "/host/claims"): claim_host_calls,
    }


def test_b_gets_for_as_object_what_it_gets_for_a_missing_one_on_every_route(user, other_user):
    grant_run_commands(user)
    grant_run_commands(other_user)  # B may do all A may: only ownership stands in the way
    a_world = build_world(user)
    # A host call of A ready to be claimed: B's claim (no host scope) must not take it.
    assistant_calls(a_world.conversation, a_world.turn_id, ("notes", {"q": "ready"}))
    b_api = client_for(other_user, name="matrix")
    a_ids = a_world.ids()
    before = world_state(a_world)
    collections = _collection_checks(a_world, user, other_user, b_api)
    seen = set()
    for method, path, operation in operations():
        choices = _choices(path)
        if not choices:
            assert (method, path) in collections, f"{method} {path}: add it to the collections"
            collections[(method, path)]()
            seen.add((method, path))
            continue
        name = _schema_name(operation)
        for keys in choices:
            theirs = {param: a_ids[key] for param, key in keys.items()}
            missing = {param: str(uuid.uuid4()) for param in keys}
            answers = []
            for ids in (theirs, missing):
                # Body ids follow the path's: a turn id in a body is the turn of the path.
                fill = {
                    **{k: a_ids[k] for k in a_ids},
                    **{keys.get(p, p): v for p, v in ids.items()},
                }
                fill["tid"] = ids.get("tid", a_ids["tid"] if ids is theirs else str(uuid.uuid4()))
                body = filled(BODIES[name], fill) if name else None
                response = api_send(b_api, method, path.format(**ids), body)
                error = error_of(response.status_code, response["Content-Type"], response.content)
                assert (response.status_code, error["code"]) == (404, "not_found"), (
                    method,
                    path,
                    keys,
                    error,
                )
                answers.append(error)
            assert answers[0] == answers[1], (method, path, answers)
        assert world_state(a_world) == before, (method, path)
    assert seen == set(collections), "a collection route left the schema: drop its check"


# --- websockets and pages ----------------------------------------------------------------------


async def test_b_subscribes_and_resolves_as_objects_as_missing_ones(user, other_user):
    a_world = await sync_to_async(build_world)(user)
    before = await sync_to_async(world_state)(a_world)
    socket = await connect(await token_for(other_user))
    await hello(socket)
    missing = str(uuid.uuid4())
    answers = []
    for cid in (str(a_world.conversation.pk), missing):
        for after in (None, 0, 1):
            await send(socket, {"type": "subscribe", "conversationId": cid, "after": after})
            frame = await receive(socket)
            assert frame.get("conversationId") == cid
            answers.append({**frame, "conversationId": "…"})
    for call in (a_world.open_id, a_world.settled_id, missing):
        await send(
            socket,
            {
                "type": "resolve",
                "toolCallId": call,
                "requestId": "r",
                "kind": "approval",
                "decision": "allow",
            },
        )
        frame = await receive(socket)
        answers.append({**frame, "toolCallId": "…"})
    assert all(a == answers[0] for a in answers[:6]), answers
    assert answers[0]["code"] == "not_found"
    assert answers[6] == answers[7] == answers[8] and answers[6]["code"] == "not_found", answers
    assert await socket.receive_nothing(timeout=0.2)
    await socket.disconnect()
    workbench = await connect(await token_for(other_user), path="/ws/workbench/")
    assert (await receive(workbench)) == {"type": "snapshot", "launches": []}
    await workbench.disconnect()
    assert await sync_to_async(world_state)(a_world) == before


def test_b_opens_as_conversation_page_as_a_missing_one(user, other_user):
    a_world = build_world(user)
    browser = Client()
    browser.force_login(other_user)
    theirs = browser.get(f"/c/{a_world.conversation.pk}/")
    missing = browser.get(f"/c/{uuid.uuid4()}/")
    assert theirs.status_code == missing.status_code == 404
    assert theirs.content == missing.content
    assert str(a_world.conversation.pk) not in browser.get("/").content.decode()
