"""Bad input through the REST API (docs/subsystems/api.md, "Errors"): always a 4xx JSON error body of the
documented shape, never a 500 and never a partial write."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.conf import settings
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from conversations.models import ApiToken, Conversation, ConversationEvent, ToolCall, Turn
from tools.models import PermissionRule

from .api_helpers import (
    API,
    assert_error,
    awaiting_input_call,
    build_world,
    grant_run_commands,
    post_raw,
    world_state,
)
from .helpers import assistant_calls, new_conversation, open_turn

MIB = 1024 * 1024


class Target:
    """A conversation with an open turn, a bash call awaiting approval and a settled host call
    with an asset: something for every POST endpoint to act on."""

    def __init__(self, user) -> None:
        self.world = build_world(user)
        cid = self.world.conversation.pk
        self.endpoints: dict[str, tuple[str, dict[str, Any]]] = {
            "create": (f"{API}/conversations", {"title": "t", "workspace": "ws"}),
            "message": (
                f"{API}/conversations/{cid}/messages",
                {
                    "messageId": "a-new",
                    "role": "assistant",
                    "turnId": self.world.turn_id,
                    "content": [{"type": "text", "text": "hi"}],
                },
            ),
            "command": (
                f"{API}/conversations/{cid}/commands",
                {"inputId": "in", "command": "ls", "includeInContext": True},
            ),
            "ack": (f"{API}/conversations/{cid}/queue/ack", {"upTo": 1}),
            "end": (
                f"{API}/conversations/{cid}/turns/{self.world.turn_id}/end",
                {"reason": "stopped"},
            ),
            "resolution": (
                f"{API}/tool-calls/{self.world.open_id}/resolution",
                {"requestId": "r", "kind": "approval", "decision": "deny", "persist": False},
            ),
        }

    def state(self) -> dict[str, Any]:
        return {
            **world_state(self.world),
            "conversations": Conversation.objects.count(),
            "all_events": ConversationEvent.objects.count(),
        }


@pytest.fixture
def target(user) -> Target:
    grant_run_commands(user)
    return Target(user)


ENDPOINTS = ["create", "message", "command", "ack", "end", "resolution"]


# --- malformed and non-object bodies -------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_malformed_json_is_400(api, target, endpoint):
    url, valid = target.endpoints[endpoint]
    before = target.state()
    text = json.dumps(valid)
    for raw in (
        "{bad",
        text[:-1],
        text + "}",
        text.replace(":", "=", 1),
        "{'single': 'quotes'}",
        '{"a": 1,}',
        b"\xff\xfe\x00{",
    ):
        response = post_raw(api, url, raw)
        assert_error(response, 400, "malformed_json")
    assert target.state() == before


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_422_naming_the_field(api, target, endpoint, literal):
    """Not JSON numbers, and not storable: refused like ``1e999``, naming where they stand."""
    url, valid = target.endpoints[endpoint]
    before = target.state()
    key = next(iter(valid))
    raw = json.dumps({**valid, key: "@@"}).replace('"@@"', literal)
    assert_error(post_raw(api, url, raw), 422, "validation_error", field=key)
    nested = json.dumps({**valid, "extra": ["@@"]}).replace('"@@"', literal)
    assert_error(post_raw(api, url, nested), 422, "validation_error", field="extra.0")
    assert target.state() == before


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_body_that_is_not_an_object_is_422(api, target, endpoint):
    url, _ = target.endpoints[endpoint]
    before = target.state()
    for raw in ("[]", '[{"a": 1}]', '"text"', "42", "true"):
        response = post_raw(api, url, raw)
        assert_error(response, 422, "validation_error")
    assert target.state() == before


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ["create", "message", "command", "ack", "resolution"])
def test_an_empty_body_is_422_where_a_body_is_required(api, target, endpoint):
    url, _ = target.endpoints[endpoint]
    before = target.state()
    response = post_raw(api, url, b"")  # no body, no Content-Type (curl -X POST)
    if endpoint == "create":  # every field is optional, so is the body
        assert response.status_code == 201, response.content
        return
    assert_error(response, 422, "validation_error", field="body")
    assert target.state() == before


# --- wrong types, unknown and missing fields, huge strings ---------------------------------------


CASES: dict[str, list[tuple[dict[str, Any], str]]] = {
    # (a change to the valid body, the field the error names)
    "create": [
        ({"title": 5}, "title"),
        ({"title": ["x"]}, "title"),
        ({"workspace": {"a": 1}}, "workspace"),
        ({"workspace": ""}, "workspace"),
        ({"title": "x" * 201}, "title"),
        ({"workspace": "w" * 1025}, "workspace"),
        ({"owner": 1}, "owner"),
        ({"id": str(uuid.uuid4())}, "id"),
    ],
    "message": [
        ({"messageId": 5}, "messageId"),
        ({"messageId": ""}, "messageId"),
        ({"messageId": "m" * 256}, "messageId"),
        ({"messageId": None}, "messageId"),
        ({"role": "system"}, "role"),
        ({"role": None}, "role"),
        ({"turnId": "not-a-uuid"}, "turnId"),
        ({"turnId": 7}, "turnId"),
        ({"content": "hi"}, "content"),
        ({"content": {"type": "text"}}, "content"),
        ({"content": [{"type": "image", "url": "x"}]}, "content.0.type"),
        ({"content": [{"type": "text"}]}, "content.0.text"),
        ({"content": [{"type": "text", "text": 5}]}, "content.0.text"),
        ({"content": [{"type": "text", "text": "x", "extra": 1}]}, "content.0.extra"),
        (
            {"content": [{"type": "tool_call", "id": "p", "name": "bash", "arguments": []}]},
            "content.0.arguments",
        ),
        (
            {"content": [{"type": "tool_call", "id": "p", "name": "", "arguments": {}}]},
            "content.0.name",
        ),
        (
            {"content": [{"type": "tool_call", "id": "p" * 256, "name": "n", "arguments": {}}]},
            "content.0.id",
        ),
        ({"content": [{"type": "text", "text": "x"}] * 1001}, "content"),
        ({"sender": "me"}, "sender"),
    ],
    "command": [
        ({"inputId": 1}, "inputId"),
        ({"inputId": "i" * 256}, "inputId"),
        ({"command": ""}, "command"),
        ({"command": ["ls"]}, "command"),
        ({"command": "x" * 65537}, "command"),
        ({"includeInContext": [True]}, "includeInContext"),
        ({"includeInContext": "perhaps"}, "includeInContext"),
        ({"includeInContext": "yes"}, "includeInContext"),
        ({"includeInContext": 1}, "includeInContext"),
        ({"cwd": "/"}, "cwd"),
    ],
    "ack": [
        ({"upTo": "abc"}, "upTo"),
        ({"upTo": -1}, "upTo"),
        ({"upTo": 1.5}, "upTo"),
        ({"upTo": None}, "upTo"),
        ({"upTo": [1]}, "upTo"),
        ({"upTo": True}, "upTo"),
        ({"upTo": "3"}, "upTo"),
        ({"all": True}, "all"),
    ],
    "end": [
        ({"reason": "command"}, "reason"),
        ({"reason": "whatever"}, "reason"),
        ({"reason": 1}, "reason"),
        ({"force": True}, "force"),
    ],
    "resolution": [
        ({"requestId": 1}, "requestId"),
        ({"requestId": ""}, "requestId"),
        ({"requestId": "r" * 256}, "requestId"),
        ({"decision": "maybe"}, "decision"),
        ({"persist": "sometimes"}, "persist"),
        ({"persist": "true"}, "persist"),
        ({"note": "x"}, "note"),
    ],
}


MISSING: dict[str, list[str]] = {
    "message": ["messageId", "role", "content"],
    "command": ["inputId", "command", "includeInContext"],
    "ack": ["upTo"],
    "resolution": ["requestId", "decision"],
}


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_wrong_types_unknown_fields_and_huge_strings_are_422_naming_the_field(
    api, target, endpoint
):
    url, valid = target.endpoints[endpoint]
    before = target.state()
    for change, field in CASES[endpoint]:
        response = api.post_json(url, {**valid, **change})
        error = assert_error(response, 422, "validation_error")
        assert error.get("field") == field, (change, error)
        assert len(response.content) < 4096  # the error does not echo a huge input
    assert target.state() == before


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", sorted(MISSING))
def test_missing_required_fields_are_422_naming_the_field(api, target, endpoint):
    url, valid = target.endpoints[endpoint]
    before = target.state()
    for name in MISSING[endpoint]:
        body = {k: v for k, v in valid.items() if k != name}
        error = assert_error(api.post_json(url, body), 422, "validation_error")
        assert error["field"] == name, error
    assert target.state() == before


@pytest.mark.django_db
def test_a_resolution_of_an_unknown_kind_is_422(api, target):
    url, valid = target.endpoints["resolution"]
    for kind in ("other", None, 3):
        error = assert_error(api.post_json(url, {**valid, "kind": kind}), 422, "validation_error")
        assert error["field"] == "kind"
    error = assert_error(
        api.post_json(url, {k: v for k, v in valid.items() if k != "kind"}), 422, "validation_error"
    )
    assert error["field"] == "kind"
    assert ToolCall.objects.get(pk=target.world.open_id).resolution is None


@pytest.mark.django_db
def test_an_input_resolution_with_bad_answers_is_422_and_records_nothing(api, user):
    call_id = awaiting_input_call(user)
    url = f"{API}/tool-calls/{call_id}/resolution"
    for value, field in (
        ({"answers": "yes"}, "value.answers"),
        ({}, "value.answers"),
        ({"answers": {"q1": 5, "q2": []}}, "value.answers.q1"),
        ({"answers": {"q1": ["yes", "no"], "q2": []}}, "value.answers.q1"),
        ({"answers": {"q1": "yes"}}, "value.answers.q2"),
        ({"answers": {"q1": "yes", "q2": ["a"], "q3": "x"}}, "value.answers.q3"),
        ({"answers": {"q1": "yes", "q2": [1]}}, "value.answers.q2"),
    ):
        response = api.post_json(url, {"requestId": "r", "kind": "input", "value": value})
        assert_error(response, 422, "validation_error", field=field)
    for value in ("x", ["answers"], None):
        response = api.post_json(url, {"requestId": "r", "kind": "input", "value": value})
        assert_error(response, 422, "validation_error")
    call = ToolCall.objects.get(pk=call_id)
    assert call.state == "awaiting_input" and call.resolution is None
    # A valid answer is still accepted afterwards.
    good = {"answers": {"q1": "no", "q2": []}}
    response = api.post_json(url, {"requestId": "r", "kind": "input", "value": good})
    assert response.status_code == 200, response.content


@pytest.mark.django_db
def test_big_but_legal_strings_are_accepted(api, target):
    url, valid = target.endpoints["message"]
    text = "ü" * (250 * 1024)  # 500 KiB of UTF-8, under the 512 KiB event budget
    raw = json.dumps({**valid, "content": [{"type": "text", "text": text}]}, ensure_ascii=False)
    response = post_raw(api, url, raw.encode("utf-8"))
    assert response.status_code == 201, response.content[:300]
    stored = ConversationEvent.objects.get(message_id="a-new")
    assert stored.payload["content"][0]["text"] == text


# --- lone surrogates -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_lone_surrogates_in_a_message_are_stored_as_replacement_characters(api, user):
    """``"\\ud800"`` is valid JSON text; the server keeps U+FFFD in its place (docs/architecture.md, "Conventions")."""
    conversation = new_conversation(user)
    url = f"{API}/conversations/{conversation.pk}/messages"
    raw = (
        '{"messageId":"m\\ud800","role":"user","content":'
        '[{"type":"text","text":"a\\udfffb\\ud83d"},{"type":"text","text":"ok \\ud83d\\ude00"}]}'
    )
    response = post_raw(api, url, raw)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["event"]["payload"] == {
        "messageId": "m\ufffd",
        "content": [
            {"type": "text", "text": "a\ufffdb\ufffd"},
            {"type": "text", "text": "ok \U0001f600"},
        ],
    }
    stored = ConversationEvent.objects.get(conversation=conversation)
    assert stored.payload == body["event"]["payload"]
    # The same raw body again is the same message.
    again = post_raw(api, url, raw)
    assert again.status_code == 200 and again.json() == body
    events = api.get(f"{API}/conversations/{conversation.pk}/events")
    assert events.status_code == 200
    events.content.decode("utf-8")  # strict UTF-8: no surrogate leaked


@pytest.mark.django_db
def test_lone_surrogates_in_tool_arguments_are_replaced(api, user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    raw = json.dumps(
        {
            "messageId": "a1",
            "role": "assistant",
            "turnId": turn_id,
            "content": [
                {
                    "type": "tool_call",
                    "id": "p\udc00",
                    "name": "notes",
                    "arguments": {"k\ud800": ["v\udfff", {"deep": "\ud800"}]},
                }
            ],
        }
    )
    assert "\\ud800" in raw
    response = post_raw(api, f"{API}/conversations/{conversation.pk}/messages", raw)
    assert response.status_code == 201, response.content
    call = ToolCall.objects.get(conversation=conversation)
    assert call.arguments == {"k\ufffd": ["v\ufffd", {"deep": "\ufffd"}]}
    assert call.provider_call_id == "p\ufffd"


@pytest.mark.django_db
def test_lone_surrogates_in_other_bodies_are_replaced(api, user):
    grant_run_commands(user)
    created = post_raw(api, f"{API}/conversations", '{"title":"t\\ud800","workspace":"w\\udc00"}')
    assert created.status_code == 201, created.content
    assert created.json()["title"] == "t\ufffd" and created.json()["workspace"] == "w\ufffd"
    cid = created.json()["id"]
    command = post_raw(
        api,
        f"{API}/conversations/{cid}/commands",
        '{"inputId":"i\\ud800","command":"echo \\udfff","includeInContext":true}',
    )
    assert command.status_code == 201, command.content
    turn = Turn.objects.get(pk=command.json()["turnId"])
    assert turn.input_id == "i\ufffd" and turn.command == "echo \ufffd"

    conversation = Conversation.objects.get(pk=cid)
    other = new_conversation(user)
    turn_id = open_turn(other)
    (bash,) = assistant_calls(other, turn_id, ("bash", {"command": "ls"})).call_ids
    resolved = post_raw(
        api,
        f"{API}/tool-calls/{bash}/resolution",
        '{"requestId":"r\\ud800","kind":"approval","decision":"allow"}',
    )
    assert resolved.status_code == 200, resolved.content
    assert resolved.json()["requestId"] == "r\ufffd"
    assert ToolCall.objects.get(pk=bash).resolution_request_id == "r\ufffd"
    assert conversation.title == "t\ufffd"


# --- body size ---------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_body_over_1_mib_is_413(api, target, endpoint):
    url, valid = target.endpoints[endpoint]
    before = target.state()
    raw = json.dumps({**valid, "padding": "x" * MIB})
    assert len(raw.encode()) > settings.TOOLCORE_MAX_BODY
    assert_error(post_raw(api, url, raw), 413, "payload_too_large")
    assert target.state() == before


@pytest.mark.django_db
def test_the_body_limit_is_inclusive(api, user):
    conversation = new_conversation(user)
    url = f"{API}/conversations/{conversation.pk}/messages"

    def body(message_id: str, size: int) -> bytes:
        # Padded with JSON whitespace: the body reaches the limit, the message's event stays
        # far below its own 512 KiB budget.
        shell = json.dumps(
            {"messageId": message_id, "role": "user", "content": [{"type": "text", "text": "y"}]}
        )
        raw = shell + " " * (size - len(shell))
        assert len(raw) == size
        return raw.encode()

    limit = settings.TOOLCORE_MAX_BODY
    assert_error(post_raw(api, url, body("over", limit + 1)), 413, "payload_too_large")
    assert not ConversationEvent.objects.exists()
    response = post_raw(api, url, body("at", limit))
    assert response.status_code == 201, response.content[:200]


@pytest.mark.django_db
def test_a_lying_content_length_is_refused(api, user):
    conversation = new_conversation(user)
    url = f"{API}/conversations/{conversation.pk}/messages"
    response = api.generic(
        "POST", url, b"{}", content_type="application/json", CONTENT_LENGTH="not-a-number"
    )
    assert_error(response, 400, response.json()["error"]["code"])


# --- query parameters ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_events_query_params_are_validated(api, user):
    conversation = new_conversation(user)
    open_turn(conversation)
    url = f"{API}/conversations/{conversation.pk}/events"
    for query, field in (
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=-5", "limit"),
        ("limit=abc", "limit"),
        ("limit=1.5", "limit"),
        ("after=-1", "after"),
        ("after=x", "after"),
    ):
        assert_error(api.get(f"{url}?{query}"), 422, "validation_error", field=field)
    assert_error(api.get(f"{url}?after=2"), 409, "cursor_ahead", field="after")
    assert_error(api.get(f"{url}?after={10**30}"), 409, "cursor_ahead", field="after")
    assert api.get(f"{url}?after=1&limit=100").status_code == 200
    assert api.get(f"{url}?limit=1").json()["nextAfter"] is None


@pytest.mark.django_db
def test_conversation_list_query_params_are_validated(api, user):
    url = f"{API}/conversations"
    for query in ("limit=0", "limit=101", "limit=x", f"limit={10**30}"):
        assert_error(api.get(f"{url}?{query}"), 422, "validation_error", field="limit")
    for cursor in ("%%%", "A" * 5000, "bm90IGEgY3Vyc29y"):
        assert_error(api.get(f"{url}?cursor={cursor}"), 422, "validation_error", field="cursor")
    assert api.get(f"{url}?limit=100").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_turn_results_wait_is_validated(api, user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    url = f"{API}/conversations/{conversation.pk}/turns/{turn_id}/results"
    for wait in ("61", "-1", "60.5", "x", "nan", "inf"):
        assert_error(api.get(f"{url}?wait={wait}"), 422, "validation_error", field="wait")
    assert api.get(f"{url}?wait=0").json()["settled"] is True


@pytest.mark.django_db
def test_asset_lines_query_params_are_validated(api, user):
    world = build_world(user)
    url = f"{API}/assets/{world.asset_id}/lines"
    for query, field in (
        ("limit=501", "limit"),
        ("limit=0", "limit"),
        ("limit=x", "limit"),
        ("offset=-1", "offset"),
        ("offset=x", "offset"),
    ):
        assert_error(api.get(f"{url}?{query}"), 422, "validation_error", field=field)
    assert api.get(f"{url}?limit=500").status_code == 200


# --- routes and methods ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_unknown_routes_under_api_are_404_json(api, user):
    conversation = new_conversation(user)
    for client in (api, api.__class__("tc_wrong")):
        for path in (
            "/api/",
            "/api/nope",
            "/api/v1/nope",
            "/api/v2/conversations",
            f"/api/v1/conversations/{conversation.pk}/nope",
            "/api/v1/tool-calls",
            "/api/v1/assets",
        ):
            response = client.get(path)
            assert response.status_code == 404, (path, response.content[:200])
            assert_error(response, 404, "not_found")


@pytest.mark.django_db
def test_wrong_methods_are_405_json(api, user):
    world = build_world(user)
    cid = world.conversation.pk
    for method, path in (
        ("put", f"{API}/conversations"),
        ("patch", f"{API}/conversations/{cid}"),
        ("post", f"{API}/conversations/{cid}"),
        ("delete", f"{API}/conversations/{cid}/events"),
        ("get", f"{API}/conversations/{cid}/messages"),
        ("get", f"{API}/tool-calls/{world.open_id}/cancel"),
        ("put", f"{API}/tool-calls/{world.open_id}/resolution"),
        ("delete", f"{API}/assets/{world.asset_id}"),
    ):
        response = getattr(api, method)(path)
        assert_error(response, 405, "method_not_allowed")
        assert response.has_header("Allow"), path
    assert Conversation.objects.filter(pk=cid).exists()


# --- random JSON -------------------------------------------------------------------------------------


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet=st.one_of(st.characters(), st.sampled_from("\ud800\udfff\x00")), max_size=20),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
message_like = st.fixed_dictionaries(
    {},
    optional={
        "messageId": st.one_of(st.text(max_size=10), json_values),
        "role": st.one_of(st.sampled_from(["user", "assistant"]), json_values),
        "turnId": st.one_of(st.uuids().map(str), json_values),
        "content": st.one_of(
            st.lists(
                st.fixed_dictionaries(
                    {"type": st.sampled_from(["text", "tool_call", "image"])},
                    optional={
                        "text": json_values,
                        "id": json_values,
                        "name": st.one_of(st.sampled_from(["read", "bash", "notes"]), json_values),
                        "arguments": json_values,
                    },
                ),
                max_size=3,
            ),
            json_values,
        ),
        "extra": json_values,
    },
)


@pytest.mark.django_db
@hypothesis_settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=st.one_of(json_values, message_like))
def test_random_json_to_the_message_endpoint_never_500s(api, user, body):
    conversation = Conversation.objects.filter(owner=user).first() or new_conversation(user)
    url = f"{API}/conversations/{conversation.pk}/messages"
    response = post_raw(api, url, json.dumps(body))
    assert response.status_code < 500, response.content[:500]
    assert response["Content-Type"] == "application/json"
    answer = json.loads(response.content)
    if response.status_code >= 400:
        assert_error(response, response.status_code, answer["error"]["code"])
    else:
        assert set(answer) == {"event", "turnId", "toolCalls"}


@pytest.mark.django_db
def test_error_answers_never_change_tokens_or_rules(api, target, user):
    """A burst of bad requests leaves no trace: no rule, no event, no extra token."""
    before = (PermissionRule.objects.count(), ApiToken.objects.count(), target.state())
    for url, valid in target.endpoints.values():
        post_raw(api, url, "{bad")
        api.post_json(url, {**valid, "unknown": 1})
    assert (PermissionRule.objects.count(), ApiToken.objects.count(), target.state()) == before


@pytest.mark.django_db(transaction=True)
def test_a_chunked_body_without_content_length_is_held_to_the_limit_too(user):
    """Under daphne a chunked upload announces no length; the limit still holds (Django reads
    at most ``DATA_UPLOAD_MAX_MEMORY_SIZE`` + 1 bytes, kept equal to ``TOOLCORE_MAX_BODY``)."""
    from asgiref.sync import async_to_sync
    from asgiref.testing import ApplicationCommunicator
    from django.core.handlers.asgi import ASGIHandler

    from conversations.api.auth import token_create

    _, secret = token_create(user=user, name="chunked")
    conversation = new_conversation(user)

    async def post_chunked(chunks: list[bytes]) -> tuple[int, bytes]:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": f"{API}/conversations/{conversation.pk}/messages",
            "raw_path": b"",
            "query_string": b"",
            "headers": [
                (b"host", b"testserver"),
                (b"authorization", f"Bearer {secret}".encode()),
                (b"content-type", b"application/json"),
                (b"transfer-encoding", b"chunked"),
            ],
            "client": ("127.0.0.1", 1),
            "server": ("testserver", 80),
        }
        app = ApplicationCommunicator(ASGIHandler(), scope)
        for i, chunk in enumerate(chunks):
            await app.send_input(
                {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
            )
        start = await app.receive_output(10)
        body = b""
        while True:
            message = await app.receive_output(10)
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        return start["status"], body

    limit = settings.TOOLCORE_MAX_BODY
    big = json.dumps(
        {"messageId": "big", "role": "user", "content": [{"type": "text", "text": "x" * limit}]}
    ).encode()
    status, body = async_to_sync(post_chunked)(
        [big[i : i + 65536] for i in range(0, len(big), 65536)]
    )
    assert status == 413
    assert json.loads(body)["error"]["code"] == "payload_too_large"
    assert not ConversationEvent.objects.filter(conversation=conversation).exists()

    small = json.dumps({"messageId": "small", "role": "user", "content": []}).encode()
    status, body = async_to_sync(post_chunked)([small[:10], small[10:]])
    assert status == 201, body
    assert ConversationEvent.objects.filter(conversation=conversation).count() == 1
