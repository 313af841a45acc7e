"""The REST API through the real URL conf (docs/subsystems/api.md): owner scoping, authentication and the
behaviour of every conversation, call and asset endpoint."""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib.auth.models import Permission
from django.db import transaction
from django.test import Client
from django.utils import timezone

from conversations.auth import token_create, token_revoke
from conversations.models import (
    ApiToken,
    Asset,
    Conversation,
    ConversationEvent,
    ExecutionClaim,
    ToolActivity,
    ToolCall,
    Turn,
)
from conversations.services.claims import claim_acquire
from conversations.services.events import event_append
from conversations.services.messages import message_post
from conversations.services.publish import conversation_group, unpack
from conversations.services.settlement import AttemptFile, ClaimGuard, call_settle
from conversations.shapes import iso
from conversations.storage import attempt_dir, conversation_dir
from projections.frames import REPLAY_BUDGET_BYTES, REPLAY_MAX_EVENTS
from tools.models import PermissionRule

from ..conftest import ApiClient
from .helpers import assistant_calls, new_conversation, open_turn

API = "/api/v1"
ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
ERROR_KEYS = {"code", "message", "field"}


# --- helpers ---------------------------------------------------------------------------------


def assert_error(response, status: int, code: str, *, field: Any = ...) -> dict[str, Any]:
    """The error body: exactly ``{"error": {"code", "message", "field"?}}``, JSON."""
    assert response.status_code == status, (response.status_code, response.content[:500])
    assert response["Content-Type"] == "application/json"
    body = json.loads(response.content)
    assert set(body) == {"error"}, body
    error = body["error"]
    assert {"code", "message"} <= set(error) <= ERROR_KEYS, error
    assert isinstance(error["message"], str) and error["message"]
    assert error["code"] == code, error
    if "field" in error:
        assert isinstance(error["field"], str) and error["field"]
    if field is not ...:
        assert error.get("field") == field, error
    return error


def send(client: Client, method: str, path: str, body: Any = None):
    """One request; ``body`` is sent as JSON for POSTs (an empty body when None)."""
    url = path if path.startswith("/api/") else API + path
    if method == "post":
        data = "" if body is None else json.dumps(body)
        return client.post(url, data=data, content_type="application/json")
    return getattr(client, method)(url)


def grant_run_commands(user) -> None:
    user.user_permissions.add(Permission.objects.get(codename="run_commands"))


def settle_host(call_id, *, result: Any = None, text: str = "done", files=()) -> ConversationEvent:
    """Claim a ready call as worker ``w`` and settle it ``completed``."""
    claim = claim_acquire(call_id=call_id, worker="w")
    assert claim is not None
    return call_settle(
        call_id=call_id,
        outcome="completed",
        guard=ClaimGuard(claim.token, claim.generation),
        result=result if result is not None else {"text": text},
        text=text,
        files=files,
    )


def events_of(conversation) -> list[tuple[int, str]]:
    return list(
        ConversationEvent.objects.filter(conversation_id=conversation.pk)
        .order_by("sequence")
        .values_list("sequence", "type")
    )


def state_of(call_id) -> str | None:
    return ToolCall.objects.filter(pk=call_id).values_list("state", flat=True).first()


def outcome_of(call_id) -> str | None:
    payload = (
        ConversationEvent.objects.filter(tool_call_id=call_id)
        .values_list("payload", flat=True)
        .first()
    )
    return None if payload is None else payload["outcome"]


def compact_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


# --- a conversation of user A with a bit of everything -----------------------------------------


@dataclass
class World:
    conversation: Conversation
    turn_id: str
    settled_id: str
    open_id: str
    asset_id: str

    def ids(self) -> dict[str, str]:
        return {
            "cid": str(self.conversation.pk),
            "tid": self.turn_id,
            "settled": self.settled_id,
            "open": self.open_id,
            "asset": self.asset_id,
        }


def build_world(owner) -> World:
    conversation = new_conversation(owner, title="A's")
    turn_id = open_turn(conversation)
    posted = assistant_calls(
        conversation, turn_id, ("notes", {"q": "x"}), ("bash", {"command": "ls -la"})
    )
    host_id, bash_id = posted.call_ids
    assert state_of(bash_id) == "awaiting_approval"
    event = settle_host(host_id, result={"lines": "one\ntwo"}, text="one\ntwo")
    asset_id = event.payload["assetIds"][0]
    return World(conversation, turn_id, str(host_id), str(bash_id), asset_id)


def world_state(world: World) -> dict[str, Any]:
    cid = world.conversation.pk
    folder = conversation_dir(cid)
    return {
        "conversation": list(
            Conversation.objects.filter(pk=cid).values_list("title", "last_sequence")
        ),
        "events": list(
            ConversationEvent.objects.filter(conversation_id=cid)
            .order_by("sequence")
            .values_list("sequence", "type", "tool_call_id")
        ),
        "turns": list(Turn.objects.filter(conversation_id=cid).values_list("id", "status")),
        "calls": list(
            ToolCall.objects.filter(conversation_id=cid)
            .order_by("id")
            .values_list("id", "state", "generation", "resolution_request_id")
        ),
        "assets": list(Asset.objects.filter(conversation_id=cid).values_list("id", "sha256")),
        "activity": list(
            ToolActivity.objects.filter(conversation_id=cid).order_by("id").values_list("id", "rev")
        ),
        "rules": PermissionRule.objects.count(),
        "files": sorted(str(p.relative_to(folder)) for p in folder.rglob("*")),
    }


# Every route of docs/subsystems/api.md's table that conversations/api.py serves, with a valid body.
ROUTES: list[tuple[str, str, Any]] = [
    ("get", "/conversations/{cid}", None),
    ("delete", "/conversations/{cid}", None),
    (
        "post",
        "/conversations/{cid}/messages",
        {"messageId": "b-1", "role": "user", "content": [{"type": "text", "text": "hi"}]},
    ),
    (
        "post",
        "/conversations/{cid}/messages",
        {"messageId": "b-2", "role": "assistant", "turnId": "{tid}", "content": []},
    ),
    (
        "post",
        "/conversations/{cid}/commands",
        {"inputId": "b-in", "command": "ls", "includeInContext": True},
    ),
    ("get", "/conversations/{cid}/events", None),
    ("get", "/conversations/{cid}/events?after=1&limit=5", None),
    ("get", "/conversations/{cid}/turns/{tid}/results?wait=0", None),
    ("post", "/conversations/{cid}/queue/ack", {"upTo": 3}),
    ("post", "/conversations/{cid}/turns/{tid}/cancel", None),
    ("post", "/conversations/{cid}/turns/{tid}/end", {"reason": "stopped"}),
    ("get", "/tool-calls/{open}", None),
    ("get", "/tool-calls/{settled}", None),
    (
        "post",
        "/tool-calls/{open}/resolution",
        {"requestId": "b-r", "kind": "approval", "decision": "deny"},
    ),
    (
        "post",
        "/tool-calls/{settled}/resolution",
        {"requestId": "b-r", "kind": "approval", "decision": "allow"},
    ),
    ("post", "/tool-calls/{open}/cancel", None),
    ("post", "/tool-calls/{settled}/cancel", None),
    ("get", "/tool-calls/{open}/details", None),
    ("get", "/tool-calls/{settled}/details", None),
    ("get", "/assets/{asset}", None),
    ("get", "/assets/{asset}/lines", None),
    ("get", "/assets/{asset}/lines?offset=0&limit=10", None),
]


def _fill(template: Any, ids: dict[str, str]) -> Any:
    if isinstance(template, str):
        return template.format(**ids)
    if isinstance(template, dict):
        return {k: _fill(v, ids) for k, v in template.items()}
    return template


# --- 1. owner scoping and authentication -------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_another_owners_resources_answer_404_like_missing_ones_on_every_route(
    user, other_user, api, other_api
):
    """User B reaches none of A's resources: every route answers the very 404 of a missing or
    malformed id, and A's conversation is untouched afterwards."""
    world = build_world(user)
    before = world_state(world)
    missing = {k: str(uuid.uuid4()) for k in world.ids()}
    malformed = {k: "not-a-uuid" for k in world.ids()}
    for method, template, body in ROUTES:
        answers = []
        for ids, body_ids in ((world.ids(), world.ids()), (missing, missing), (malformed, missing)):
            # (A malformed UUID inside a body is a validation error, 422: only paths get one.)
            response = send(other_api, method, _fill(template, ids), _fill(body, body_ids))
            assert_error(response, 404, "not_found")
            answers.append(json.loads(response.content))
        assert answers[0] == answers[1] == answers[2], (method, template, answers)
        assert world_state(world) == before, (method, template)
    # B's list does not show A's conversation.
    listed = other_api.get(f"{API}/conversations").json()
    assert listed == {"items": [], "nextCursor": None}
    # A still reaches everything B was refused (so the 404s were about the owner).
    for method, template, _ in ROUTES:
        if method == "get":
            response = send(api, method, _fill(template, world.ids()))
            assert response.status_code == 200, (template, response.content[:300])


@pytest.mark.django_db(transaction=True)
def test_a_turn_of_another_conversation_is_not_found(user, api):
    world = build_world(user)
    mine = new_conversation(user)
    for method, template, body in ROUTES:
        if "{tid}" not in template or "{cid}" not in template:
            continue
        ids = {**world.ids(), "cid": str(mine.pk)}
        response = send(api, method, _fill(template, ids), _fill(body, ids))
        if template.endswith("/messages"):
            # An assistant message naming a turn that is not this conversation's open turn.
            assert_error(response, 409, "turn_not_open", field="turnId")
        else:
            assert_error(response, 404, "not_found")
    assert Turn.objects.get(pk=world.turn_id).status == "open"


def _unauthenticated_clients(user) -> dict[str, Client]:
    revoked_row, revoked = token_create(user=user, name="revoked")
    assert token_revoke(token_id=revoked_row.pk)
    _, expired = token_create(
        user=user, name="expired", expires_at=timezone.now() - timedelta(seconds=1)
    )
    return {
        "none": Client(),
        "revoked": ApiClient(revoked),
        "expired": ApiClient(expired),
        "unknown": ApiClient("tc_not-a-token"),
        "basic scheme": Client(HTTP_AUTHORIZATION="Basic dXNlcjpwdw=="),
        "empty bearer": Client(HTTP_AUTHORIZATION="Bearer "),
    }


@pytest.mark.django_db(transaction=True)
def test_every_route_needs_live_credentials(user):
    world = build_world(user)
    before = world_state(world)
    routes = [
        *ROUTES,
        ("get", "/conversations", None),
        ("post", "/conversations", {"title": "x"}),
    ]
    for name, client in _unauthenticated_clients(user).items():
        for method, template, body in routes:
            response = send(client, method, _fill(template, world.ids()), _fill(body, world.ids()))
            assert response.status_code == 401, (name, method, template, response.content[:200])
            assert_error(response, 401, "unauthorized")
    assert world_state(world) == before
    assert Conversation.objects.count() == 1


@pytest.mark.django_db
def test_expiry_in_the_future_still_authenticates(user):
    _, secret = token_create(user=user, expires_at=timezone.now() + timedelta(hours=1))
    response = ApiClient(secret).get(f"{API}/conversations")
    assert response.status_code == 200
    assert ApiToken.objects.get(user=user).last_used_at is not None


@pytest.mark.django_db
def test_a_token_revoked_after_use_stops_working(user):
    row, secret = token_create(user=user)
    client = ApiClient(secret)
    assert client.get(f"{API}/conversations").status_code == 200
    token_revoke(token_id=row.pk)
    assert_error(client.get(f"{API}/conversations"), 401, "unauthorized")


@pytest.mark.django_db
def test_an_inactive_users_token_is_refused(user, api):
    user.is_active = False
    user.save()
    assert_error(api.get(f"{API}/conversations"), 401, "unauthorized")


@pytest.mark.django_db
def test_openapi_and_docs_are_public_and_need_no_cdn():
    client = Client()
    schema = client.get(f"{API}/openapi.json")
    assert schema.status_code == 200
    assert schema["Content-Type"] == "application/json"
    document = json.loads(schema.content)
    assert (
        schema.content == json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()
    )  # compact, like every JSON on the wire
    paths = document["paths"]
    assert_error(client.post(f"{API}/openapi.json"), 405, "method_not_allowed")
    for expected in (
        "/api/v1/conversations",
        "/api/v1/conversations/{cid}/messages",
        "/api/v1/conversations/{cid}/turns/{tid}/results",
        "/api/v1/tool-calls/{call_id}/resolution",
        "/api/v1/assets/{asset_id}/lines",
    ):
        assert expected in paths
    docs = client.get(f"{API}/docs")
    assert docs.status_code == 200
    html = docs.content.decode()
    assert "<html" in html.lower()
    for external in ("https://cdn", "http://cdn", "unpkg", "jsdelivr", "cdnjs"):
        assert external not in html, external
    # The assets it loads are local static files.
    for src in re.findall(r'(?:src|href)="([^"]+)"', html):
        assert src.startswith("/"), src


# --- 4. session authentication -----------------------------------------------------------------


@pytest.mark.django_db
def test_session_can_read_and_needs_csrf_to_write(user):
    conversation = new_conversation(user, title="mine")
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(user)
    listed = browser.get(f"{API}/conversations")
    assert listed.status_code == 200
    assert [c["id"] for c in listed.json()["items"]] == [str(conversation.pk)]
    assert browser.get(f"{API}/conversations/{conversation.pk}").status_code == 200

    refused = browser.post(
        f"{API}/conversations", data=json.dumps({"title": "x"}), content_type="application/json"
    )
    assert refused.status_code in (401, 403)
    assert_error(refused, refused.status_code, refused.json()["error"]["code"])
    assert Conversation.objects.filter(owner=user).count() == 1

    # A page that renders a form gives the browser its csrftoken cookie.
    browser.get("/admin/login/")
    token = browser.cookies["csrftoken"].value
    wrong = browser.post(
        f"{API}/conversations",
        data=json.dumps({"title": "x"}),
        content_type="application/json",
        HTTP_X_CSRFTOKEN="x" * 32,
    )
    assert wrong.status_code in (401, 403)
    created = browser.post(
        f"{API}/conversations",
        data=json.dumps({"title": "with csrf"}),
        content_type="application/json",
        HTTP_X_CSRFTOKEN=token,
    )
    assert created.status_code == 201, created.content
    assert created.json()["title"] == "with csrf"
    assert Conversation.objects.filter(owner=user).count() == 2


@pytest.mark.django_db
def test_a_session_does_not_reach_another_owners_conversation(user, other_user):
    conversation = new_conversation(user)
    browser = Client()
    browser.force_login(other_user)
    assert_error(browser.get(f"{API}/conversations/{conversation.pk}"), 404, "not_found")


# --- 3. conversations ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_create_conversation_shape_and_defaults(api, user):
    response = api.post_json(f"{API}/conversations", {"title": "First"})
    assert response.status_code == 201
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert set(body) == {"id", "title", "workspace", "lastSequence", "createdAt"}
    assert body["title"] == "First"
    assert body["workspace"] == body["id"]  # default: the conversation id
    assert body["lastSequence"] == 0
    assert ISO_MS.match(body["createdAt"]), body["createdAt"]
    row = Conversation.objects.get(pk=body["id"])
    assert row.owner == user
    assert api.get(f"{API}/conversations/{body['id']}").json() == body

    for optional in ({}, {"title": None}, {"workspace": None}, None):
        empty = api.post_json(f"{API}/conversations", optional)
        assert empty.status_code == 201, (optional, empty.content)
        assert empty.json()["title"] == ""
        assert empty.json()["workspace"] == empty.json()["id"]

    nested = api.post_json(f"{API}/conversations", {"workspace": "projects/site"})
    assert nested.status_code == 201
    assert nested.json()["workspace"] == "projects/site"


@pytest.mark.django_db
@pytest.mark.parametrize("workspace", ["../x", "/abs", "a/../../x", "..", "/", "a/../.."])
def test_a_workspace_outside_the_owners_root_is_422(api, user, other_user, workspace):
    response = api.post_json(f"{API}/conversations", {"workspace": workspace})
    assert_error(response, 422, "validation_error", field="workspace")
    assert not Conversation.objects.exists()


@pytest.mark.django_db
def test_a_workspace_in_another_owners_root_is_422(api, user, other_user):
    response = api.post_json(f"{API}/conversations", {"workspace": f"../{other_user.pk}/x"})
    assert_error(response, 422, "validation_error", field="workspace")


@pytest.mark.django_db
def test_a_symlink_workspace_that_escapes_is_422(api, user, tmp_path):
    root = Path(settings.TOOLCORE_WORKSPACE_ROOT) / str(user.pk)
    root.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "link").symlink_to(outside)
    response = api.post_json(f"{API}/conversations", {"workspace": "link/sub"})
    assert_error(response, 422, "validation_error", field="workspace")


@pytest.mark.django_db
def test_conversation_list_newest_first_with_cursor_pages(api, user, other_user):
    created = [api.post_json(f"{API}/conversations", {"title": f"c{i}"}).json() for i in range(7)]
    new_conversation(other_user, title="not mine")
    seen: list[dict[str, Any]] = []
    cursor = None
    pages = 0
    while True:
        query = f"?limit=3&cursor={cursor}" if cursor else "?limit=3"
        response = api.get(f"{API}/conversations{query}")
        assert response.status_code == 200
        page = response.json()
        assert set(page) == {"items", "nextCursor"}
        assert 1 <= len(page["items"]) <= 3
        seen.extend(page["items"])
        pages += 1
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert pages == 3
    assert [c["id"] for c in seen] == [c["id"] for c in reversed(created)]
    stamps = [c["createdAt"] for c in seen]
    assert stamps == sorted(stamps, reverse=True)
    default = api.get(f"{API}/conversations").json()
    assert len(default["items"]) == 7 and default["nextCursor"] is None


@pytest.mark.django_db
def test_conversation_list_pages_through_equal_timestamps(api, user):
    """Conversations created in the same instant still page without loss or repeat."""
    rows = [new_conversation(user, title=f"t{i}") for i in range(5)]
    stamp = timezone.now()
    Conversation.objects.filter(pk__in=[r.pk for r in rows]).update(created_at=stamp)
    seen, cursor = [], None
    for _ in range(10):
        query = f"?limit=2&cursor={cursor}" if cursor else "?limit=2"
        page = api.get(f"{API}/conversations{query}").json()
        seen.extend(c["id"] for c in page["items"])
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(str(r.pk) for r in rows)
    assert len(seen) == len(set(seen))


@pytest.mark.django_db
def test_a_tampered_list_cursor_is_422_not_500(api, user):
    import base64

    new_conversation(user)
    for raw in (
        b"2026-01-01T00:00:00+00:00|not-a-uuid",
        b"2026-01-01T00:00:00|also-bad",
        b"not a date|x",
        b"\xff\xfe",
    ):
        cursor = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        response = api.get(f"{API}/conversations?cursor={cursor}")
        assert_error(response, 422, "validation_error", field="cursor")


# --- 3. messages -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_user_message_opens_a_turn_and_repeats_answer_the_recorded_body(api, user):
    conversation = new_conversation(user)
    url = f"{API}/conversations/{conversation.pk}/messages"
    message = {"messageId": "u1", "role": "user", "content": [{"type": "text", "text": "hi"}]}
    first = api.post_json(url, message)
    assert first.status_code == 201
    body = first.json()
    assert set(body) == {"event", "turnId", "toolCalls"}
    assert body["toolCalls"] == []
    event = body["event"]
    assert set(event) == {"sequence", "type", "turnId", "toolCallId", "payload", "createdAt"}
    assert event["sequence"] == 1 and event["type"] == "user_message"
    assert event["payload"] == {"messageId": "u1", "content": message["content"]}
    assert event["turnId"] == body["turnId"] and event["toolCallId"] is None
    assert ISO_MS.match(event["createdAt"])
    assert Turn.objects.get(pk=body["turnId"]).status == "open"

    # The same message again, while its own turn is open: recognised first, 200, same body.
    again = api.post_json(url, message)
    assert again.status_code == 200
    assert again.json() == body
    assert again.content == first.content
    assert events_of(conversation) == [(1, "user_message")]

    # Another content under the same messageId: a conflict, nothing appended.
    other = {**message, "content": [{"type": "text", "text": "changed"}]}
    assert_error(api.post_json(url, other), 409, "message_conflict")
    as_assistant = {**message, "role": "assistant", "turnId": body["turnId"]}
    assert_error(api.post_json(url, as_assistant), 409, "message_conflict")

    # A new user message while the turn is open.
    second = {"messageId": "u2", "role": "user", "content": []}
    assert_error(api.post_json(url, second), 409, "turn_open")
    assert events_of(conversation) == [(1, "user_message")]
    conversation.refresh_from_db()
    assert conversation.last_sequence == 1
    assert api.get(f"{API}/conversations/{conversation.pk}").json()["lastSequence"] == 1


@pytest.mark.django_db
def test_assistant_message_needs_the_open_turn(api, user):
    conversation = new_conversation(user)
    url = f"{API}/conversations/{conversation.pk}/messages"
    text = [{"type": "text", "text": "answer"}]
    no_turn = {"messageId": "a0", "role": "assistant", "content": text}
    assert_error(api.post_json(url, no_turn), 409, "turn_not_open")
    turn_id = open_turn(conversation)
    assert_error(api.post_json(url, no_turn), 409, "turn_not_open")
    wrong = {**no_turn, "turnId": str(uuid.uuid4())}
    assert_error(api.post_json(url, wrong), 409, "turn_not_open")
    right = {**no_turn, "turnId": turn_id}
    assert api.post_json(url, right).status_code == 201
    end = api.post_json(f"{API}/conversations/{conversation.pk}/turns/{turn_id}/end", {})
    assert end.status_code == 200
    # Once the turn ended, a new assistant message is refused, a repeat is still recognised.
    assert_error(
        api.post_json(url, {**right, "messageId": "a1"}), 409, "turn_not_open", field="turnId"
    )
    assert api.post_json(url, right).status_code == 200


@pytest.mark.django_db
def test_assistant_message_creates_calls_and_is_idempotent(api, user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    url = f"{API}/conversations/{conversation.pk}/messages"
    message = {
        "messageId": "a1",
        "role": "assistant",
        "turnId": turn_id,
        "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_call", "id": "p1", "name": "bash", "arguments": {"command": "ls"}},
            {"type": "tool_call", "id": "p2", "name": "notes", "arguments": {"q": 1}},
            {"type": "tool_call", "id": "p3", "name": "read", "arguments": {"path": 5}},
        ],
    }
    first = api.post_json(url, message)
    assert first.status_code == 201
    body = first.json()
    assert body["turnId"] == turn_id
    assert body["event"]["type"] == "assistant_message"
    calls = body["toolCalls"]
    assert [(c["providerCallId"], c["contentIndex"], c["toolName"], c["state"]) for c in calls] == [
        ("p1", 1, "bash", "supervising"),
        ("p2", 2, "notes", "supervising"),
        ("p3", 3, "read", "supervising"),
    ]
    for call in calls:
        assert set(call) == {"id", "providerCallId", "contentIndex", "toolName", "state"}
    bash, notes, bad_read = (c["id"] for c in calls)
    assert state_of(bash) == "awaiting_approval"
    assert state_of(notes) == "ready"
    assert state_of(bad_read) is None and outcome_of(bad_read) == "failed"

    # The calls moved on; the repeat answers the body recorded the first time.
    again = api.post_json(url, message)
    assert again.status_code == 200
    assert again.json() == body
    assert ToolCall.objects.filter(conversation=conversation).count() == 2
    changed = {**message, "content": message["content"][:2]}
    assert_error(api.post_json(url, changed), 409, "message_conflict")
    assert [t for _, t in events_of(conversation)] == [
        "user_message",
        "assistant_message",
        "tool_call_response",
    ]


# --- 3. commands -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_commands_open_their_own_turn_and_are_deduplicated(api, user):
    conversation = new_conversation(user)
    url = f"{API}/conversations/{conversation.pk}/commands"
    command = {"inputId": "in-1", "command": "echo hi", "includeInContext": False}
    first = api.post_json(url, command)
    assert first.status_code == 201
    body = first.json()
    assert set(body) == {"turnId", "toolCall"}
    call = body["toolCall"]
    assert call["toolName"] == "bash" and call["state"] == "supervising"
    # ask counts as allow for a command the user typed.
    assert state_of(call["id"]) == "ready"
    turn = Turn.objects.get(pk=body["turnId"])
    assert turn.origin == "command" and turn.status == "open"

    again = api.post_json(url, command)
    assert again.status_code == 200
    assert again.json() == body
    assert_error(api.post_json(url, {**command, "command": "rm -rf /"}), 409, "command_conflict")
    # Another command (or a user message) while the command's turn is open.
    assert_error(api.post_json(url, {**command, "inputId": "in-2"}), 409, "turn_open")
    message = {"messageId": "u", "role": "user", "content": []}
    assert_error(
        api.post_json(f"{API}/conversations/{conversation.pk}/messages", message), 409, "turn_open"
    )

    # Once the call settles the turn ends (reason command); the repeat answers 200 with the
    # settled call and its response.
    settle_host(call["id"], text="hi")
    turn.refresh_from_db()
    assert turn.status == "ended"
    ended = ConversationEvent.objects.get(conversation=conversation, type="turn_ended")
    assert ended.payload == {"turnId": body["turnId"], "reason": "command"}
    repeat = api.post_json(url, command)
    assert repeat.status_code == 200
    response = ConversationEvent.objects.get(tool_call_id=call["id"])
    assert repeat.json() == {
        "turnId": body["turnId"],
        "toolCall": {
            "id": call["id"],
            "outcome": "completed",
            "response": {
                "sequence": response.sequence,
                "type": "tool_call_response",
                "turnId": body["turnId"],
                "toolCallId": call["id"],
                "payload": response.payload,
                "createdAt": iso(response.created_at),
            },
        },
    }
    assert repeat.json()["toolCall"] == api.get(f"{API}/tool-calls/{call['id']}").json()
    assert_error(api.post_json(url, {**command, "command": "other"}), 409, "command_conflict")
    # A new command is accepted now.
    again = {"inputId": "in-3", "command": "pwd", "includeInContext": True}
    assert api.post_json(url, again).status_code == 201


@pytest.mark.django_db
def test_a_command_while_a_user_turn_is_open_is_turn_open(api, user):
    conversation = new_conversation(user)
    open_turn(conversation)
    url = f"{API}/conversations/{conversation.pk}/commands"
    assert_error(
        api.post_json(url, {"inputId": "i", "command": "ls", "includeInContext": True}),
        409,
        "turn_open",
    )
    assert not ToolCall.objects.filter(conversation=conversation).exists()


# --- 3. events ---------------------------------------------------------------------------------


def _assistant_text(conversation, turn_id, message_id: str, text: str) -> None:
    message_post(
        conversation_id=conversation.pk,
        message_id=message_id,
        role="assistant",
        turn_id=turn_id,
        content=[{"type": "text", "text": text}],
    )


def _pages(api, conversation, *, limit: int | None = None) -> list[dict[str, Any]]:
    pages, after = [], 0
    while True:
        query = f"after={after}" + (f"&limit={limit}" if limit else "")
        response = api.get(f"{API}/conversations/{conversation.pk}/events?{query}")
        assert response.status_code == 200, response.content[:300]
        assert response["Content-Type"] == "application/json"
        page = json.loads(response.content)
        assert set(page) == {"events", "lastSequence", "nextAfter"}
        pages.append(page)
        if page["nextAfter"] is None:
            return pages
        assert page["nextAfter"] == page["events"][-1]["sequence"]
        after = page["nextAfter"]
        assert len(pages) < 200


def _check_pages(pages: list[dict[str, Any]], last: int, *, limit: int = REPLAY_MAX_EVENTS) -> None:
    sequences = [e["sequence"] for p in pages for e in p["events"]]
    assert sequences == list(range(1, last + 1))
    for page in pages:
        assert page["lastSequence"] == last
        assert 1 <= len(page["events"]) <= min(limit, REPLAY_MAX_EVENTS)
        size = sum(compact_size(e) for e in page["events"])
        if len(page["events"]) > 1:
            assert size <= REPLAY_BUDGET_BYTES, size
        reaches_head = page["events"][-1]["sequence"] == last
        assert (page["nextAfter"] is None) == reaches_head
        for event in page["events"]:
            assert set(event) == {
                "sequence",
                "type",
                "turnId",
                "toolCallId",
                "payload",
                "createdAt",
            }
            assert ISO_MS.match(event["createdAt"])


@pytest.mark.django_db
def test_events_pages_are_ascending_and_stop_at_100_events(api, user):
    conversation = new_conversation(user)
    empty = api.get(f"{API}/conversations/{conversation.pk}/events").json()
    assert empty == {"events": [], "lastSequence": 0, "nextAfter": None}
    turn_id = open_turn(conversation)
    for i in range(104):
        _assistant_text(conversation, turn_id, f"m{i}", f"text {i}")
    pages = _pages(api, conversation)
    assert [len(p["events"]) for p in pages] == [100, 5]
    _check_pages(pages, 105)
    small = _pages(api, conversation, limit=7)
    assert len(small) == 15
    _check_pages(small, 105, limit=7)
    first = small[0]["events"]
    assert first[0]["type"] == "user_message"
    assert first[1]["payload"] == {
        "messageId": "m0",
        "content": [{"type": "text", "text": "text 0"}],
    }
    at_head = api.get(f"{API}/conversations/{conversation.pk}/events?after=105").json()
    assert at_head == {"events": [], "lastSequence": 105, "nextAfter": None}
    response = api.get(f"{API}/conversations/{conversation.pk}/events?after=106")
    assert_error(response, 409, "cursor_ahead")


@pytest.mark.django_db
def test_events_pages_stay_within_512_kib(api, user):
    """Events of ~150 KiB (multi-byte text) cut pages by bytes; a lone event over the budget
    (posting refuses such a message now; one stored before that rule) still goes in, alone."""
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    chunk = 'é€😀 " \\ \n\u2028x' * 7000  # ~150 KiB of UTF-8 with characters JSON escapes
    for i in range(7):
        _assistant_text(conversation, turn_id, f"big{i}", f"{i}:" + chunk)
    with transaction.atomic():
        huge = [{"type": "text", "text": "H" * (REPLAY_BUDGET_BYTES + 1000)}]
        event_append(
            conversation_id=conversation.pk,
            type="assistant_message",
            payload={"messageId": "huge", "content": huge},
            turn_id=turn_id,
            message_id="huge",
        )
    for i in range(3):
        _assistant_text(conversation, turn_id, f"tail{i}", "small")
    pages = _pages(api, conversation)
    _check_pages(pages, 12)
    sizes = [sum(compact_size(e) for e in p["events"]) for p in pages]
    assert all(
        s <= REPLAY_BUDGET_BYTES for s, p in zip(sizes, pages, strict=True) if len(p["events"]) > 1
    )
    # Greedy: a page stops only because the next event would not fit.
    flat = [e for p in pages for e in p["events"]]
    for page, size in zip(pages[:-1], sizes[:-1], strict=True):
        following = flat[page["events"][-1]["sequence"]]
        assert size + compact_size(following) > REPLAY_BUDGET_BYTES
    huge = [p for p in pages if any(e["payload"].get("messageId") == "huge" for e in p["events"])]
    assert len(huge) == 1 and len(huge[0]["events"]) == 1
    assert sizes[pages.index(huge[0])] > REPLAY_BUDGET_BYTES
    # The first page after the user message holds 3 big events at most (3 × 150 KiB fits).
    assert max(len(p["events"]) for p in pages) <= 4
    # Starting right at the huge event: it alone, with the cursor just past it.
    huge_seq = huge[0]["events"][0]["sequence"]
    page = api.get(f"{API}/conversations/{conversation.pk}/events?after={huge_seq - 1}").json()
    assert [e["sequence"] for e in page["events"]] == [huge_seq]
    assert page["nextAfter"] == huge_seq
    # The text comes back exactly as posted.
    assert flat[1]["payload"]["content"][0]["text"] == "0:" + chunk


# --- 3. tool calls: reading, resolving, cancelling -----------------------------------------------


@pytest.mark.django_db
def test_get_call_unfinished_and_settled_shapes(api, user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    posted = assistant_calls(
        conversation, turn_id, ("bash", {"command": "ls"}), ("notes", {"q": "x"})
    )
    bash_id, notes_id = (str(i) for i in posted.call_ids)
    bash = api.get(f"{API}/tool-calls/{bash_id}").json()
    for key in (
        "id",
        "state",
        "toolName",
        "arguments",
        "interaction",
        "claim",
        "attempt",
        "generation",
    ):
        assert key in bash, key
    assert bash["id"] == bash_id and bash["state"] == "awaiting_approval"
    assert bash["toolName"] == "bash" and bash["arguments"] == {"command": "ls"}
    assert bash["interaction"]["kind"] == "approval"
    assert bash["interaction"]["request"]["suggestedRules"][0]["pattern"] == "ls"
    assert bash["claim"] is None and bash["attempt"] == 1 and bash["generation"] == 0

    claim = claim_acquire(call_id=notes_id, worker="worker-7")
    running = api.get(f"{API}/tool-calls/{notes_id}").json()
    assert running["state"] == "running" and running["generation"] == 1
    assert running["claim"]["worker"] == "worker-7"
    assert running["claim"]["generation"] == 1
    assert ISO_MS.match(running["claim"]["expiresAt"])
    assert running["interaction"] is None
    call_settle(
        call_id=notes_id,
        outcome="completed",
        guard=ClaimGuard(claim.token, claim.generation),
        result={"ok": True},
        text="ok",
    )
    settled = api.get(f"{API}/tool-calls/{notes_id}").json()
    assert set(settled) == {"id", "outcome", "response"}
    assert settled["id"] == notes_id and settled["outcome"] == "completed"
    response = settled["response"]
    assert response["type"] == "tool_call_response" and response["toolCallId"] == notes_id
    assert response["payload"]["outcome"] == "completed"
    assert response["payload"]["providerCallId"] == posted.body["toolCalls"][1]["providerCallId"]


@pytest.mark.django_db
def test_call_details_shape(api, user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("notes", {"q": "x"})).call_ids
    unfinished = api.get(f"{API}/tool-calls/{call_id}/details").json()
    assert unfinished["id"] == str(call_id) and unfinished["state"] == "ready"
    assert unfinished["outcome"] is None and unfinished["assets"] == []
    assert unfinished["modelContent"] is None
    event = settle_host(call_id, result={"answer": 42}, text="forty-two")
    details = api.get(f"{API}/tool-calls/{call_id}/details").json()
    assert details["id"] == str(call_id) and details["state"] is None
    assert details["outcome"] == "completed"
    assert details["modelContent"] == event.payload["modelContent"]
    assert details["userProjection"] == event.payload["userProjection"]
    update = details["toolUpdate"]
    assert isinstance(update["rev"], int) and update["rev"] >= 1
    assert update["status"] == "completed"
    (asset,) = details["assets"]
    assert {"id", "kind", "size", "sha256", "path", "truncated"} <= set(asset)
    row = Asset.objects.get(pk=asset["id"])
    assert asset["kind"] == "payload" and asset["size"] == row.size
    assert asset["sha256"] == row.sha256 and asset["truncated"] is False
    path = Path(asset["path"])
    assert path.is_absolute() and path.read_bytes() == b'{"answer":42}'


def bash_awaiting_approval(user):
    """A model's ``bash`` call awaiting approval (its default decision is ``ask``): the
    conversation, the call id and its resolution URL."""
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("bash", {"command": "ls"})).call_ids
    return conversation, call_id, f"{API}/tool-calls/{call_id}/resolution"


@pytest.mark.django_db
def test_resolution_needs_run_commands_for_bash(api, user):
    conversation, call_id, url = bash_awaiting_approval(user)
    allow = {"requestId": "r1", "kind": "approval", "decision": "allow"}
    assert_error(api.post_json(url, allow), 403, "forbidden")
    call = ToolCall.objects.get(pk=call_id)
    assert call.state == "awaiting_approval" and call.resolution is None
    grant_run_commands(user)
    response = api.post_json(url, allow)
    assert response.status_code == 200, response.content
    assert state_of(call_id) == "ready"


@pytest.mark.django_db
def test_deny_needs_no_permission_and_settles_denied(api, user):
    """Only approving an execute tool needs tools.run_commands (docs/subsystems/interactions.md)."""
    _, call_id, url = bash_awaiting_approval(user)
    deny = {"requestId": "r1", "kind": "approval", "decision": "deny"}
    response = api.post_json(url, deny)
    assert response.status_code == 200, response.content
    assert outcome_of(call_id) == "denied"


@pytest.mark.django_db
def test_resolution_idempotency_conflicts_and_deny(api, user):
    grant_run_commands(user)
    conversation, call_id, url = bash_awaiting_approval(user)
    deny = {"requestId": "r1", "kind": "approval", "decision": "deny"}
    first = api.post_json(url, deny)
    assert first.status_code == 200, first.content
    answer = first.json()
    assert answer["toolCallId"] == str(call_id) and answer["requestId"] == "r1"
    assert answer["resolvedBy"] == user.get_username()
    # Deny settles denied with reason "Approval denied.".
    settled = api.get(f"{API}/tool-calls/{call_id}").json()
    assert settled["outcome"] == "denied"
    payload = settled["response"]["payload"]
    assert payload["resolutionRequestId"] == "r1"
    assert payload["resolvedBy"] == user.get_username()
    assert payload["interaction"]["kind"] == "approval"
    assert "Approval denied." in json.dumps(payload["modelContent"])

    # The same resolution again, after settlement: the recorded answer.
    again = api.post_json(url, deny)
    assert again.status_code == 200 and again.json() == answer
    count = ConversationEvent.objects.filter(conversation=conversation).count()
    # Any other second resolution names the recorded one.
    for other in (
        {**deny, "decision": "allow"},
        {**deny, "requestId": "r2"},
        {**deny, "persist": True},
    ):
        error = assert_error(api.post_json(url, other), 409, "resolution_conflict")
        assert '"r1"' in error["message"] and '"decision":"deny"' in error["message"]
    assert ConversationEvent.objects.filter(conversation=conversation).count() == count


@pytest.mark.django_db
def test_resolution_is_idempotent_while_unfinished_and_after_settlement(api, user):
    grant_run_commands(user)
    conversation, call_id, url = bash_awaiting_approval(user)
    allow = {"requestId": "r1", "kind": "approval", "decision": "allow"}
    first = api.post_json(url, allow).json()
    assert state_of(call_id) == "ready"
    assert api.post_json(url, allow).json() == first
    assert_error(
        api.post_json(url, {**allow, "decision": "deny"}),
        409,
        "resolution_conflict",
    )
    assert state_of(call_id) == "ready"
    settle_host(call_id, text="listing")
    after = api.post_json(url, allow)
    assert after.status_code == 200 and after.json() == first
    assert_error(
        api.post_json(url, {**allow, "requestId": "r9"}),
        409,
        "resolution_conflict",
    )


@pytest.mark.django_db
def test_resolution_of_a_call_not_awaiting_is_409(api, user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    ready, bash = assistant_calls(
        conversation, turn_id, ("notes", {}), ("bash", {"command": "ls"})
    ).call_ids
    approval = {"requestId": "r", "kind": "approval", "decision": "allow"}
    assert_error(
        api.post_json(f"{API}/tool-calls/{ready}/resolution", approval), 409, "not_awaiting"
    )
    answer = {"requestId": "r", "kind": "input", "value": {"answers": {}}}
    assert_error(api.post_json(f"{API}/tool-calls/{bash}/resolution", answer), 409, "not_awaiting")
    settle_host(ready)
    assert_error(
        api.post_json(f"{API}/tool-calls/{ready}/resolution", approval), 409, "not_awaiting"
    )
    assert state_of(bash) == "awaiting_approval"


QUESTIONS = [
    {"id": "q1", "question": "Proceed?", "options": ["yes", "no"]},
    {"id": "q2", "question": "Which files?", "options": ["a", "b", "c"], "multiple": True},
]


def awaiting_input_call(user) -> str:
    """An ``ask_user`` call: its handler (run by the server at once) moved it ``running`` →
    ``awaiting_input`` with the questions and released its claim."""
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(
        conversation, turn_id, ("ask_user", {"questions": QUESTIONS})
    ).call_ids
    call = ToolCall.objects.get(pk=call_id)
    assert call.state == "awaiting_input"
    assert call.interaction == {"kind": "input", "request": {"questions": QUESTIONS}}
    assert call.generation == 1 and not ExecutionClaim.objects.filter(call_id=call_id).exists()
    return str(call_id)


@pytest.mark.django_db
def test_input_resolution_settles_completed_and_is_idempotent(api, user):
    call_id = awaiting_input_call(user)
    url = f"{API}/tool-calls/{call_id}/resolution"
    approval = {"requestId": "r0", "kind": "approval", "decision": "allow"}
    assert_error(api.post_json(url, approval), 409, "not_awaiting")
    answer = {
        "requestId": "r1",
        "kind": "input",
        "value": {"answers": {"q1": "yes", "q2": ["a", "c"]}},
    }
    first = api.post_json(url, answer)
    assert first.status_code == 200, first.content
    assert first.json()["resolvedBy"] == user.get_username()
    settled = api.get(f"{API}/tool-calls/{call_id}").json()
    assert settled["outcome"] == "completed"
    payload = settled["response"]["payload"]
    # Questions and the recorded answer stay in the response for the question card.
    assert payload["interaction"]["request"]["questions"] == QUESTIONS
    assert payload["resolution"]["value"] == answer["value"]
    assert "q2: a, c" in json.dumps(payload["modelContent"])
    assert api.post_json(url, answer).json() == first.json()
    other = {**answer, "value": {"answers": {"q1": "no", "q2": []}}}
    assert_error(api.post_json(url, other), 409, "resolution_conflict")


@pytest.mark.django_db
def test_approve_with_persist_saves_a_conversation_rule(api, user):
    grant_run_commands(user)
    conversation = new_conversation(user)
    elsewhere = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(
        conversation, turn_id, ("bash", {"command": "git status --short"})
    ).call_ids
    approve = {"requestId": "r1", "kind": "approval", "decision": "allow", "persist": True}
    assert api.post_json(f"{API}/tool-calls/{call_id}/resolution", approve).status_code == 200
    assert state_of(call_id) == "ready"
    rule = PermissionRule.objects.get()
    assert rule.conversation_id == conversation.pk
    assert rule.tool_name == "bash" and rule.pattern == "git status --short"
    assert rule.decision == "allow" and rule.source == "approval"
    assert rule.created_by_id == user.pk
    # The same command again in this conversation goes straight to ready …
    (next_id,) = assistant_calls(
        conversation, turn_id, ("bash", {"command": "git status --short"})
    ).call_ids
    assert state_of(next_id) == "ready"
    assert ToolCall.objects.get(pk=next_id).supervision["decision"] == "allow"
    # … another command still asks, and another conversation is not affected.
    (other_id,) = assistant_calls(conversation, turn_id, ("bash", {"command": "git push"})).call_ids
    assert state_of(other_id) == "awaiting_approval"
    other_turn = open_turn(elsewhere)
    (far_id,) = assistant_calls(
        elsewhere, other_turn, ("bash", {"command": "git status --short"})
    ).call_ids
    assert state_of(far_id) == "awaiting_approval"


@pytest.mark.django_db
@pytest.mark.parametrize("rule", [1, 1.0, "git *"], ids=["index", "integral-float", "pattern"])
def test_persist_may_name_the_suggested_rule_to_save(api, user, rule):
    grant_run_commands(user)
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(
        conversation, turn_id, ("bash", {"command": "git log -1"})
    ).call_ids
    suggested = ToolCall.objects.get(pk=call_id).interaction["request"]["suggestedRules"]
    assert [s["pattern"] for s in suggested] == ["git log -1", "git *"]
    approve = {"requestId": "r1", "kind": "approval", "decision": "allow", "persist": True}
    answer = api.post_json(f"{API}/tool-calls/{call_id}/resolution", {**approve, "rule": rule})
    assert answer.status_code == 200, answer.content
    assert answer.json()["resolution"]["rule"] == rule
    assert PermissionRule.objects.get().pattern == "git *"
    (next_id,) = assistant_calls(conversation, turn_id, ("bash", {"command": "git diff"})).call_ids
    assert state_of(next_id) == "ready"  # the wider rule allows other git commands


@pytest.mark.django_db
@pytest.mark.parametrize("rule", [2, "rm *", -1, True, ""])
def test_a_rule_that_names_no_suggestion_is_422_and_records_nothing(api, user, rule):
    grant_run_commands(user)
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(
        conversation, turn_id, ("bash", {"command": "git log -1"})
    ).call_ids
    body = {"requestId": "r1", "kind": "approval", "decision": "allow", "persist": True}
    answer = api.post_json(f"{API}/tool-calls/{call_id}/resolution", {**body, "rule": rule})
    assert answer.status_code == 422, answer.content
    assert answer.json()["error"]["field"] == "rule"
    call = ToolCall.objects.get(pk=call_id)
    assert (call.state, call.resolution) == ("awaiting_approval", None)
    assert not PermissionRule.objects.exists()


@pytest.mark.django_db
def test_cancel_one_call(api, user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    ready, bash, running = assistant_calls(
        conversation, turn_id, ("notes", {}), ("bash", {"command": "ls"}), ("notes", {"n": 2})
    ).call_ids
    claim_acquire(call_id=running, worker="w")
    for call_id, outcome in ((ready, "cancelled"), (bash, "cancelled"), (running, "indeterminate")):
        first = api.post_json(f"{API}/tool-calls/{call_id}/cancel")
        assert first.status_code == 200
        assert first.json() == {"outcome": outcome, "alreadySettled": False}
        assert outcome_of(call_id) == outcome
        again = api.post_json(f"{API}/tool-calls/{call_id}/cancel")
        assert again.status_code == 200
        assert again.json() == {"outcome": outcome, "alreadySettled": True}
    assert ConversationEvent.objects.filter(type="tool_call_response").count() == 3
    # A call that failed at once is already settled.
    (bad,) = assistant_calls(conversation, turn_id, ("read", {"path": 5})).call_ids
    assert api.post_json(f"{API}/tool-calls/{bad}/cancel").json() == {
        "outcome": "failed",
        "alreadySettled": True,
    }
    assert Turn.objects.get(pk=turn_id).status == "open"


# --- 3. turns ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_turn_cancel_settles_open_calls_and_leaves_the_turn_open(api, user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    ready, bash, running = assistant_calls(
        conversation, turn_id, ("notes", {}), ("bash", {"command": "ls"}), ("notes", {"n": 2})
    ).call_ids
    claim_acquire(call_id=running, worker="w")
    url = f"{API}/conversations/{conversation.pk}/turns/{turn_id}/cancel"
    response = api.post_json(url)
    assert response.status_code == 200
    body = response.json()
    assert body["turnId"] == turn_id
    assert sorted((r["toolCallId"], r["outcome"]) for r in body["results"]) == sorted(
        [(str(ready), "cancelled"), (str(bash), "cancelled"), (str(running), "indeterminate")]
    )
    assert not ToolCall.objects.filter(turn_id=turn_id).exists()
    assert Turn.objects.get(pk=turn_id).status == "open"
    assert not ConversationEvent.objects.filter(type="turn_ended").exists()
    # Still open: the model may go on, a new user message may not.
    message = {"messageId": "u9", "role": "user", "content": []}
    assert_error(
        api.post_json(f"{API}/conversations/{conversation.pk}/messages", message), 409, "turn_open"
    )
    more = {"messageId": "a9", "role": "assistant", "turnId": turn_id, "content": []}
    assert api.post_json(f"{API}/conversations/{conversation.pk}/messages", more).status_code == 201
    # Nothing open: an empty result.
    assert api.post_json(url).json() == {"turnId": turn_id, "results": []}


@pytest.mark.django_db
def test_turn_end_settles_then_appends_exactly_one_turn_ended(api, user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    ready, bash = assistant_calls(
        conversation, turn_id, ("notes", {}), ("bash", {"command": "ls"})
    ).call_ids
    url = f"{API}/conversations/{conversation.pk}/turns/{turn_id}/end"
    response = api.post_json(url, {"reason": "stopped"})
    assert response.status_code == 200
    assert response.json() == {"turnId": turn_id, "status": "ended"}
    types = [t for _, t in events_of(conversation)]
    assert types == [
        "user_message",
        "assistant_message",
        "tool_call_response",
        "tool_call_response",
        "turn_ended",
    ]
    assert outcome_of(ready) == "cancelled" and outcome_of(bash) == "cancelled"
    ended = ConversationEvent.objects.get(conversation=conversation, type="turn_ended")
    assert ended.payload == {"turnId": turn_id, "reason": "stopped"}
    assert Turn.objects.get(pk=turn_id).status == "ended"
    last = events_of(conversation)
    for body in ({}, {"reason": "completed"}, None):
        again = api.post_json(url, body)
        assert again.status_code == 200
        assert again.json() == {"turnId": turn_id, "status": "ended"}
    assert events_of(conversation) == last
    # A new turn may open now; its end defaults to reason completed.
    new_turn = open_turn(conversation)
    end = api.post_json(f"{API}/conversations/{conversation.pk}/turns/{new_turn}/end")
    assert end.status_code == 200
    latest = ConversationEvent.objects.filter(type="turn_ended").order_by("-sequence").first()
    assert latest.payload == {"turnId": new_turn, "reason": "completed"}


@pytest.mark.django_db
def test_queue_ack_is_idempotent_on_an_empty_queue(api, user):
    conversation = new_conversation(user)
    open_turn(conversation)
    url = f"{API}/conversations/{conversation.pk}/queue/ack"
    first = api.post_json(url, {"upTo": 1})
    assert first.status_code == 200
    assert first.json()["queue"] == []
    assert api.post_json(url, {"upTo": 1}).json() == first.json()


# --- 3. DELETE ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_delete_conversation_cancels_open_calls_then_deletes(
    api, user, django_capture_on_commit_callbacks
):
    conversation = new_conversation(user)
    keep = new_conversation(user)
    turn_id = open_turn(conversation)
    ready, bash, running, done = assistant_calls(
        conversation,
        turn_id,
        ("notes", {}),
        ("bash", {"command": "ls"}),
        ("notes", {"n": 2}),
        ("notes", {"n": 3}),
    ).call_ids
    claim_acquire(call_id=running, worker="w")
    settle_host(done, text="finished")
    folder = conversation_dir(conversation.pk)
    assert folder.is_dir()

    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(conversation_group(conversation.pk), channel)
    with django_capture_on_commit_callbacks(execute=True):
        response = api.delete(f"{API}/conversations/{conversation.pk}")
    assert response.status_code == 204
    assert response.content == b""
    assert "Content-Type" not in response  # no body, no type

    async def drain() -> list[dict[str, Any]]:
        import asyncio

        got = []
        while True:
            try:
                got.extend(unpack(await asyncio.wait_for(layer.receive(channel), timeout=0.5)))
            except TimeoutError:
                return got

    published = async_to_sync(drain)()
    responses = {
        m["event"]["toolCallId"]: m["event"]["payload"]["outcome"]
        for m in published
        if m.get("type") == "conversation.event" and m["event"]["type"] == "tool_call_response"
    }
    assert responses == {
        str(ready): "cancelled",
        str(bash): "cancelled",
        str(running): "indeterminate",
    }

    assert not Conversation.objects.filter(pk=conversation.pk).exists()
    assert not ConversationEvent.objects.filter(conversation_id=conversation.pk).exists()
    assert not ToolCall.objects.filter(conversation_id=conversation.pk).exists()
    assert not Turn.objects.filter(conversation_id=conversation.pk).exists()
    assert not Asset.objects.filter(conversation_id=conversation.pk).exists()
    assert not folder.exists()
    assert_error(api.get(f"{API}/conversations/{conversation.pk}"), 404, "not_found")
    assert_error(api.delete(f"{API}/conversations/{conversation.pk}"), 404, "not_found")
    assert_error(api.get(f"{API}/tool-calls/{done}"), 404, "not_found")
    assert Conversation.objects.filter(pk=keep.pk).exists()


# --- 3. assets ---------------------------------------------------------------------------------


def _payload_asset(user, result: Any) -> tuple[Asset, Path]:
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("notes", {})).call_ids
    event = settle_host(call_id, result=result)
    asset = Asset.objects.get(pk=event.payload["assetIds"][0])
    return asset, Path(settings.DATA_DIR) / asset.path


@pytest.mark.django_db
def test_asset_full_and_range_reads(api, user):
    asset, path = _payload_asset(user, {"text": "0123456789" * 10})
    data = path.read_bytes()
    size = len(data)
    assert asset.kind == "payload" and asset.size == size
    url = f"{API}/assets/{asset.pk}"

    full = api.get(url)
    assert full.status_code == 200
    assert b"".join(full.streaming_content) == data
    assert full["ETag"] == f'"{asset.sha256}"'
    assert full["X-Content-SHA256"] == asset.sha256
    assert full["Content-Length"] == str(size)
    assert full["Content-Type"] == "application/json"
    assert full["Accept-Ranges"] == "bytes"

    head = api.get(url, HTTP_RANGE="bytes=0-9")
    assert head.status_code == 206
    assert b"".join(head.streaming_content) == data[:10]
    assert head["Content-Range"] == f"bytes 0-9/{size}"
    assert head["Content-Length"] == "10"
    assert head["ETag"] == f'"{asset.sha256}"'

    suffix = api.get(url, HTTP_RANGE="bytes=-7")
    assert suffix.status_code == 206
    assert b"".join(suffix.streaming_content) == data[-7:]
    assert suffix["Content-Range"] == f"bytes {size - 7}-{size - 1}/{size}"

    open_ended = api.get(url, HTTP_RANGE="bytes=20-")
    assert open_ended.status_code == 206
    assert b"".join(open_ended.streaming_content) == data[20:]

    clipped = api.get(url, HTTP_RANGE=f"bytes=5-{size + 100}")
    assert clipped.status_code == 206
    assert b"".join(clipped.streaming_content) == data[5:]
    assert clipped["Content-Range"] == f"bytes 5-{size - 1}/{size}"

    for bad in (f"bytes={size}-", f"bytes={size + 10}-{size + 20}", "bytes=9-3", "bytes=-0"):
        refused = api.get(url, HTTP_RANGE=bad)
        assert_error(refused, 416, "range_not_satisfiable")
        assert refused["Content-Range"] == f"bytes */{size}"


@pytest.mark.django_db
def test_a_tampered_asset_is_409_and_serves_nothing(api, user):
    asset, path = _payload_asset(user, {"text": "original bytes"})
    url = f"{API}/assets/{asset.pk}"
    assert api.get(url).status_code == 200  # verified once (and maybe remembered)
    original = path.read_bytes()
    tampered = original.replace(b"original", b"ORIGINAL")
    assert len(tampered) == len(original)
    path.write_bytes(tampered)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    for headers in ({}, {"HTTP_RANGE": "bytes=0-3"}):
        response = api.get(url, **headers)
        assert_error(response, 409, "asset_corrupt")
        assert not response.streaming
        assert b"ORIGINAL" not in response.content
    assert_error(api.get(f"{url}/lines"), 409, "asset_corrupt")
    # Resized and then missing files are refused too.
    path.write_bytes(original + b" ")
    assert_error(api.get(url), 409, "asset_corrupt")
    path.unlink()
    assert_error(api.get(url), 409, "asset_corrupt")
    # Restored: served again.
    path.write_bytes(original)
    assert api.get(url).status_code == 200


@pytest.mark.django_db
def test_asset_lines_paging(api, user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("notes", {})).call_ids
    claim = claim_acquire(call_id=call_id, worker="w")
    stdout = attempt_dir(conversation.pk, call_id, claim.generation) / "stdout.txt"
    stdout.parent.mkdir(parents=True)
    stdout.write_text("".join(f"line {i}\n" for i in range(250)))
    event = call_settle(
        call_id=call_id,
        outcome="completed",
        guard=ClaimGuard(claim.token, claim.generation),
        result={"ok": True},
        text="ok",
        files=[AttemptFile(stdout, "stdout", truncated=True)],
    )
    asset = Asset.objects.get(pk__in=event.payload["assetIds"], kind="stdout")
    url = f"{API}/assets/{asset.pk}/lines"

    tail = api.get(url).json()
    assert set(tail) == {
        "lines",
        "offset",
        "limit",
        "totalLines",
        "nextOffset",
        "status",
        "path",
        "truncated",
    }
    assert tail["lines"] == [f"line {i}" for i in range(150, 250)]
    assert tail["offset"] == 150 and tail["limit"] == 100 and tail["totalLines"] == 250
    assert tail["nextOffset"] is None and tail["status"] is None
    assert tail["truncated"] is True
    assert tail["path"] == str(stdout.resolve())

    first = api.get(f"{url}?offset=0&limit=40").json()
    assert first["lines"] == [f"line {i}" for i in range(40)]
    assert first["nextOffset"] == 40
    middle = api.get(f"{url}?offset=240&limit=500").json()
    assert middle["lines"] == [f"line {i}" for i in range(240, 250)]
    assert middle["nextOffset"] is None
    whole = api.get(f"{url}?offset=0&limit=500").json()
    assert len(whole["lines"]) == 250 and whole["path"] is None
    past = api.get(f"{url}?offset=250").json()
    assert past["lines"] == [] and past["nextOffset"] is None
    for query, field in (("limit=501", "limit"), ("limit=0", "limit"), ("offset=-1", "offset")):
        assert_error(api.get(f"{url}?{query}"), 422, "validation_error", field=field)

    payload = Asset.objects.get(pk__in=event.payload["assetIds"], kind="payload")
    lines = api.get(f"{API}/assets/{payload.pk}/lines").json()
    assert lines["lines"] == ['{"ok":true}'] and lines["truncated"] is False


# --- 3. the turn barrier -------------------------------------------------------------------------


def _results(api, conversation, turn_id, wait: float = 0):
    response = api.get(f"{API}/conversations/{conversation.pk}/turns/{turn_id}/results?wait={wait}")
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"] == "application/json"
    return response.json()


@pytest.mark.django_db(transaction=True)
def test_turn_barrier_through_the_api(api, user):
    grant_run_commands(user)
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    assert _results(api, conversation, turn_id) == {"settled": True, "results": [], "queue": []}

    posted = assistant_calls(
        conversation,
        turn_id,
        ("notes", {"n": 1}),
        ("read", {"path": 5}),
        ("notes", {"n": 3}),
        ("bash", {"command": "ls"}),
        text="Working on it.",
    )
    first_notes, bad_read, second_notes, bash = (str(i) for i in posted.call_ids)
    started = time.monotonic()
    pending = _results(api, conversation, turn_id, wait=0)
    assert time.monotonic() - started < 2
    assert pending["settled"] is False
    assert set(pending) == {"settled", "pending"}
    assert sorted((p["toolCallId"], p["state"]) for p in pending["pending"]) == sorted(
        [(first_notes, "ready"), (second_notes, "ready"), (bash, "awaiting_approval")]
    )

    started = time.monotonic()
    waited = _results(api, conversation, turn_id, wait=0.5)
    assert waited["settled"] is False
    assert time.monotonic() - started >= 0.45

    # Settle out of order; approve and run the bash call.
    settle_host(second_notes, text="three")
    approve = {"requestId": "r", "kind": "approval", "decision": "allow"}
    assert api.post_json(f"{API}/tool-calls/{bash}/resolution", approve).status_code == 200
    settle_host(bash, text="listing")
    assert [p["toolCallId"] for p in _results(api, conversation, turn_id)["pending"]] == [
        first_notes
    ]
    settle_host(first_notes, text="one")

    started = time.monotonic()
    done = _results(api, conversation, turn_id, wait=10)
    assert time.monotonic() - started < 5
    assert done["settled"] is True and done["queue"] == []
    assert set(done) == {"settled", "results", "queue"}
    assert [r["contentIndex"] for r in done["results"]] == [1, 2, 3, 4]
    assert [r["toolCallId"] for r in done["results"]] == [first_notes, bad_read, second_notes, bash]
    assert [r["outcome"] for r in done["results"]] == [
        "completed",
        "failed",
        "completed",
        "completed",
    ]
    for result, block in zip(done["results"], posted.body["toolCalls"], strict=True):
        assert set(result) == {
            "toolCallId",
            "providerCallId",
            "contentIndex",
            "toolName",
            "outcome",
            "modelContent",
        }
        assert result["providerCallId"] == block["providerCallId"]
        assert result["toolName"] == block["toolName"]
        assert isinstance(result["modelContent"], list) and result["modelContent"]

    # Only the latest assistant message's calls count.
    (later,) = assistant_calls(conversation, turn_id, ("notes", {"n": 9})).call_ids
    assert _results(api, conversation, turn_id)["settled"] is False
    settle_host(later, text="nine")
    latest = _results(api, conversation, turn_id)
    assert [r["toolCallId"] for r in latest["results"]] == [str(later)]
    assert latest["results"][0]["contentIndex"] == 0


@pytest.mark.django_db
@pytest.mark.parametrize("workspace", [".", "./", "a/.."])
def test_the_owners_root_itself_is_a_valid_workspace(api, workspace):
    """Not outside the root, so not refused (spec: only what resolves outside is 422)."""
    response = api.post_json(f"{API}/conversations", {"workspace": workspace})
    assert response.status_code == 201, response.content
    assert response.json()["workspace"] == workspace
