"""Bad input at the host tool port: 422 naming the field (413 over the body limit), nothing
changed; and the published OpenAPI document of the three operations, real answers checked
against it."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from conversations.models import ExecutionClaim

from .api_helpers import API, assert_error
from .helpers import state_of
from .host_helpers import (
    HOST_TOOL,
    claim,
    claim_one,
    png,
    ready_host_calls,
    settle,
    snapshot,
    update,
)
from .test_openapi import Checker

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"tools": [], "worker": "w"}, "tools"),
        ({"tools": ["bash"], "worker": "w"}, "tools"),
        ({"tools": [HOST_TOOL, "read", "ask_user"], "worker": "w"}, "tools"),
        ({"tools": [HOST_TOOL, "async_bash_logs"], "worker": "w"}, "tools"),
        ({"tools": [""], "worker": "w"}, "tools.0"),
        ({"tools": ["x" * 257], "worker": "w"}, "tools.0"),
        ({"tools": [HOST_TOOL] * 65, "worker": "w"}, "tools"),
        ({"tools": HOST_TOOL, "worker": "w"}, "tools"),
        ({"tools": [HOST_TOOL]}, "worker"),
        ({"tools": [HOST_TOOL], "worker": ""}, "worker"),
        ({"tools": [HOST_TOOL], "worker": "w" * 256}, "worker"),
        ({"tools": [HOST_TOOL], "worker": "w", "max": 0}, "max"),
        ({"tools": [HOST_TOOL], "worker": "w", "max": 101}, "max"),
        ({"tools": [HOST_TOOL], "worker": "w", "max": "2"}, "max"),
        ({"tools": [HOST_TOOL], "worker": "w", "max": 1.5}, "max"),
        ({"tools": [HOST_TOOL], "worker": "w", "max": True}, "max"),
        ({"tools": [HOST_TOOL], "worker": "w", "limit": 2}, "limit"),
    ],
)
def test_bad_claims_are_422_and_claim_nothing(user, api, body, field):
    _, _, (call_id,) = ready_host_calls(user)
    error = assert_error(api.post_json(f"{API}/host/claims", body), 422, "validation_error")
    assert error["field"] == field and error["message"].startswith(field)
    assert state_of(call_id) == "ready"


def test_a_core_tool_is_named_in_the_refusal(user, api):
    error = assert_error(claim(api, tools=[HOST_TOOL, "ls", "bash"]), 422, "validation_error")
    assert error["message"].startswith("tools: bash, ls are run by the server's own workers")


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"status": "completed"}, "update.status"),
        ({"status": "awaiting_input"}, "update.status"),
        ({"rev": 9}, "update.rev"),
        ({"output": {"text": "bounded"}}, "update.output"),
        ({"output": 3}, "update.output"),
        ({"output": "a", "outputDelta": "b"}, "update.outputDelta"),
        ({"outputDelta": ""}, "update.outputDelta"),
        ({"outputDelta": "x" * 16385}, "update.outputDelta"),
        ({"kind": "shell"}, "update.kind"),
        ({"title": "t" * 257}, "update.title"),
        ({"locations": [{"path": ""}]}, "update.locations"),
        ({"lineChanges": {"added": -1, "removed": 0}}, "update.lineChanges"),
        ({"interaction": None}, "update.interaction"),
        ({"startedAt": "2026-01-01T00:00:00.000Z"}, "update.startedAt"),
        ({"finishedAt": "2026-01-01T00:00:00.000Z"}, "update.finishedAt"),
        ({"toolCallId": "00000000-0000-4000-8000-000000000000"}, "update.toolCallId"),
        ({"turnId": "another"}, "update.turnId"),
        ({"toolName": "bash"}, "update.toolName"),
        ({"progress": 0.5}, "update.progress"),
    ],
)
def test_bad_updates_are_422_naming_the_field_and_change_nothing(user, api, fields, field):
    conversation, _, (call_id,) = ready_host_calls(user)
    held = claim_one(api, call_id)
    before = snapshot(conversation)
    error = assert_error(update(api, call_id, held, fields), 422, "validation_error")
    assert error["field"] == field and error["message"].startswith(f"{field}:")
    assert snapshot(conversation) == before


def test_an_update_may_name_its_own_call_and_bounds_its_input(user, api):
    _, turn_id, (call_id,) = ready_host_calls(user)
    held = claim_one(api, call_id)
    own = {"toolCallId": call_id, "turnId": turn_id, "toolName": HOST_TOOL, "status": "pending"}
    assert update(api, call_id, held, own).status_code == 200
    big = {"query": "q" * 10_000}
    assert update(api, call_id, held, {"input": big}).status_code == 200
    details = api.get(f"{API}/tool-calls/{call_id}/details").json()["toolUpdate"]
    assert details["status"] == "pending"
    assert len(details["input"]["query"]) < 2048 and details["input"]["query"].endswith("…")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"token": "not-a-uuid"}, "token"),
        ({"generation": 0}, "generation"),
        ({"generation": "1"}, "generation"),
        ({"update": []}, "update"),
        ({"update": None}, "update"),
    ],
)
def test_bad_update_envelopes_are_422(user, api, body, field):
    _, _, (call_id,) = ready_host_calls(user)
    held = claim_one(api, call_id)
    response = update(api, call_id, held, {"status": "in_progress"}, **body)
    assert_error(response, 422, "validation_error", field=field)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"outcome": "denied"}, "outcome"),
        ({"outcome": "running"}, "outcome"),
        ({"content": None}, "content"),
        ({"content": [{"type": "audio", "data": "AA=="}]}, "content.0.type"),
        ({"content": [{"type": "text"}]}, "content.0.text"),
        ({"content": [{"type": "text", "text": "a", "extra": 1}]}, "content.0.extra"),
        (
            {"content": [{"type": "image", "mediaType": "image/bmp", "data": "Qk0="}]},
            "content.0.mediaType",
        ),
        ({"content": [{"type": "image", "mediaType": "image/png", "data": ""}]}, "content.0.data"),
        (
            {
                "content": [
                    {"type": "text", "text": "a"},
                    {"type": "image", "mediaType": "image/png", "data": "not base64!"},
                ]
            },
            "content.1.data",
        ),
        (
            {"content": [{"type": "image", "mediaType": "image/png", "data": _b64(png())[:-2]}]},
            "content.0.data",
        ),
        (
            {"content": [{"type": "image", "mediaType": "image/jpeg", "data": _b64(png())}]},
            "content.0.data",
        ),
        (
            {"content": [{"type": "image", "mediaType": "image/png", "data": _b64(b"GIF89a...")}]},
            "content.0.data",
        ),
        ({"content": [{"type": "text", "text": "a"}] * 101}, "content"),
        ({"details": float("nan")}, "details"),
    ],
)
def test_bad_settlements_are_422_and_write_nothing(user, api, extra, field):
    conversation, _, (call_id,) = ready_host_calls(user)
    held = claim_one(api, call_id)
    before = snapshot(conversation)
    body = {"token": held["token"], "generation": 1, "outcome": "completed", "content": []}
    body.update(extra)
    text = json.dumps(body, allow_nan=True)
    response = api.generic(
        "POST", f"{API}/tool-calls/{call_id}/settle", text, content_type="application/json"
    )
    error = assert_error(response, 422, "validation_error")
    assert error["field"] == field, error
    assert snapshot(conversation) == before
    assert ExecutionClaim.objects.filter(call_id=call_id).exists()


def test_a_settlement_over_the_body_limit_is_413(user, api):
    conversation, _, (call_id,) = ready_host_calls(user)
    held = claim_one(api, call_id)
    before = snapshot(conversation)
    huge = _b64(png() + b"\0" * settings.TOOLCORE_MAX_BODY)
    image = {"type": "image", "mediaType": "image/png", "data": huge}
    assert_error(settle(api, call_id, held, [image]), 413, "payload_too_large")
    assert snapshot(conversation) == before


# --- the published document ----------------------------------------------------------------------


@pytest.fixture
def document() -> dict[str, Any]:
    return json.loads(Client().get(f"{API}/openapi.json").content)


def _described(document, method: str, template: str) -> str:
    return " ".join(document["paths"][API + template][method]["description"].split())


def test_the_host_operations_say_what_a_host_must_know(document):
    claims = _described(document, "post", "/host/claims")
    for words in ("`max` (1…100, default 1)", "`host` scope", "`tools`", '{"claims": []}'):
        assert words in claims, words
    updates = _described(document, "post", "/tool-calls/{call_id}/updates")
    for words in ("whole output so far", "outputDelta", "`pending` or `in_progress`",
                  "renews", "stale_claim", "update.status"):  # fmt: skip
        assert words in updates, words
    settles = _described(document, "post", "/tool-calls/{call_id}/settle")
    for words in ("image/png", "base64", "`image` assets", "assetIds", "stale_claim", "details"):
        assert words in settles, words
    schemas = document["components"]["schemas"]
    image = schemas["HostImageBlock"]
    assert image["properties"]["mediaType"]["enum"] == [
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
    ]
    assert schemas["HostClaimsIn"]["properties"]["max"]["maximum"] == 100


def test_real_host_answers_match_the_published_schema(user, api, other_api, document):
    check = Checker(document)
    _, _, (call_id,) = ready_host_calls(user)
    claims, updates, settles = (
        "/host/claims",
        "/tool-calls/{call_id}/updates",
        "/tool-calls/{call_id}/settle",
    )
    (held,) = check(claim(api), "post", claims)["claims"]
    check(claim(api), "post", claims)  # empty
    check(claim(api, tools=["bash"]), "post", claims)  # 422
    check(Client().post(f"{API}/host/claims"), "post", claims)  # 401
    check(update(api, call_id, held, {"output": "o"}), "post", updates)
    check(update(api, call_id, held, {"status": "failed"}), "post", updates)  # 422
    check(update(other_api, call_id, held, {}), "post", updates)  # 404
    check(update(api, call_id, {**held, "generation": 5}, {}), "post", updates)  # 404: never given
    image = {"type": "image", "mediaType": "image/png", "data": _b64(png())}
    check(settle(api, call_id, held, [{"type": "text", "text": "t"}, image]), "post", settles)
    check(settle(api, call_id, held, []), "post", settles)  # 409: settled already
    check(update(api, call_id, held, {}), "post", updates)  # 409: settled already
    check(settle(other_api, call_id, held, []), "post", settles)  # 404
    statuses = {(template, status) for _, template, status in check.seen}
    for template in (updates, settles):
        assert {(template, s) for s in ("200", "404", "409")} <= statuses
    assert {(claims, s) for s in ("200", "401", "422")} <= statuses
