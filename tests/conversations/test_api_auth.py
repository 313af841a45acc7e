"""The REST API's owner scoping and authentication: bearer tokens, sessions with CSRF, public
docs (docs/subsystems/api.md, "Authentication" and "Owner scoping")."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from conversations.api.auth import token_create, token_revoke
from conversations.models import (
    ApiToken,
    Conversation,
    Turn,
)

from ..conftest import ApiClient
from .api_helpers import API, ROUTES, assert_error, build_world, filled, send, world_state
from .helpers import new_conversation

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
            response = send(other_api, method, filled(template, ids), filled(body, body_ids))
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
            response = send(api, method, filled(template, world.ids()))
            assert response.status_code == 200, (template, response.content[:300])


@pytest.mark.django_db(transaction=True)
def test_a_turn_of_another_conversation_is_not_found(user, api):
    world = build_world(user)
    mine = new_conversation(user)
    for method, template, body in ROUTES:
        if "{tid}" not in template or "{cid}" not in template:
            continue
        ids = {**world.ids(), "cid": str(mine.pk)}
        response = send(api, method, filled(template, ids), filled(body, ids))
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
            response = send(
                client, method, filled(template, world.ids()), filled(body, world.ids())
            )
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
