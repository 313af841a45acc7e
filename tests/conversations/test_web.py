"""conversations/web.py: the pages' views (login, the conversation list, the transcript and the
workbench shells). What the pages do in a browser is tested in tests/browser/."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

import pytest
from django.contrib.staticfiles import finders
from django.templatetags.static import static

from conversations.models import Conversation

from .helpers import assistant_calls, new_conversation, open_turn

pytestmark = pytest.mark.django_db


def _config(response) -> dict:
    html = response.content.decode()
    start = html.index('<script id="toolcore-config" type="application/json">')
    body = html[start:].split(">", 1)[1].split("</script>", 1)[0]
    return json.loads(body)


def test_pages_send_a_visitor_to_the_login(client):
    for path in ("/", "/workbench/", "/c/00000000-0000-4000-8000-000000000000/"):
        response = client.get(path)
        assert response.status_code == 302
        assert response["Location"] == f"/accounts/login/?next={path}"


def test_the_login_page_links_admin_and_docs(client):
    response = client.get("/accounts/login/")
    assert response.status_code == 200
    assert b'href="/admin/"' in response.content and b'href="/api/v1/docs"' in response.content


def test_the_admin_keeps_its_own_login(client):
    response = client.get("/admin/")
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_logging_in_leads_to_the_conversation_list(client, user):
    response = client.post(
        "/accounts/login/", {"username": user.username, "password": "pw-for-tests"}
    )
    assert response.status_code == 302 and response["Location"] == "/"


def test_the_list_shows_open_turns_and_calls_waiting(client, user, other_user):
    quiet = new_conversation(user, title="quiet one")
    busy = new_conversation(user, title="busy one")
    turn_id = open_turn(busy)
    assistant_calls(busy, turn_id, ("bash", {"command": "make"}), ("bash", {"command": "ls"}))
    new_conversation(other_user, title="someone else's")
    client.force_login(user)
    html = client.get("/").content.decode()
    assert html.index("busy one") < html.index("quiet one")  # newest first
    assert "2 calls waiting" in html and "Open turn" in html
    assert "someone else" not in html
    assert f'href="/c/{quiet.pk}/"' in html


def test_the_list_says_how_to_add_this_server_to_an_mcp_client(client, user):
    client.force_login(user)
    html = client.get("/").content.decode()
    assert "Use Toolcore from an MCP client" in html
    assert "claude mcp add --transport http toolcore http://testserver/mcp/" in html
    assert '"url": "http://testserver/mcp/"' in html


def test_the_list_shows_times_in_utc_with_the_wires_form_for_the_hover(client, user):
    conversation = new_conversation(user, title="dated")
    Conversation.objects.filter(pk=conversation.pk).update(
        created_at=datetime(2026, 11, 29, 23, 43, 1, 123000, tzinfo=UTC)
    )
    client.force_login(user)
    html = client.get("/").content.decode()
    assert '<time datetime="2026-11-29T23:43:01.123Z">2026-11-29 23:43:01 UTC</time>' in html


def test_the_transcript_page_hands_its_script_the_conversation(client, user):
    conversation = new_conversation(user, title="<b>tagged</b>")
    client.force_login(user)
    response = client.get(f"/c/{conversation.pk}/")
    assert response.status_code == 200
    assert b"&lt;b&gt;tagged&lt;/b&gt;" in response.content  # escaped
    assert "csrftoken" in response.cookies
    config = _config(response)
    assert config["conversationId"] == str(conversation.pk)
    assert config["socket"] == "/ws/conversations/" and config["api"] == "/api/v1"
    assert config["canRunCommands"] is False


def test_another_owners_conversation_is_not_found(client, user, other_user):
    conversation = new_conversation(other_user)
    client.force_login(user)
    assert client.get(f"/c/{conversation.pk}/").status_code == 404


def test_the_workbench_page(client, user):
    client.force_login(user)
    response = client.get("/workbench/")
    assert response.status_code == 200
    assert _config(response)["socket"] == "/ws/workbench/"


def test_the_pages_scripts_are_static_files():
    for name in (
        "fold.js",
        "common.js",
        "cards.js",
        "interactions.js",
        "command.js",
        "transcript.js",
        "style.css",
        "favicon.svg",
        "favicon.ico",
    ):
        assert finders.find(f"toolcore/{name}"), name


def test_the_site_has_an_icon_and_nothing_asks_for_a_missing_one(client, user, caplog):
    """Every admin page logged "Not Found: /favicon.ico": the root answers it now, and the
    pages and the admin link the SVG icon."""
    caplog.set_level(logging.WARNING, logger="django.request")
    icon = client.get("/favicon.ico")
    assert icon.status_code == 200 and icon["Content-Type"] == "image/x-icon"
    assert icon.content[:4] == b"\x00\x00\x01\x00"  # an ICO header
    assert "max-age" in icon["Cache-Control"]
    link = f'<link rel="icon" href="{static("toolcore/favicon.svg")}" type="image/svg+xml">'
    assert link in client.get("/accounts/login/").content.decode()
    assert link in client.get("/admin/login/").content.decode()
    client.force_login(user)
    assert link in client.get("/").content.decode()
    assert [r for r in caplog.records if r.name == "django.request"] == []
    assert client.post("/favicon.ico").status_code == 405  # read only
