"""The published OpenAPI document: every operation described for someone who has only the docs
page, every answer typed, and real answers of the main endpoints valid against it, so the
document cannot drift from the behaviour."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from jsonschema import Draft202012Validator

from projections.vocabulary import CALL_STATES, HOST_OUTCOMES, OUTCOMES, TOOL_KINDS, TOOL_STATUSES

from .api_helpers import API, bash_awaiting_approval, build_world, grant_run_commands, settle_host
from .helpers import assistant_calls, new_conversation, open_turn

BINARY = {"type": "string", "format": "binary"}
# Formats are checked too: every id the document calls a UUID is one.
FORMATS = Draft202012Validator.FORMAT_CHECKER


@pytest.fixture
def document() -> dict[str, Any]:
    response = Client().get(f"{API}/openapi.json")
    assert response.status_code == 200
    return json.loads(response.content)


def operations(document: dict[str, Any]):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield method, path, operation


def resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    name = ref.removeprefix("#/components/schemas/")
    return document["components"]["schemas"][name]


def is_typed(document: dict[str, Any], schema: dict[str, Any]) -> bool:
    """A schema that says what the answer holds: an object with named properties, a union of
    such, or binary content. Not ``{}`` and not a bare ``dict``."""
    schema = resolve(document, schema)
    if schema == BINARY:
        return True
    branches = schema.get("anyOf") or schema.get("oneOf")
    if branches:
        return all(is_typed(document, branch) for branch in branches)
    return schema.get("type") == "object" and bool(schema.get("properties"))


def test_every_operation_has_a_summary_and_a_description(document):
    found = list(operations(document))
    assert len(found) == 31  # every route of docs/subsystems/api.md built so far
    for method, path, operation in found:
        summary = operation.get("summary", "")
        assert summary and summary[0].isupper(), (method, path, summary)
        description = operation.get("description", "")
        assert len(description) >= 80, (method, path, description)
    assert len(document["info"]["description"]) > 500


def test_every_answer_has_a_typed_schema_and_errors_their_body(document):
    error_ref = {"$ref": "#/components/schemas/ErrorOut"}
    for method, path, operation in operations(document):
        responses = operation["responses"]
        assert "401" in responses, (method, path)
        for status, answer in responses.items():
            if status == "204":
                assert "content" not in answer
                continue
            for content in answer["content"].values():
                schema = content["schema"]
                assert is_typed(document, schema), (method, path, status, schema)
                if int(status) >= 400:
                    assert schema == error_ref, (method, path, status)
        if method == "post":
            assert {"403", "413"} <= set(responses), (method, path)
        if "requestBody" in operation:
            assert {"400", "413", "422"} <= set(responses), (method, path)
    # Nested answers are typed too: every property of an answer schema has a type.
    for name, schema in document["components"]["schemas"].items():
        if not name.endswith("Out"):
            continue
        assert schema.get("additionalProperties") is False, name
        for prop, sub in schema["properties"].items():
            typed = {"type", "$ref", "anyOf", "oneOf", "const"} & set(sub)
            assert typed, (name, prop, sub)


def description_of(document: dict[str, Any], method: str, template: str) -> str:
    """The operation's description with its line breaks as spaces."""
    return " ".join(document["paths"][API + template][method]["description"].split())


def test_the_descriptions_say_what_a_client_must_know(document):
    resolution = description_of(document, "post", "/tool-calls/{call_id}/resolution")
    for words in (
        "requestId",
        "idempotency key",
        "same resolution again answers the recorded result",
        "resolution_conflict",
        "tools.run_commands",
        "not_awaiting",
    ):
        assert words in resolution, words
    barrier = description_of(document, "get", "/conversations/{cid}/turns/{tid}/results")
    for words in ("`wait`", "0…60", '"settled": true', '"settled": false', "pending"):
        assert words in barrier, words
    message = description_of(document, "post", "/conversations/{cid}/messages")
    for words in ("messageId", "message_conflict", "turn_open", "turn_not_open", "512 KiB", "128"):
        assert words in message, words
    command = description_of(document, "post", "/conversations/{cid}/commands")
    for words in ("inputId", "command_conflict", "tools.run_commands", "403 `forbidden`"):
        assert words in command, words
    responses = document["paths"][API + "/conversations/{cid}/commands"]["post"]["responses"]
    assert "403" in responses
    info = " ".join(document["info"]["description"].split())
    for words in ("Bearer", "csrf_failed", "WWW-Authenticate", "1 MiB", "`3.0`", "100 levels"):
        assert words in info, words


# --- what a client generator reads ----------------------------------------------------------------

OPERATION_IDS = {
    "create_conversation",
    "list_conversations",
    "get_conversation",
    "delete_conversation",
    "post_message",
    "post_command",
    "list_events",
    "get_snapshot",
    "get_history",
    "post_live",
    "wait_turn_results",
    "ack_queue",
    "cancel_turn",
    "end_turn",
    "get_tool_call",
    "resolve_tool_call",
    "cancel_tool_call",
    "get_tool_call_details",
    "get_asset",
    "get_asset_lines",
    "claim_host_calls",
    "update_host_call",
    "settle_host_call",
    "get_async_run",
    "get_async_run_log",
    "kill_async_run",
    "list_launches",
    "start_launch",
    "get_launch",
    "get_launch_log",
    "stop_launch",
}
# Keys a client chooses (or a provider, or a tool's arguments), and a permission rule's number:
# every other id is the server's, a UUID.
NOT_UUIDS = {"messageId", "requestId", "inputId", "providerCallId", "resolutionRequestId"}
NOT_UUID_IDS = {"ToolCallBlock", "ToolCallBlockOut", "QuestionOut", "RuleOut"}
# Answers that hold free-form JSON: a tool's arguments (whole, bounded, or as a card's input)
# and an input resolution's value, as the client sent it.
FREE_FORM = {"arguments", "value", "input"}


def test_operation_ids_are_the_names_a_client_calls(document):
    found = [operation["operationId"] for _, _, operation in operations(document)]
    assert len(found) == len(set(found))
    assert set(found) == OPERATION_IDS


def _schemas(node: Any):
    """Every schema object inside ``node``."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _schemas(value)
    elif isinstance(node, list):
        for value in node:
            yield from _schemas(value)


def test_every_id_is_a_uuid_in_bodies_answers_and_paths(document):
    uuid = {"type": "string", "format": "uuid"}
    for method, path, operation in operations(document):
        for parameter in operation.get("parameters", []):
            if parameter["in"] == "path":
                assert uuid.items() <= parameter["schema"].items(), (method, path, parameter)
    checked = 0
    for name, schema in document["components"]["schemas"].items():
        for prop, sub in schema.get("properties", {}).items():
            is_id = prop in ("id", "token") or prop.endswith(("Id", "Ids"))
            if not is_id or prop in NOT_UUIDS or (prop == "id" and name in NOT_UUID_IDS):
                continue
            formats = {s.get("format") for s in _schemas(sub) if s.get("type") == "string"}
            assert formats == {"uuid"}, (name, prop, sub)
            checked += 1
    assert checked >= 50


def test_only_free_form_json_is_left_untyped(document):
    for name, schema in document["components"]["schemas"].items():
        if not name.endswith("Out"):
            continue
        for prop, sub in schema["properties"].items():
            for inner in _schemas(sub):
                if inner.get("type") == "object" and "properties" not in inner:
                    assert prop in FREE_FORM, (name, prop, sub)
                if inner.get("type") == "array":
                    assert "items" in inner, (name, prop, sub)


def _tags(document: dict[str, Any], union: dict[str, Any]) -> dict[str, set[Any]]:
    """For each property every branch of ``union`` holds as a constant: the constants."""
    branches = [resolve(document, branch) for branch in union["oneOf"]]
    consts: dict[str, set[Any]] = {}
    for prop in set.intersection(*(set(b["required"]) for b in branches)):
        values = [b["properties"][prop].get("const", ...) for b in branches]
        if ... not in values:
            consts[prop] = set(values)
    return consts


def test_unions_are_tagged(document):
    """Every ``oneOf`` tells its branches apart by a constant property: content blocks by
    ``type``, interactions and resolutions by ``kind``, events by ``type``, the barrier's two
    answers by ``settled``."""
    tags: dict[str, int] = {}
    for schema in _schemas(document):
        if "oneOf" not in schema:
            continue
        consts = _tags(document, schema)
        tag = next((p for p, v in consts.items() if len(v) == len(schema["oneOf"])), None)
        assert tag is not None, schema
        tags[tag] = tags.get(tag, 0) + 1
        if "discriminator" in schema:
            assert schema["discriminator"]["propertyName"] == tag
    assert {"type", "kind", "settled"} <= set(tags)
    properties = document["components"]["schemas"]["UnfinishedCallOut"]["properties"]
    for prop in ("interaction", "resolution", "supervision"):
        assert "$ref" in json.dumps(properties[prop]), prop
    event = document["components"]["schemas"]["ToolCallResponseEventOut"]
    payload = resolve(document, event["properties"]["payload"])
    assert payload["properties"]["modelContent"]["items"] == {
        "$ref": "#/components/schemas/TextBlockOut"
    }


def test_the_barrier_answers_one_of_two_shapes_told_apart_by_settled(document):
    operation = document["paths"][API + "/conversations/{cid}/turns/{tid}/results"]["get"]
    schema = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert [resolve(document, b)["title"] for b in schema["oneOf"]] == [
        "TurnSettledOut",
        "TurnPendingOut",
    ]
    # The constant alone: a generator reads ``type: boolean`` first and loses the constant.
    assert _tags(document, schema) == {"settled": {True, False}}
    for branch in schema["oneOf"]:
        assert "type" not in resolve(document, branch)["properties"]["settled"]


def test_an_asset_is_read_as_binary(document):
    responses = document["paths"][API + "/assets/{asset_id}"]["get"]["responses"]
    for status in ("200", "206"):
        content = responses[status]["content"]
        assert list(content) == ["application/octet-stream", "*/*"], status
        assert all(media["schema"] == BINARY for media in content.values())


def test_the_documents_vocabularies_are_the_shared_tuples(document):
    """States, outcomes, statuses and kinds are derived from projections/vocabulary.py, in its
    order, wherever the document lists them."""
    schemas = document["components"]["schemas"]

    def enum(name: str, field: str) -> list[str]:
        prop = schemas[name]["properties"][field]
        branches = [prop, *prop.get("anyOf", [])]
        return next(branch["enum"] for branch in branches if "enum" in branch)

    for name in ("UnfinishedCallOut", "PendingCallOut", "CallDetailsOut"):
        assert enum(name, "state") == list(CALL_STATES), name
    for name in ("SettledCallOut", "CallCancelOut", "ToolResultOut", "CallDetailsOut"):
        assert enum(name, "outcome") == list(OUTCOMES), name
    assert enum("HostSettleIn", "outcome") == list(HOST_OUTCOMES)
    for name in ("ToolStateOut", "HistoryToolOut"):
        assert enum(name, "status") == list(TOOL_STATUSES), name
        assert enum(name, "kind") == list(TOOL_KINDS), name


# --- real answers against the document -----------------------------------------------------------


class Checker:
    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.seen: set[tuple[str, str, str]] = set()

    def __call__(self, response, method: str, template: str) -> Any:
        """Validate ``response`` against the schema the document gives its operation and
        status; answer its decoded body."""
        operation = self.document["paths"][API + template][method]
        status = str(response.status_code)
        assert status in operation["responses"], (method, template, status, response.content)
        body = json.loads(response.content)
        (content,) = operation["responses"][status]["content"].values()
        schema = {**content["schema"], "components": self.document["components"]}
        validator = Draft202012Validator(schema, format_checker=FORMATS)
        errors = list(validator.iter_errors(body))
        assert not errors, (method, template, status, [e.message for e in errors[:3]])
        self.seen.add((method, template, status))
        return body


@pytest.mark.django_db(transaction=True)
def test_real_answers_match_the_published_schema(api, user, document):
    grant_run_commands(user)
    check = Checker(document)
    world = build_world(user)
    cid, tid = world.conversation.pk, world.turn_id

    created = check(api.post_json(f"{API}/conversations", {"title": "t"}), "post", "/conversations")
    check(api.get(f"{API}/conversations?limit=1"), "get", "/conversations")
    check(api.get(f"{API}/conversations/{cid}"), "get", "/conversations/{cid}")

    # Messages: 201, the repeat's 200, the calls they created.
    conversation = new_conversation(user)
    messages = f"{API}/conversations/{conversation.pk}/messages"
    user_message = {"messageId": "u1", "role": "user", "content": [{"type": "text", "text": "hi"}]}
    first = check(api.post_json(messages, user_message), "post", "/conversations/{cid}/messages")
    check(api.post_json(messages, user_message), "post", "/conversations/{cid}/messages")
    assistant = {
        "messageId": "a1",
        "role": "assistant",
        "turnId": first["turnId"],
        "content": [
            {"type": "text", "text": "running"},
            {"type": "tool_call", "id": "c1", "name": "notes", "arguments": {"q": 1}},
        ],
    }
    posted = check(api.post_json(messages, assistant), "post", "/conversations/{cid}/messages")
    (call,) = posted["toolCalls"]

    barrier = "/conversations/{cid}/turns/{tid}/results"
    results = f"{API}/conversations/{conversation.pk}/turns/{first['turnId']}/results"
    assert check(api.get(f"{results}?wait=0"), "get", barrier)["settled"] is False
    check(api.get(f"{API}/tool-calls/{call['id']}"), "get", "/tool-calls/{call_id}")
    settle_host(call["id"], text="noted")
    assert check(api.get(f"{results}?wait=0"), "get", barrier)["settled"] is True
    check(api.get(f"{API}/tool-calls/{call['id']}"), "get", "/tool-calls/{call_id}")
    for call_id in (call["id"], world.open_id):
        check(
            api.get(f"{API}/tool-calls/{call_id}/details"), "get", "/tool-calls/{call_id}/details"
        )

    events = check(
        api.get(f"{API}/conversations/{cid}/events"), "get", "/conversations/{cid}/events"
    )
    assert events["events"]
    check(
        api.post_json(f"{API}/conversations/{cid}/queue/ack", {"upTo": 3.0}),
        "post",
        "/conversations/{cid}/queue/ack",
    )
    snapshot = check(
        api.get(f"{API}/conversations/{cid}/snapshot"), "get", "/conversations/{cid}/snapshot"
    )
    assert snapshot["calls"] and snapshot["tools"] and snapshot["asyncRuns"]
    history = "/conversations/{cid}/history"
    page = check(api.get(f"{API}/conversations/{cid}/history?limit=2"), "get", history)
    assert {item["type"] for item in page["items"]} == {"tool"}
    older = check(
        api.get(f"{API}/conversations/{cid}/history?before={page['nextCursor']}"), "get", history
    )
    assert {item["type"] for item in older["items"]} == {"message"}
    check(api.get(f"{API}/conversations/{cid}/history?before=x"), "get", history)
    live = {"turnId": tid, "kind": "arguments", "delta": "{", "providerCallId": "p"}
    live_path = "/conversations/{cid}/live"
    check(api.post_json(f"{API}/conversations/{cid}/live", live), "post", live_path)
    check(
        api.post_json(f"{API}/conversations/{cid}/live", {**live, "kind": "x"}), "post", live_path
    )
    lines = "/assets/{asset_id}/lines"
    check(api.get(f"{API}/assets/{world.asset_id}/lines?limit=1"), "get", lines)

    # Resolution and cancel, then the turn.
    _, bash_id, url = bash_awaiting_approval(user)
    allow = {"requestId": "r1", "kind": "approval", "decision": "allow", "persist": False}
    check(api.post_json(url, allow), "post", "/tool-calls/{call_id}/resolution")
    check(api.post(f"{API}/tool-calls/{bash_id}/cancel"), "post", "/tool-calls/{call_id}/cancel")
    check(api.post(f"{API}/tool-calls/{bash_id}/cancel"), "post", "/tool-calls/{call_id}/cancel")
    turn = f"{API}/conversations/{cid}/turns/{tid}"
    check(api.post(f"{turn}/cancel"), "post", "/conversations/{cid}/turns/{tid}/cancel")
    check(api.post_json(f"{turn}/end", {}), "post", "/conversations/{cid}/turns/{tid}/end")

    # A command: created, repeated, and repeated once settled.
    commands = f"{API}/conversations/{created['id']}/commands"
    command = {"inputId": "i1", "command": "ls", "includeInContext": False}
    answer = check(api.post_json(commands, command), "post", "/conversations/{cid}/commands")
    check(api.post_json(commands, command), "post", "/conversations/{cid}/commands")
    api.post(f"{API}/tool-calls/{answer['toolCall']['id']}/cancel")
    settled = check(api.post_json(commands, command), "post", "/conversations/{cid}/commands")
    assert settled["toolCall"]["outcome"] == "cancelled"

    # Errors: each against the error body of its operation.
    check(api.get(f"{API}/conversations/{world.open_id}"), "get", "/conversations/{cid}")
    check(Client().get(f"{API}/conversations"), "get", "/conversations")
    check(api.get(f"{API}/conversations?limit=0"), "get", "/conversations")
    check(
        api.post_json(messages, {**user_message, "content": []}),
        "post",
        "/conversations/{cid}/messages",
    )
    check(
        api.generic("POST", messages, "{bad", content_type="application/json"),
        "post",
        "/conversations/{cid}/messages",
    )
    check(
        api.get(f"{API}/conversations/{cid}/events?after=999"), "get", "/conversations/{cid}/events"
    )
    check(api.get(f"{results}?wait=61"), "get", barrier)

    statuses = {status for _, _, status in check.seen}
    assert {"200", "201", "400", "401", "404", "409", "422"} <= statuses
    assert len({(m, t) for m, t, _ in check.seen}) >= 15


@pytest.mark.django_db
def test_integral_floats_are_read_as_the_schema_says(api, user, document):
    """For ``upTo``, the server accepts exactly what the published schema accepts."""
    schema = document["components"]["schemas"]["QueueAckIn"]
    validator = Draft202012Validator(schema)
    conversation = new_conversation(user)
    url = f"{API}/conversations/{conversation.pk}/queue/ack"
    for value in (0, 3, 3.0, 1e2, 2**40, -0.0, 3.5, -1, -1.0, "3", True, False, None, [3], {}):
        valid = validator.is_valid({"upTo": value})
        response = api.post_json(url, {"upTo": value})
        assert response.status_code == (200 if valid else 422), (value, response.content)


@pytest.mark.django_db(transaction=True)
def test_the_second_turn_shape_is_documented_with_its_pending_calls(api, user, document):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    assistant_calls(conversation, turn_id, ("bash", {"command": "ls"}))
    response = api.get(f"{API}/conversations/{conversation.pk}/turns/{turn_id}/results")
    body = Checker(document)(response, "get", "/conversations/{cid}/turns/{tid}/results")
    assert body["settled"] is False
    assert [p["state"] for p in body["pending"]] == ["awaiting_approval"]


@pytest.mark.django_db
def test_cut_snapshots_and_pages_match_the_published_schema(api, user, document):
    """The markers of what a budget left out (`payloadOmitted`, `omitted`, and
    `argumentsOmitted`) are in the document too."""
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    wide = {f"{n:03d}" + "k" * 100: n for n in range(64)}  # nothing of it fits 4 KiB
    ids = assistant_calls(conversation, turn_id, ("notes", wide)).call_ids
    for _ in range(2):
        calls = [("notes", {"a": "y" * 1900, "b": "z" * 1900, "n": n}) for n in range(40)]
        ids += assistant_calls(conversation, turn_id, *calls).call_ids
    for call_id in ids[-8:]:  # 73 stay unfinished: more than `calls` may hold
        settle_host(call_id, text="ü" * 20_000)
    check = Checker(document)
    cid = conversation.pk
    snapshot = check(
        api.get(f"{API}/conversations/{cid}/snapshot"), "get", "/conversations/{cid}/snapshot"
    )
    assert snapshot["omitted"]["calls"] > 0
    assert snapshot["calls"][0]["argumentsOmitted"] is True
    assert any("payloadOmitted" in card for card in snapshot["tools"])
    page = check(
        api.get(f"{API}/conversations/{cid}/history?limit=100"),
        "get",
        "/conversations/{cid}/history",
    )
    assert any("payloadOmitted" in item for item in page["items"])
