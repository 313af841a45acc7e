"""Supervision: schema checks name the field; the permission port's rules in their order."""

from __future__ import annotations

import pytest

from conversations.models import ConversationEvent, ToolCall
from conversations.services.messages import command_post
from tools.catalog import tool_spec
from tools.models import PermissionRule
from tools.permissions import evaluate, specificity

from .api_helpers import grant_run_commands
from .helpers import assistant_calls, new_conversation, open_turn

pytestmark = pytest.mark.django_db


def _call(user, name, arguments, conversation=None):
    conversation = conversation or new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, (name, arguments)).call_ids
    call = ToolCall.objects.filter(pk=call_id).first()
    response = ConversationEvent.objects.filter(tool_call_id=call_id).first()
    return conversation, call, response


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({}, "path"),
        ({"path": 5}, "path"),
        ({"path": "a", "limit": 0}, "limit"),
        ({"path": "a", "limit": 2001}, "limit"),
        ({"path": "a", "bogus": 1}, "arguments"),
    ],
)
def test_bad_arguments_settle_failed_naming_the_field(user, arguments, field):
    _, call, response = _call(user, "read", arguments)
    assert call is None
    assert response.payload["outcome"] == "failed"
    assert response.payload["supervision"]["field"] == field
    text = response.payload["modelContent"][0]["text"]
    assert text.startswith("Tool call failed.\nTool: read\nReason: ")
    assert "Next action: Fix the cause, then retry if it still makes sense." in text


def test_default_decisions(user):
    assert _call(user, "read", {"path": "a.txt"})[1].state == "ready"
    _, bash, _ = _call(user, "bash", {"command": "ls"})
    assert bash.state == "awaiting_approval"
    assert bash.interaction["kind"] == "approval"
    assert bash.interaction["request"]["suggestedRules"][0] == {
        "toolName": "bash",
        "pattern": "ls",
        "decision": "allow",
    }
    assert _call(user, "some_host_tool", {"x": 1})[1].state == "ready"


def test_global_deny_wins_over_a_specific_conversation_allow(user):
    conversation = new_conversation(user)
    PermissionRule.objects.create(
        tool_name="bash", pattern="", decision="deny", reason="No shells here."
    )
    PermissionRule.objects.create(
        conversation=conversation, tool_name="bash", pattern="git status", decision="allow"
    )
    _, call, response = _call(user, "bash", {"command": "git status"}, conversation)
    assert call is None and response.payload["outcome"] == "denied"
    assert "Reason: No shells here." in response.payload["modelContent"][0]["text"]


def test_conversation_rules_before_global_ones_and_most_specific_first(user):
    conversation = new_conversation(user)
    PermissionRule.objects.create(tool_name="bash", pattern="git *", decision="ask")
    PermissionRule.objects.create(
        conversation=conversation, tool_name="bash", pattern="git *", decision="allow"
    )
    PermissionRule.objects.create(
        conversation=conversation, tool_name="bash", pattern="git push*", decision="ask"
    )
    assert _call(user, "bash", {"command": "git log"}, conversation)[1].state == "ready"
    assert (
        _call(user, "bash", {"command": "git push origin"}, conversation)[1].state
        == "awaiting_approval"
    )


def test_at_equal_specificity_deny_beats_ask_beats_allow(user):
    conversation = new_conversation(user)
    for decision in ("allow", "ask"):
        PermissionRule.objects.create(
            conversation=conversation, tool_name="bash", pattern="make *", decision=decision
        )
    assert (
        _call(user, "bash", {"command": "make test"}, conversation)[1].state == "awaiting_approval"
    )
    PermissionRule.objects.create(
        conversation=conversation, tool_name="bash", pattern="make *", decision="deny"
    )
    assert _call(user, "bash", {"command": "make test"}, conversation)[1] is None


def test_shell_control_characters_match_only_an_exact_wildcard_free_pattern(user):
    conversation = new_conversation(user)
    PermissionRule.objects.create(
        conversation=conversation, tool_name="bash", pattern="git status*", decision="allow"
    )
    for command in (
        "git status; rm -rf /",
        "git status && x",
        "git status | sh",
        "git status > f",
        "git status $(x)",
        "git status `x`",
        "git status\nrm x",
    ):
        assert (
            _call(user, "bash", {"command": command}, conversation)[1].state == "awaiting_approval"
        ), command
    PermissionRule.objects.create(
        conversation=conversation, tool_name="bash", pattern="ls | wc -l", decision="allow"
    )
    assert _call(user, "bash", {"command": "ls | wc -l"}, conversation)[1].state == "ready"


def test_specificity_counts_literal_characters():
    assert specificity("") == -1  # the empty pattern ranks below every other, "*" included
    assert specificity("*") == 0
    assert specificity("git *") == 4
    assert specificity("a?c[xyz]*") == 2


def test_path_rules_match_the_resolved_path(user, settings):
    conversation = new_conversation(user)
    workspace = settings.TOOLCORE_WORKSPACE_ROOT / str(user.pk) / conversation.workspace
    PermissionRule.objects.create(
        tool_name="read", pattern=f"{workspace}/secrets/*", decision="deny"
    )
    decision = evaluate(
        conversation.pk, tool_spec("read"), {"path": "src/../secrets/key"}, workspace=workspace
    )
    assert decision.decision == "deny"
    assert decision.as_supervision()["rule"]["scope"] == "global"
    # The port as docs/subsystems/supervision.md writes it: the conversation resolves the workspace, the tool by name.
    decision, reason, rule = evaluate(conversation, "read", {"path": "src/../secrets/key"})
    assert (decision, reason) == ("deny", "Denied by permission policy.")
    assert rule.pattern == f"{workspace}/secrets/*"
    assert evaluate(conversation, "read", {"path": "src/main.py"}) == (
        "allow",
        "Allowed by default.",
        None,
    )


def test_a_users_command_treats_ask_as_allow_but_deny_denies(user):
    grant_run_commands(user)
    conversation = new_conversation(user)
    posted = command_post(
        conversation_id=conversation.pk, user=user, input_id="i1", command="ls -la"
    )
    call = ToolCall.objects.get(pk=posted.call_ids[0])
    assert call.state == "ready" and call.origin == "user"
    assert call.supervision["decision"] == "ask" and call.supervision["effective"] == "allow"


def test_an_empty_pattern_is_less_specific_than_a_bare_wildcard(user):
    conversation = new_conversation(user)
    PermissionRule.objects.create(
        conversation=conversation, tool_name="bash", pattern="", decision="deny"
    )
    PermissionRule.objects.create(
        conversation=conversation, tool_name="bash", pattern="*", decision="allow"
    )
    _, call, _ = _call(user, "bash", {"command": "ls"}, conversation)
    assert call.state == "ready"
    assert call.supervision["rule"]["pattern"] == "*"
    assert isinstance(call.supervision["rule"]["id"], str)
