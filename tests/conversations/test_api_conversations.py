"""/conversations: create, list, read, delete (docs/subsystems/api.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from conversations.models import (
    Asset,
    Conversation,
    ConversationEvent,
    ToolCall,
    Turn,
)
from conversations.services.claims import claim_acquire
from conversations.storage import conversation_dir

from .api_helpers import API, ISO_MS, assert_error, settle_host
from .helpers import assistant_calls, new_conversation, open_turn
from .host_helpers import Listener

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

    listener = Listener(conversation.pk)
    with django_capture_on_commit_callbacks(execute=True):
        response = api.delete(f"{API}/conversations/{conversation.pk}")
    assert response.status_code == 204
    assert response.content == b""
    assert "Content-Type" not in response  # no body, no type

    published = listener.drain()
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


@pytest.mark.django_db
@pytest.mark.parametrize("workspace", [".", "./", "a/.."])
def test_the_owners_root_itself_is_a_valid_workspace(api, workspace):
    """Not outside the root, so not refused (spec: only what resolves outside is 422)."""
    response = api.post_json(f"{API}/conversations", {"workspace": workspace})
    assert response.status_code == 201, response.content
    assert response.json()["workspace"] == workspace
