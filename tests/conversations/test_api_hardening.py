"""REST API hardening: non-finite numbers and deep nesting, the message event budget and the
tool-call cap, bounded error messages, integral floats, credentials judged alike on every
route, the bearer challenge, CSRF refusals and one log line per refusal."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from conversations.errors import NotFound, ValidationFailed, error_body
from conversations.models import Conversation, ConversationEvent, ToolCall, Turn
from conversations.services.message_limits import MAX_TOOL_CALLS
from projections.frames import REPLAY_BUDGET_BYTES
from projections.units import REASON_MAX_BYTES

from ..conftest import ApiClient
from .api_helpers import (
    API,
    assert_error,
    awaiting_input_call,
    build_world,
    compact_size,
    grant_run_commands,
    post_raw,
    world_state,
)
from .helpers import new_conversation, open_turn

MAX_DEPTH = 100  # arrays and objects in a body, the body itself counting 1


def message_url(conversation) -> str:
    return f"{API}/conversations/{conversation.pk}/messages"


def counts() -> tuple[int, int, int, int]:
    return (
        Conversation.objects.count(),
        ConversationEvent.objects.count(),
        Turn.objects.count(),
        ToolCall.objects.count(),
    )


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


# --- non-finite numbers -------------------------------------------------------------------------


def with_raw(body: dict[str, Any], raw: str) -> str:
    """``body`` as JSON with the string ``"@@"`` replaced by the raw JSON text ``raw``."""
    return json.dumps(body).replace('"@@"', raw)


def tool_call_body(turn_id: str, arguments: Any, message_id: str = "a1") -> dict[str, Any]:
    return {
        "messageId": message_id,
        "role": "assistant",
        "turnId": turn_id,
        "content": [
            {"type": "text", "text": "x"},
            {"type": "tool_call", "id": "p", "name": "notes", "arguments": arguments},
        ],
    }


@pytest.mark.django_db
@pytest.mark.parametrize("number", ["1e999", "-1e999", "NaN", "-Infinity"])
def test_non_finite_numbers_anywhere_are_422_naming_the_field(api, user, number):
    """A number that overflows a double is infinity, which cannot be stored: refused before
    validation with the path of the field, on every endpoint, and nothing is written."""
    grant_run_commands(user)
    world = build_world(user)
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    input_call = awaiting_input_call(user)
    before = (world_state(world), counts())
    ack = f"{API}/conversations/{world.conversation.pk}/queue/ack"
    cases: list[tuple[str, dict[str, Any] | None, str]] = [
        (f"{API}/conversations", {"title": "t", "workspace": "@@"}, "workspace"),
        (f"{API}/conversations", {"extra": {"deep": [1, 2, "@@"]}}, "extra.deep.2"),
        (
            message_url(conversation),
            tool_call_body(turn_id, {"n": [0, {"limit": "@@"}]}),
            "content.1.arguments.n.1.limit",
        ),
        (ack, {"upTo": "@@"}, "upTo"),
        (
            f"{API}/tool-calls/{world.open_id}/resolution",
            {"requestId": "r", "kind": "approval", "decision": "allow", "persist": "@@"},
            "persist",
        ),
        (
            f"{API}/tool-calls/{input_call}/resolution",
            {"requestId": "r", "kind": "input", "value": {"answers": {"q1": "@@"}}},
            "value.answers.q1",
        ),
        (ack, None, "body"),  # the whole body is the number
        (f"{API}/conversations", {"k\ud800": {"x.y": "@@"}}, "k\ufffd.x.y"),  # keys cleaned
    ]
    for url, body, field in cases:
        raw = number if body is None else with_raw(body, number)
        error = assert_error(post_raw(api, url, raw), 422, "validation_error", field=field)
        assert "finite" in error["message"], error
    assert (world_state(world), counts()) == before
    assert ToolCall.objects.get(pk=input_call).state == "awaiting_input"


@pytest.mark.django_db
def test_large_finite_numbers_are_stored_as_sent(api, user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    raw = with_raw(tool_call_body(turn_id, "@@"), '{"big": 1.5e308, "neg": -1e308, "tiny": 1e-999}')
    response = post_raw(api, message_url(conversation), raw)
    assert response.status_code == 201, response.content
    call = ToolCall.objects.get(conversation=conversation)
    assert call.arguments == {"big": 1.5e308, "neg": -1e308, "tiny": 0.0}


# --- nesting ----------------------------------------------------------------------------------------


def nested_raw(levels: int) -> str:
    """``levels`` objects inside each other, written by hand (no recursion to build it)."""
    return '{"a":' * levels + "1" + "}" * levels


@pytest.mark.django_db
def test_a_body_nested_up_to_the_limit_is_accepted(api, user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    # body (1) > content (2) > block (3) > arguments (4) > 96 more objects = 100 levels.
    raw = with_raw(tool_call_body(turn_id, "@@"), nested_raw(MAX_DEPTH - 3))
    response = post_raw(api, message_url(conversation), raw)
    assert response.status_code == 201, response.content[:300]
    stored = ToolCall.objects.get(conversation=conversation).arguments
    depth = 0
    while isinstance(stored, dict):
        stored, depth = stored["a"], depth + 1
    assert (depth, stored) == (MAX_DEPTH - 3, 1)


@pytest.mark.django_db
@pytest.mark.parametrize("over", [1, 400, 5000, 100_000])
def test_a_body_nested_deeper_says_so(api, user, over):
    """One level more than the limit, or far more than the parser follows: the same 422 saying
    the nesting is too deep, never "malformed" and never a 500."""
    grant_run_commands(user)
    world = build_world(user)
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    before = (world_state(world), counts())
    for url, body, depth_above in (
        (message_url(conversation), tool_call_body(turn_id, "@@"), 3),
        (f"{API}/conversations", {"title": "@@"}, 1),
        (f"{API}/conversations/{world.conversation.pk}/queue/ack", {"upTo": "@@"}, 1),
        (
            f"{API}/tool-calls/{world.open_id}/resolution",
            {"requestId": "r", "kind": "input", "value": "@@"},
            1,
        ),
    ):
        raw = with_raw(body, nested_raw(MAX_DEPTH - depth_above + over))
        error = assert_error(post_raw(api, url, raw), 422, "validation_error", field="body")
        assert f"deeper than {MAX_DEPTH} levels" in error["message"], error
    assert (world_state(world), counts()) == before


# --- the event budget and the tool-call cap ---------------------------------------------------------


def user_message(message_id: str, text: str) -> dict[str, Any]:
    return {"messageId": message_id, "role": "user", "content": [{"type": "text", "text": text}]}


def measured(message_id: str, text: str) -> int:
    """The event's size as the server measures it before writing: the widest sequence number,
    a turn id and a wire time in their places."""
    return compact_size(
        {
            "sequence": 2**63 - 1,
            "type": "user_message",
            "turnId": "00000000-0000-0000-0000-000000000000",
            "toolCallId": None,
            "payload": {"messageId": message_id, "content": [{"type": "text", "text": text}]},
            "createdAt": "2026-01-01T00:00:00.000Z",
        }
    )


@pytest.mark.django_db
def test_a_message_whose_event_passes_512_kib_is_413_and_writes_nothing(api, user):
    conversation = new_conversation(user)
    url = message_url(conversation)
    # "é" is 2 bytes of UTF-8: the body stays well under the 1 MiB body limit.
    base = measured("big", "")
    fits = "é" * ((REPLAY_BUDGET_BYTES - base) // 2) + "x" * ((REPLAY_BUDGET_BYTES - base) % 2)
    assert measured("big", fits) == REPLAY_BUDGET_BYTES
    over = fits + "x"
    body = json.dumps(user_message("big", over), ensure_ascii=False).encode()
    assert len(body) < settings.TOOLCORE_MAX_BODY
    error = assert_error(post_raw(api, url, body), 413, "payload_too_large", field="content")
    assert "512 KiB" in error["message"] and "524,288 bytes" in error["message"], error
    assert counts()[1:] == (0, 0, 0)

    # One byte less fits: stored, and replayed within the budget.
    body = json.dumps(user_message("big", fits), ensure_ascii=False).encode()
    response = post_raw(api, url, body)
    assert response.status_code == 201, response.content[:300]
    page = api.get(f"{API}/conversations/{conversation.pk}/events").json()
    (event,) = page["events"]
    assert event["payload"]["content"][0]["text"] == fits
    assert compact_size(event) <= REPLAY_BUDGET_BYTES
    # The same message again is recognised as a repeat, whatever its size.
    again = post_raw(api, url, body)
    assert again.status_code == 200 and again.json() == response.json()


@pytest.mark.django_db
def test_an_assistant_message_with_huge_arguments_is_413(api, user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    before = counts()
    body = {
        "messageId": "a1",
        "role": "assistant",
        "turnId": turn_id,
        "content": [
            {"type": "tool_call", "id": f"p{i}", "name": "notes", "arguments": {"x": "y" * 90_000}}
            for i in range(6)
        ],
    }
    error = assert_error(api.post_json(message_url(conversation), body), 413, "payload_too_large")
    assert "512 KiB" in error["message"]
    assert counts() == before


@pytest.mark.django_db
def test_at_most_128_tool_calls_per_message(api, user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    url = message_url(conversation)

    def body(message_id: str, calls: int) -> dict[str, Any]:
        blocks = [{"type": "text", "text": "t"}] * 5 + [
            {"type": "tool_call", "id": f"p{i}", "name": "notes", "arguments": {}}
            for i in range(calls)
        ]
        return {"messageId": message_id, "role": "assistant", "turnId": turn_id, "content": blocks}

    before = counts()
    error = assert_error(
        api.post_json(url, body("many", MAX_TOOL_CALLS + 1)),
        422,
        "validation_error",
        field="content",
    )
    assert str(MAX_TOOL_CALLS) in error["message"]
    assert counts() == before
    response = api.post_json(url, body("enough", MAX_TOOL_CALLS))
    assert response.status_code == 201, response.content[:300]
    assert len(response.json()["toolCalls"]) == MAX_TOOL_CALLS == 128
    assert ToolCall.objects.filter(conversation=conversation).count() == 128


# --- bounded error messages ----------------------------------------------------------------------


def assert_bounded(error: dict[str, Any]) -> None:
    assert utf8_len(error["message"]) <= REASON_MAX_BYTES, utf8_len(error["message"])
    if "field" in error:
        assert utf8_len(error["field"]) <= REASON_MAX_BYTES


@pytest.mark.django_db
def test_error_messages_built_from_user_input_stay_within_1_kib(api, user):
    conversation = new_conversation(user)
    url = message_url(conversation)
    # A 255-character messageId of 4-byte characters, recorded, then sent with other content.
    message_id = "😀" * 255
    assert api.post_json(url, user_message(message_id, "one")).status_code == 201
    error = assert_error(
        api.post_json(url, user_message(message_id, "two")), 409, "message_conflict"
    )
    assert_bounded(error)
    assert error["message"].endswith("…") and error["message"].startswith("Message 😀")

    # An unknown field whose name is 20,000 characters: field and message are cut.
    key = "k" * 20_000
    response = api.post_json(f"{API}/conversations", {key: 1})
    error = assert_error(response, 422, "validation_error")
    assert_bounded(error)
    assert error["field"].endswith("…") and error["field"].startswith("kkk")
    assert len(response.content) < 3 * REASON_MAX_BYTES

    # An answer to an unknown question with a huge id.
    call_id = awaiting_input_call(user)
    value = {"answers": {"q" * 5000: "yes"}}
    response = api.post_json(
        f"{API}/tool-calls/{call_id}/resolution",
        {"requestId": "r", "kind": "input", "value": value},
    )
    assert_bounded(assert_error(response, 422, "validation_error"))


def test_domain_errors_and_error_bodies_cut_on_a_code_point():
    exc = ValidationFailed("é" * 5000, field="ü" * 5000)
    assert utf8_len(exc.message) <= REASON_MAX_BYTES and exc.message.endswith("…")
    assert utf8_len(exc.field or "") <= REASON_MAX_BYTES
    assert utf8_len(str(exc)) <= REASON_MAX_BYTES
    body = NotFound("x" * 3000).body()
    assert utf8_len(body["error"]["message"]) <= REASON_MAX_BYTES
    built = error_body("code", "€" * 1000, "f" * 2000)["error"]
    assert utf8_len(built["message"]) <= REASON_MAX_BYTES
    assert built["message"] == "€" * 340 + "…"  # 1,020 + 3 bytes: no code point split
    assert utf8_len(built["field"]) <= REASON_MAX_BYTES
    assert error_body("c", "short", "f") == {
        "error": {"code": "c", "message": "short", "field": "f"}
    }


# --- integral floats -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_integral_floats_are_integers_strings_and_fractions_are_not(api, user):
    """``upTo`` is a JSON Schema ``integer``: ``3.0`` and ``1e2`` are integers, as the OpenAPI
    type says; ``3.5``, ``"3"`` and ``true`` are not."""
    conversation = new_conversation(user)
    url = f"{API}/conversations/{conversation.pk}/queue/ack"
    for raw in ("3", "3.0", "1e2", "0.0", "-0.0", "1E+2"):
        response = post_raw(api, url, with_raw({"upTo": "@@"}, raw))
        assert response.status_code == 200, (raw, response.content)
        assert response.json() == {"acknowledged": 0, "queue": []}
    for raw in ("3.5", '"3"', "true", "-1", "-1.0", "1e-2", "null"):
        assert_error(
            post_raw(api, url, with_raw({"upTo": "@@"}, raw)), 422, "validation_error", field="upTo"
        )
    # Query integers read the same way.
    assert api.get(f"{API}/conversations?limit=3.0").status_code == 200
    assert (
        api.get(f"{API}/conversations/{conversation.pk}/events?limit=5.0&after=0.0").status_code
        == 200
    )
    for query in ("limit=3.5", "limit=true"):
        assert_error(
            api.get(f"{API}/conversations?{query}"), 422, "validation_error", field="limit"
        )


# --- credentials ---------------------------------------------------------------------------------


def session_client(user, **headers) -> Client:
    client = Client(enforce_csrf_checks=True, **headers)
    client.force_login(user)
    return client


@pytest.mark.django_db(transaction=True)
def test_a_sent_authorization_header_is_judged_alone_on_every_route(user, other_user):
    """Sync routes and the async barrier agree: a request with an ``Authorization`` header is
    judged by it alone, a session coming along or not."""
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    sync_url = f"{API}/conversations/{conversation.pk}"
    barrier_url = f"{API}/conversations/{conversation.pk}/turns/{turn_id}/results"
    for header in ("Bearer tc_not-a-token", "Bearer ", "Basic dXNlcjpwdw==", "Token abc", "tc_x"):
        client = session_client(user, HTTP_AUTHORIZATION=header)
        for url in (sync_url, barrier_url, f"{API}/conversations"):
            response = client.get(url)
            assert_error(response, 401, "unauthorized")
            assert response["WWW-Authenticate"] == "Bearer", (header, url)
    # The session alone, and a valid token with another user's session, work alike too.
    for client in (session_client(user), session_client(other_user, **_bearer(user))):
        assert client.get(sync_url).status_code == 200
        assert client.get(barrier_url).json()["settled"] is True
    # A valid token is the user it names, whoever's session comes along.
    client = session_client(user, **_bearer(other_user))
    assert_error(client.get(sync_url), 404, "not_found")
    assert_error(client.get(barrier_url), 404, "not_found")


def _bearer(user) -> dict[str, str]:
    from conversations.api.auth import token_create

    _, secret = token_create(user=user, name="t")
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


@pytest.mark.django_db(transaction=True)
def test_every_401_carries_the_bearer_challenge(user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    for client in (Client(), ApiClient("tc_revoked-or-unknown")):
        for method, path in (
            ("get", "/conversations"),
            ("post", "/conversations"),
            ("get", f"/conversations/{conversation.pk}/turns/{turn_id}/results?wait=0"),
            ("get", f"/tool-calls/{conversation.pk}"),
            ("delete", f"/conversations/{conversation.pk}"),
        ):
            response = getattr(client, method)(API + path)
            assert_error(response, 401, "unauthorized")
            assert response["WWW-Authenticate"] == "Bearer"
    assert Conversation.objects.filter(pk=conversation.pk).exists()
    # Other refusals carry no challenge.
    assert not client.get(f"{API}/nope").has_header("WWW-Authenticate")


@pytest.mark.django_db
def test_a_session_write_without_a_valid_csrf_token_is_403_csrf_failed(user):
    grant_run_commands(user)
    world = build_world(user)
    before = (world_state(world), counts())
    browser = session_client(user)
    writes = [
        (f"{API}/conversations", {"title": "x"}),
        (f"{API}/conversations/{world.conversation.pk}/queue/ack", {"upTo": 1}),
        (
            f"{API}/tool-calls/{world.open_id}/resolution",
            {"requestId": "r", "kind": "approval", "decision": "allow"},
        ),
        (f"{API}/tool-calls/{world.open_id}/cancel", None),
    ]
    browser.get("/admin/login/")  # sets the csrftoken cookie
    for extra in ({}, {"HTTP_X_CSRFTOKEN": "x" * 32}):
        for url, body in writes:
            data = "" if body is None else json.dumps(body)
            response = browser.post(url, data=data, content_type="application/json", **extra)
            error = assert_error(response, 403, "csrf_failed")
            assert "CSRF token is missing or wrong" in error["message"], error
            assert not response.has_header("WWW-Authenticate")
    response = browser.delete(f"{API}/conversations/{world.conversation.pk}")
    assert_error(response, 403, "csrf_failed")
    assert (world_state(world), counts()) == before
    # Reading needs no token, and the right token writes.
    assert browser.get(f"{API}/conversations").status_code == 200
    token = browser.cookies["csrftoken"].value
    created = browser.post(
        f"{API}/conversations", data="{}", content_type="application/json", HTTP_X_CSRFTOKEN=token
    )
    assert created.status_code == 201, created.content
    # No session at all is 401, not a CSRF refusal.
    anonymous = Client(enforce_csrf_checks=True)
    assert_error(
        anonymous.post(f"{API}/conversations", data="{}", content_type="application/json"),
        401,
        "unauthorized",
    )


# --- one log line per refusal ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_each_refusal_is_logged_once_with_method_path_status_and_code(user, caplog):
    world = build_world(user)
    api = ApiClient(_bearer(user)["HTTP_AUTHORIZATION"].split(" ", 1)[1])
    cid = world.conversation.pk
    messages_url = f"{API}/conversations/{cid}/messages"
    browser = session_client(user)
    requests = [
        (
            lambda: Client().get(f"{API}/conversations"),
            "GET",
            f"{API}/conversations",
            401,
            "unauthorized",
        ),
        (lambda: api.get(f"{API}/nope"), "GET", f"{API}/nope", 404, "not_found"),
        (lambda: api.get("/api/"), "GET", "/api/", 404, "not_found"),
        (
            lambda: api.get(f"{API}/conversations/{world.open_id}"),
            "GET",
            f"{API}/conversations/{world.open_id}",
            404,
            "not_found",
        ),
        (
            lambda: api.put(f"{API}/conversations"),
            "PUT",
            f"{API}/conversations",
            405,
            "method_not_allowed",
        ),
        (lambda: post_raw(api, messages_url, "{bad"), "POST", messages_url, 400, "malformed_json"),
        (
            lambda: post_raw(
                api, messages_url, '{"padding": "%s"}' % ("x" * settings.TOOLCORE_MAX_BODY)
            ),
            "POST",
            messages_url,
            413,
            "payload_too_large",
        ),
        (
            lambda: api.post_json(messages_url, {"role": "x"}),
            "POST",
            messages_url,
            422,
            "validation_error",
        ),
        (
            lambda: api.post_json(messages_url, user_message("m-new", "hi")),
            "POST",
            messages_url,
            409,
            "turn_open",
        ),
        (
            lambda: browser.post(
                f"{API}/conversations", data="{}", content_type="application/json"
            ),
            "POST",
            f"{API}/conversations",
            403,
            "csrf_failed",
        ),
        (
            lambda: api.get(f"{API}/conversations/{cid}/turns/{world.turn_id}/results?wait=99"),
            "GET",
            f"{API}/conversations/{cid}/turns/{world.turn_id}/results",
            422,
            "validation_error",
        ),
        (
            lambda: api.post(f"{API}/openapi.json"),
            "POST",
            f"{API}/openapi.json",
            405,
            "method_not_allowed",
        ),
    ]
    for send, method, path, status, code in requests:
        caplog.clear()
        with caplog.at_level(logging.DEBUG):
            response = send()
        assert response.status_code == status, (path, response.content[:200])
        logged = [r for r in caplog.records if r.levelno >= logging.INFO]
        assert len(logged) == 1, (path, [(r.name, r.getMessage()) for r in logged])
        assert logged[0].getMessage() == f"{method} {path} {status} {code}"
        assert logged[0].levelno == logging.WARNING
        assert not [r for r in caplog.records if r.name.startswith("django.")], path
    # A success logs no refusal.
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        assert api.get(f"{API}/conversations").status_code == 200
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
