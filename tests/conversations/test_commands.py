"""Management commands: create_token, seed_demo, recover."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from conversations.auth import token_authenticate, token_digest
from conversations.models import ApiToken, Conversation, ConversationEvent, ToolCall
from conversations.services.claims import claim_acquire

from .helpers import assistant_calls, new_conversation, open_turn

pytestmark = pytest.mark.django_db


def _run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_create_token_prints_the_token_last_and_stores_only_its_digest(user):
    output = _run("create_token", user.username, "--name", "ci", "--scope", "host")
    token = output.strip().splitlines()[-1].split()[-1]
    row = ApiToken.objects.get(user=user)
    assert row.digest == token_digest(token) and token not in row.digest
    assert row.name == "ci" and row.scopes == ["host"]
    assert token_authenticate(token).pk == row.pk
    plain = _run("create_token", user.username)
    assert ApiToken.objects.get(digest=token_digest(plain.split()[-1])).scopes == []


def test_create_token_for_an_unknown_user_fails_clearly():
    with pytest.raises(CommandError, match="No user named"):
        _run("create_token", "nobody")


def test_seed_demo_is_idempotent_and_shows_something_real():
    first = _run("seed_demo")
    second = _run("seed_demo")
    assert Conversation.objects.filter(owner__username="demo").count() == 1
    conversation = Conversation.objects.get(owner__username="demo")
    assert (
        ConversationEvent.objects.filter(
            conversation=conversation, type="tool_call_response"
        ).count()
        == 1
    )
    assert ToolCall.objects.get(conversation=conversation).state == "awaiting_approval"
    tokens = [out.strip().splitlines()[-1].split()[-1] for out in (first, second)]
    assert tokens[0] != tokens[1] and all(token_authenticate(t) for t in tokens)
    assert "Admin login: demo /" in first


def test_recover_prints_what_it_did(user, settings):
    settings.TOOLCORE_CLAIM_LEASE = -1  # every claim is already expired
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("notes", {})).call_ids
    claim_acquire(call_id=call_id, worker="dead-worker")
    output = _run("recover")
    assert f"{call_id}: settled indeterminate (claim expired)" in output
    assert "Recovery done: 1 action(s)." in output
    assert ConversationEvent.objects.get(tool_call_id=call_id).payload["outcome"] == "indeterminate"


def test_the_home_page_links_admin_and_docs(client):
    response = client.get("/")
    assert response.status_code == 200
    assert b'href="/admin/"' in response.content and b'href="/api/v1/docs"' in response.content


def test_health_and_readiness(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {
        "status": "ready",
        "checks": {"database": "ok", "migrations": "ok", "channelLayer": "ok"},
    }
