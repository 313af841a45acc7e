"""/tool-calls: reading, resolving, cancelling (docs/subsystems/interactions.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conversations.models import (
    Asset,
    ConversationEvent,
    ToolCall,
    Turn,
)
from conversations.services.claims import claim_acquire
from conversations.services.settlement import ClaimGuard, call_settle
from tools.models import PermissionRule

from .admin_helpers import settle_command
from .api_helpers import (
    API,
    ISO_MS,
    QUESTIONS,
    assert_error,
    awaiting_input_call,
    bash_awaiting_approval,
    grant_run_commands,
    settle_host,
)
from .helpers import assistant_calls, new_conversation, open_turn, outcome_of, state_of

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


@pytest.mark.django_db
def test_call_details_say_how_a_command_ended(api, user):
    """``exit``: how a ``bash`` call's command ended, read from what its settlement recorded;
    the outcome stays ``completed``. Null while unfinished and for a call that ran none."""
    PermissionRule.objects.create(tool_name="bash", pattern="", decision="allow")
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    failing, killed, host = assistant_calls(
        conversation,
        turn_id,
        ("bash", {"command": "exit 3"}),
        ("bash", {"command": "kill -9 $$"}),
        ("notes", {"q": "x"}),
    ).call_ids
    assert api.get(f"{API}/tool-calls/{failing}/details").json()["exit"] is None
    settle_command(failing, exit_code=3)
    settle_command(killed, exit_code=None, signal="SIGKILL")
    settle_host(host, result={"answer": 42}, text="forty-two")
    details = api.get(f"{API}/tool-calls/{failing}/details").json()
    assert details["outcome"] == "completed"
    assert details["exit"] == {
        "exitCode": 3,
        "signal": None,
        "timedOut": False,
        "timeoutSeconds": None,
        "asyncRunId": None,
        "succeeded": False,
        "summary": "Exit 3",
    }
    signalled = api.get(f"{API}/tool-calls/{killed}/details").json()["exit"]
    assert signalled["summary"] == "Killed by SIGKILL" and signalled["exitCode"] is None
    assert api.get(f"{API}/tool-calls/{host}/details").json()["exit"] is None
    # The durable response keeps its documented keys: nothing about the exit was added.
    payload = ConversationEvent.objects.get(tool_call_id=failing).payload
    assert "exit" not in payload and "exitCode" not in json.dumps(payload)


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
