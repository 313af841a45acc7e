"""The permission port and the catalog seen through the HTTP API: chained commands against deny
rules, approvals saved with ``persist``, host tools, regexes and bounded messages."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission

from tools.models import PermissionRule

from .helpers import new_conversation, open_turn

pytestmark = pytest.mark.django_db

API = "/api/v1"
_ids = itertools.count(1)

CHAINED = [
    "rm -rf data; true",
    "ls && rm -rf data",
    "false || rm -rf data",
    "ls | rm -rf data",
    "sleep 1 & rm -rf data",
    "echo hi\nrm -rf data",
    "echo $(rm -rf data)",
    "echo `rm -rf data`",
    "rm -rf data > /dev/null 2>&1",
    "   rm -rf data",
]


def _grant_run_commands(user) -> None:
    user.user_permissions.add(Permission.objects.get(codename="run_commands"))


def _model_calls(api, conversation, *calls: tuple[str, Any]) -> list[str]:
    """Post an assistant message with one tool_call block per ``(name, arguments)``."""
    turn_id = open_turn(conversation)
    content = [
        {"type": "tool_call", "id": f"p-{next(_ids)}", "name": name, "arguments": arguments}
        for name, arguments in calls
    ]
    message = {"messageId": f"a-{next(_ids)}", "role": "assistant", "turnId": turn_id}
    response = api.post_json(
        f"{API}/conversations/{conversation.pk}/messages", {**message, "content": content}
    )
    assert response.status_code == 201, response.content[:500]
    return [call["id"] for call in response.json()["toolCalls"]]


def _user_command(api, conversation, command: str) -> str:
    """A command typed by the conversation's owner, who may run commands."""
    _grant_run_commands(conversation.owner)
    body = {"inputId": f"in-{next(_ids)}", "command": command, "includeInContext": True}
    response = api.post_json(f"{API}/conversations/{conversation.pk}/commands", body)
    assert response.status_code == 201, response.content[:500]
    return response.json()["toolCall"]["id"]


def _call(api, call_id: str) -> dict[str, Any]:
    response = api.get(f"{API}/tool-calls/{call_id}")
    assert response.status_code == 200, response.content[:500]
    return response.json()


def _resolve(api, call_id: str, **fields: Any):
    body = {"requestId": f"r-{next(_ids)}", "kind": "approval", "decision": "allow", **fields}
    return api.post_json(f"{API}/tool-calls/{call_id}/resolution", body)


def _deny_rule(scope: str, conversation, pattern: str) -> PermissionRule:
    return PermissionRule.objects.create(
        conversation=conversation if scope == "conversation" else None,
        tool_name="bash",
        pattern=pattern,
        decision="deny",
        reason="No deleting data.",
    )


# --- chained commands against deny rules --------------------------------------------------------


@pytest.mark.parametrize("scope", ["global", "conversation"])
@pytest.mark.parametrize("command", CHAINED)
def test_a_models_chained_command_is_denied_by_a_deny_rule(api, user, scope, command):
    conversation = new_conversation(user)
    rule = _deny_rule(scope, conversation, "rm *")
    (call_id,) = _model_calls(api, conversation, ("bash", {"command": command}))
    settled = _call(api, call_id)
    assert settled["outcome"] == "denied"
    payload = settled["response"]["payload"]
    assert payload["supervision"]["decision"] == "deny"
    assert payload["supervision"]["rule"]["id"] == str(rule.pk)
    assert payload["supervision"]["rule"]["scope"] == scope
    assert "Reason: No deleting data." in payload["modelContent"][0]["text"]


@pytest.mark.parametrize("scope", ["global", "conversation"])
@pytest.mark.parametrize("pattern", ["", "rm *"])
@pytest.mark.parametrize("command", CHAINED)
def test_a_users_chained_command_is_denied_by_a_deny_rule(api, user, scope, pattern, command):
    """A user's command counts ``ask`` as ``allow``: the deny rule must catch the chain."""
    conversation = new_conversation(user)
    rule = _deny_rule(scope, conversation, pattern)
    call_id = _user_command(api, conversation, command)
    settled = _call(api, call_id)
    assert settled["outcome"] == "denied"
    assert settled["response"]["payload"]["supervision"]["rule"]["id"] == str(rule.pk)


DEEP = ["$(" * 246 + "rm -rf data" + ")" * 246, "(" * 246 + "rm -rf data" + ")" * 246]


@pytest.mark.parametrize("command", DEEP, ids=["substitutions", "subshells"])
def test_a_command_nested_246_deep_is_denied_not_a_server_error(api, user, command):
    """It answered 500 (a RecursionError in the walk of its tree): now it is a line that cannot
    be read, denied while a deny rule applies, asked about otherwise."""
    conversation = new_conversation(user)
    rule = _deny_rule("global", conversation, "rm *")
    (call_id,) = _model_calls(api, conversation, ("bash", {"command": command}))
    settled = _call(api, call_id)
    assert settled["outcome"] == "denied"
    assert settled["response"]["payload"]["supervision"]["rule"]["id"] == str(rule.pk)
    rule.delete()
    (asked,) = _model_calls(api, conversation, ("bash", {"command": command + " "}))
    assert _call(api, asked)["supervision"]["decision"] == "ask"


def test_a_users_command_the_deny_rule_does_not_name_still_runs(api, user):
    conversation = new_conversation(user)
    _deny_rule("global", conversation, "rm *")
    call = _call(api, _user_command(api, conversation, "echo rm -rf data; ls"))
    assert call["state"] == "ready"
    assert call["supervision"]["decision"] == "ask"
    assert call["supervision"]["effective"] == "allow"


# --- approvals saved with persist ---------------------------------------------------------------


def test_a_persisted_approval_never_widens_into_a_glob(api, user):
    _grant_run_commands(user)
    conversation = new_conversation(user)
    (first,) = _model_calls(api, conversation, ("bash", {"command": "rm -rf ./build/*"}))
    waiting = _call(api, first)
    assert waiting["state"] == "awaiting_approval"
    suggested = waiting["interaction"]["request"]["suggestedRules"]
    assert suggested == [
        {"toolName": "bash", "pattern": "rm -rf ./build/[*]", "decision": "allow"},
        {"toolName": "bash", "pattern": "rm *", "decision": "allow"},
    ]
    response = _resolve(api, first, persist=True)
    assert response.status_code == 200, response.content
    rule = PermissionRule.objects.get(conversation=conversation)
    assert (rule.pattern, rule.decision, rule.source) == ("rm -rf ./build/[*]", "allow", "approval")

    escape, again = _model_calls(
        api,
        conversation,
        ("bash", {"command": "rm -rf ./build/../../../../home/alice/.ssh ~/"}),
        ("bash", {"command": "rm -rf ./build/*"}),
    )
    assert _call(api, escape)["state"] == "awaiting_approval"
    allowed = _call(api, again)
    assert allowed["state"] == "ready"
    assert allowed["supervision"]["rule"]["id"] == str(rule.pk)


def test_a_persisted_approval_of_a_command_with_a_redirection_matches_it_again(api, user):
    _grant_run_commands(user)
    conversation = new_conversation(user)
    command = "ls *.py > files.txt"
    (first,) = _model_calls(api, conversation, ("bash", {"command": command}))
    assert _resolve(api, first, persist=True).status_code == 200
    assert PermissionRule.objects.get(conversation=conversation).pattern == "ls [*].py > files.txt"
    same, other = _model_calls(
        api,
        conversation,
        ("bash", {"command": command}),
        ("bash", {"command": "ls a.py > files.txt"}),
    )
    assert _call(api, same)["state"] == "ready"
    assert _call(api, other)["state"] == "awaiting_approval"


def test_a_command_too_long_for_a_rule_is_approved_without_saving_one(api, user):
    _grant_run_commands(user)
    conversation = new_conversation(user)
    (call_id,) = _model_calls(api, conversation, ("bash", {"command": "echo " + "x" * 3000}))
    assert _call(api, call_id)["interaction"]["request"]["suggestedRules"] == []
    response = _resolve(api, call_id, persist=True)
    assert response.status_code == 200, response.content
    assert _call(api, call_id)["state"] == "ready"
    assert not PermissionRule.objects.filter(conversation=conversation).exists()


# --- host tools ---------------------------------------------------------------------------------


def test_approving_a_host_tool_needs_run_commands(api, user):
    conversation = new_conversation(user)
    PermissionRule.objects.create(tool_name="deploy", pattern="", decision="ask")
    (call_id,) = _model_calls(api, conversation, ("deploy", {"target": "prod"}))
    assert _call(api, call_id)["state"] == "awaiting_approval"
    refused = _resolve(api, call_id)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "forbidden"
    call = _call(api, call_id)
    assert call["state"] == "awaiting_approval" and call["resolution"] is None
    _grant_run_commands(user)
    assert _resolve(api, call_id).status_code == 200
    assert _call(api, call_id)["state"] == "ready"


def test_a_host_tool_is_still_allowed_by_default(api, user):
    conversation = new_conversation(user)
    (call_id,) = _model_calls(api, conversation, ("deploy", {"target": "prod"}))
    call = _call(api, call_id)
    assert call["state"] == "ready"
    assert call["supervision"] == {
        "decision": "allow",
        "reason": "Allowed by default.",
        "rule": None,
    }


# --- arguments: regexes and bounded messages ----------------------------------------------------


@pytest.mark.parametrize("pattern", ["(", "[a-", "a{2,1}", "(?P<bad-name>x)"])
def test_a_grep_pattern_that_does_not_compile_settles_failed_naming_pattern(api, user, pattern):
    conversation = new_conversation(user)
    (call_id,) = _model_calls(api, conversation, ("grep", {"pattern": pattern}))
    settled = _call(api, call_id)
    assert settled["outcome"] == "failed"
    supervision = settled["response"]["payload"]["supervision"]
    assert supervision["decision"] == "failed" and supervision["field"] == "pattern"
    assert supervision["reason"].startswith(
        "Invalid argument 'pattern': not a valid regular expression ("
    )
    assert supervision["reason"] in settled["response"]["payload"]["modelContent"][0]["text"]


def test_a_grep_pattern_that_compiles_goes_on(api, user):
    conversation = new_conversation(user)
    (call_id,) = _model_calls(api, conversation, ("grep", {"pattern": r"def \w+\(", "path": "."}))
    assert _call(api, call_id)["state"] == "ready"


def test_a_huge_bad_regex_gives_a_bounded_reason(api, user):
    conversation = new_conversation(user)
    (call_id,) = _model_calls(api, conversation, ("grep", {"pattern": "(?P<" + "a" * 200_000}))
    event = _call(api, call_id)["response"]
    reason = event["payload"]["supervision"]["reason"]
    assert len(reason.encode()) <= 1024
    assert len(json.dumps(event, ensure_ascii=False).encode()) < 16 * 1024


def test_a_huge_path_gives_a_bounded_reason_and_a_small_event(api, user):
    """500 KB: the most a message's event may carry (512 KiB) leaves room for it."""
    conversation = new_conversation(user)
    (call_id,) = _model_calls(api, conversation, ("read", {"path": "x" * 500_000}))
    settled = _call(api, call_id)
    assert settled["outcome"] == "failed"
    event = settled["response"]
    supervision = event["payload"]["supervision"]
    assert supervision["field"] == "path"
    assert supervision["reason"] == "Invalid argument 'path': must be at most 4096 characters long."
    text = event["payload"]["modelContent"][0]["text"]
    # The text names the resource too, cut by the terminal projection.
    assert supervision["reason"] in text and len(text.encode()) <= 4000
    assert len(json.dumps(event, ensure_ascii=False).encode()) < 16 * 1024


def test_an_unexpected_huge_argument_name_is_quoted_short(api, user):
    conversation = new_conversation(user)
    (call_id,) = _model_calls(api, conversation, ("ls", {"y" * 500_000: 1}))
    event = _call(api, call_id)["response"]
    supervision = event["payload"]["supervision"]
    assert supervision["field"] == "arguments"
    assert supervision["reason"].startswith("Invalid arguments: unexpected argument 'yyy")
    assert len(supervision["reason"].encode()) <= 1024
    assert len(json.dumps(event, ensure_ascii=False).encode()) < 16 * 1024
