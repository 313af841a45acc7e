"""Supervision: schema checks name the field; the permission port's rules in their order."""

from __future__ import annotations

import os

import pytest

from conversations.models import ConversationEvent, ToolCall
from conversations.services.messages import command_post
from conversations.storage import resolve_workspace
from tools.catalog import tool_spec
from tools.models import PermissionRule
from tools.permissions import evaluate, specificity

from .api_helpers import API, grant_run_commands
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


# --- paths that cannot be resolved: a refusal of that call only --------------------------------


def test_a_symlink_loop_fails_its_call_and_nothing_else_through_the_api(api, user):
    """The issue's case: ``ln -s loop loop``, then ``read loop`` beside an unrelated ``ls``.
    The POST answers 201, the ``read`` settles ``failed`` naming the path, the ``ls`` goes on."""
    conversation = new_conversation(user)
    workspace = resolve_workspace(user.pk, conversation.workspace)
    workspace.mkdir(parents=True)
    (workspace / "loop").symlink_to("loop")
    url = f"{API}/conversations/{conversation.pk}/messages"
    turn = api.post_json(url, {"messageId": "u1", "role": "user", "content": []}).json()
    blocks = [
        {"type": "tool_call", "id": "p1", "name": "read", "arguments": {"path": "loop"}},
        {"type": "tool_call", "id": "p2", "name": "ls", "arguments": {}},
    ]
    message = {"messageId": "a1", "role": "assistant", "turnId": turn["turnId"], "content": blocks}
    posted = api.post_json(url, message)
    assert posted.status_code == 201, posted.content
    read_id, ls_id = (c["id"] for c in posted.json()["toolCalls"])
    response = ConversationEvent.objects.get(tool_call_id=read_id).payload
    assert response["outcome"] == "failed"
    assert response["supervision"] == {
        "decision": "failed",
        "reason": "Path refused: loop runs into a symlink loop.",
        "field": "path",
        "rule": None,
    }
    assert (
        "Reason: Path refused: loop runs into a symlink loop."
        in (response["modelContent"][0]["text"])
    )
    assert ToolCall.objects.get(pk=ls_id).state == "ready"


def test_a_symlink_that_vanishes_while_followed_fails_its_call(user, monkeypatch):
    """A link removed between being seen and being read (``FileNotFoundError`` from
    ``readlink``). The race cannot be won deterministically, so the error the kernel gives then
    is injected into ``os.readlink`` for that one link: fault injection, nothing else faked."""
    conversation = new_conversation(user)
    workspace = resolve_workspace(user.pk, conversation.workspace)
    workspace.mkdir(parents=True)
    (workspace / "gone").symlink_to("target")
    readlink = os.readlink

    def vanishing(path, *args, **kwargs):
        if os.fspath(path).endswith("/gone"):
            raise FileNotFoundError(2, "No such file or directory", os.fspath(path))
        return readlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "readlink", vanishing)
    _, call, response = _call(user, "read", {"path": "gone/x.txt"}, conversation)
    assert call is None and response.payload["outcome"] == "failed"
    assert response.payload["supervision"]["reason"] == (
        "Path refused: gone/x.txt cannot be resolved (it changed while it was followed)."
    )


def test_a_workspace_turned_into_a_symlink_fails_path_calls_in_supervision(user):
    conversation = new_conversation(user)
    workspace = resolve_workspace(user.pk, conversation.workspace)
    workspace.parent.mkdir(parents=True)
    workspace.symlink_to("/")
    _, call, response = _call(user, "read", {"path": "/etc/passwd"}, conversation)
    assert call is None and response.payload["outcome"] == "failed"
    reason = response.payload["supervision"]["reason"]
    assert reason.startswith("Workspace refused: ")
    assert "resolves outside the workspace root" in reason
