"""/conversations/{cid}/messages and /commands: turns open, calls are created, repeats answer
the record (docs/subsystems/lifecycle.md, "Creating calls")."""

from __future__ import annotations

import uuid

import pytest
from django.db import OperationalError

from conversations.models import (
    Conversation,
    ConversationEvent,
    ToolActivity,
    ToolCall,
    Turn,
)
from conversations.services import settlement, supervision
from conversations.services.cancel import turn_end
from conversations.shapes import iso
from conversations.storage import conversation_dir
from tests.faults.helpers import assert_intact
from tools.models import PermissionRule

from .api_helpers import (
    API,
    ISO_MS,
    QUESTIONS,
    assert_error,
    assert_unavailable,
    events_of,
    grant_run_commands,
    settle_host,
)
from .helpers import new_conversation, open_turn, outcome_of, state_of

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
    grant_run_commands(user)
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


def _written(conversation) -> tuple[int, int, int, int]:
    """What a post may write: turns, calls, activities, events of the conversation."""
    return (
        Turn.objects.filter(conversation=conversation).count(),
        ToolCall.objects.filter(conversation=conversation).count(),
        ToolActivity.objects.filter(conversation_id=conversation.pk).count(),
        ConversationEvent.objects.filter(conversation=conversation).count(),
    )


@pytest.mark.django_db
def test_a_command_needs_run_commands_and_a_refusal_writes_nothing(api, user):
    """Typing a command needs ``tools.run_commands``, like approving ``bash``: without it the
    answer is 403 ``forbidden`` and no turn, call, activity or event is written, on the first
    try and on a repeat; once granted, the same ``inputId`` is a new command (201)."""
    conversation = new_conversation(user)
    # A turn opened and ended first: the log has events a refusal must not add to.
    turn_end(conversation_id=conversation.pk, turn_id=open_turn(conversation))
    before = _written(conversation)
    url = f"{API}/conversations/{conversation.pk}/commands"
    command = {"inputId": "in-1", "command": "whoami", "includeInContext": True}
    error = assert_error(api.post_json(url, command), 403, "forbidden")
    assert "tools.run_commands" in error["message"]
    assert_error(api.post_json(url, command), 403, "forbidden")
    assert _written(conversation) == before
    conversation.refresh_from_db()
    assert conversation.last_sequence == before[3]

    grant_run_commands(user)
    assert api.post_json(url, command).status_code == 201
    assert api.post_json(url, command).status_code == 200


@pytest.mark.django_db
def test_a_command_to_another_owners_conversation_is_404_before_the_permission(
    api, user, other_api, other_user
):
    """The owner check comes first: without the permission, another owner's conversation and
    a missing one answer the same 404 (never a 403 that would tell them apart), and nothing
    is written to either."""
    conversation = new_conversation(user)
    body = {"inputId": "in-1", "command": "whoami", "includeInContext": True}
    theirs = other_api.post_json(f"{API}/conversations/{conversation.pk}/commands", body)
    missing = other_api.post_json(f"{API}/conversations/{uuid.uuid4()}/commands", body)
    assert_error(theirs, 404, "not_found")
    assert theirs.content == missing.content
    assert _written(conversation) == (0, 0, 0, 0)
    grant_run_commands(other_user)  # with the permission: still 404, byte for byte
    again = other_api.post_json(f"{API}/conversations/{conversation.pk}/commands", body)
    assert (again.status_code, again.content) == (404, missing.content)
    assert _written(conversation) == (0, 0, 0, 0)


@pytest.mark.django_db
def test_a_command_while_a_user_turn_is_open_is_turn_open(api, user):
    grant_run_commands(user)
    conversation = new_conversation(user)
    open_turn(conversation)
    url = f"{API}/conversations/{conversation.pk}/commands"
    assert_error(
        api.post_json(url, {"inputId": "i", "command": "ls", "includeInContext": True}),
        409,
        "turn_open",
    )
    assert not ToolCall.objects.filter(conversation=conversation).exists()


# --- 3. one transaction: a message or command and the supervision of its calls ----------------


def _failing_once(monkeypatch, arguments):
    """The permission port raises a real ``OperationalError`` (fault injection: a database that
    fails at one precise step cannot be produced on demand) the first time it judges a call
    with ``arguments``; every other judgement is the real one."""
    real = supervision.evaluate
    failed = []

    def evaluate(conversation, spec, args, **kwargs):
        if args == arguments and not failed:
            failed.append(args)
            raise OperationalError("injected: the database went away during supervision")
        return real(conversation, spec, args, **kwargs)

    monkeypatch.setattr(supervision, "evaluate", evaluate)
    return failed


def _stored(conversation) -> tuple:
    """What the conversation holds: its last sequence, events, calls, activities and turns."""
    return (
        Conversation.objects.get(pk=conversation.pk).last_sequence,
        list(events_of(conversation)),
        sorted(ToolCall.objects.filter(conversation=conversation).values_list("pk", "state")),
        ToolActivity.objects.filter(conversation=conversation).count(),
        sorted(Turn.objects.filter(conversation=conversation).values_list("pk", "status")),
    )


@pytest.mark.django_db(transaction=True)
def test_a_failure_while_supervising_a_messages_calls_leaves_nothing_and_the_retry_does_it_all(
    api, user, monkeypatch
):
    conversation = new_conversation(user)
    PermissionRule.objects.create(tool_name="grep", pattern="", decision="deny")
    turn_id = open_turn(conversation)
    url = f"{API}/conversations/{conversation.pk}/messages"
    blocks = [
        # Settled failed first (its long argument is written to a file of its attempt), then
        # the database fails while the second call is judged.
        ("read", {"path": "a", "bogus": "x" * 5000}),
        ("bash", {"command": "ls"}),
        ("read", {"path": "a.txt"}),
        ("grep", {"pattern": "x"}),
        ("ask_user", {"questions": QUESTIONS}),
    ]
    content = [
        {"type": "tool_call", "id": f"p{i}", "name": name, "arguments": arguments}
        for i, (name, arguments) in enumerate(blocks)
    ]
    message = {"messageId": "a1", "role": "assistant", "turnId": turn_id, "content": content}
    before = _stored(conversation)
    failed = _failing_once(monkeypatch, {"command": "ls"})

    assert_unavailable(api.post_json(url, message))
    assert failed
    assert _stored(conversation) == before  # no event, no call, no response, no turn change
    assert not ConversationEvent.objects.filter(message_id="a1").exists()
    # The failed call's file, written before the rollback, is an orphan: purge_orphans removes
    # it and the invariants hold.
    assert list(conversation_dir(conversation.pk).rglob("arguments.json"))
    assert_intact(purge=True)
    assert not list(conversation_dir(conversation.pk).rglob("arguments.json"))

    retried = api.post_json(url, message)
    assert retried.status_code == 201
    calls = retried.json()["toolCalls"]
    # The answer describes the calls as created, as always.
    assert {c["state"] for c in calls} == {"supervising"}
    failed_read, bash, read, grep, ask = (c["id"] for c in calls)
    assert outcome_of(failed_read) == "failed"
    assert state_of(bash) == "awaiting_approval"
    assert state_of(read) == "ready"
    assert outcome_of(grep) == "denied"
    # Its runner ran after the commit: the question waits for the user.
    assert state_of(ask) == "awaiting_input"
    assert not ToolCall.objects.filter(state="supervising").exists()
    assert [t for _, t in events_of(conversation)] == [
        "user_message",
        "assistant_message",
        "tool_call_response",
        "tool_call_response",
    ]
    assert api.post_json(url, message).json() == retried.json()  # the repeat: the record
    assert_intact(purge=False)


@pytest.mark.django_db(transaction=True)
def test_a_failure_while_supervising_a_command_leaves_nothing_and_the_retry_does_it_all(
    api, user, monkeypatch
):
    grant_run_commands(user)
    conversation = new_conversation(user)
    url = f"{API}/conversations/{conversation.pk}/commands"
    command = {"inputId": "in-1", "command": "echo hi", "includeInContext": True}
    before = _stored(conversation)
    _failing_once(monkeypatch, {"command": "echo hi"})

    assert_unavailable(api.post_json(url, command))
    assert _stored(conversation) == before  # no turn, no call, no event
    assert not Turn.objects.filter(input_id="in-1").exists()

    retried = api.post_json(url, command)
    assert retried.status_code == 201
    call = retried.json()["toolCall"]
    assert call["state"] == "supervising"
    assert state_of(call["id"]) == "ready"  # ask counts as allow for a typed command
    assert Turn.objects.get(pk=retried.json()["turnId"]).status == "open"


@pytest.mark.django_db(transaction=True)
def test_a_denied_command_is_settled_and_its_turn_ended_with_the_post(api, user, monkeypatch):
    """Settlement inside the post's transaction: a denied command's response and the end of its
    turn commit with the command, or not at all. The fault: a real ``OperationalError`` raised
    once where settlement ends the command's turn (after the response was appended and the call
    row deleted)."""
    grant_run_commands(user)
    conversation = new_conversation(user)
    PermissionRule.objects.create(tool_name="bash", pattern="", decision="deny")
    url = f"{API}/conversations/{conversation.pk}/commands"
    command = {"inputId": "in-1", "command": "echo hi", "includeInContext": True}
    real = settlement.turn_close
    failed = []

    def turn_close(**kwargs):
        if not failed:
            failed.append(kwargs)
            raise OperationalError("injected: the database went away while settling")
        return real(**kwargs)

    monkeypatch.setattr(settlement, "turn_close", turn_close)
    before = _stored(conversation)
    assert_unavailable(api.post_json(url, command))
    assert failed
    assert _stored(conversation) == before

    retried = api.post_json(url, command)
    assert retried.status_code == 201
    call_id = retried.json()["toolCall"]["id"]
    assert outcome_of(call_id) == "denied"
    assert Turn.objects.get(pk=retried.json()["turnId"]).status == "ended"
    assert [t for _, t in events_of(conversation)] == ["tool_call_response", "turn_ended"]
