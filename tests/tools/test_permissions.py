"""The permission port on its own: rule rows in, ``evaluate(...)`` decisions out."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.catalog import tool_spec
from tools.models import PermissionRule
from tools.permissions import (
    Decision,
    escape_glob,
    evaluate,
    glob_literal,
    specificity,
    suggested_rules,
)
from tools.workspaces import conversation_workspace

from ..conversations.helpers import new_conversation

pytestmark = pytest.mark.django_db

# Commands that run ``rm -rf data`` somewhere, one way of chaining each.
CHAINED = [
    "rm -rf data; true",
    "true;rm -rf data",
    "make && rm -rf data",
    "false || rm -rf data",
    "cat list | rm -rf data",
    "rm -rf data &",
    "sleep 1 & rm -rf data",
    "echo start\nrm -rf data",
    "echo $(rm -rf data)",
    "echo `rm -rf data`",
    "rm -rf data > /dev/null",
    "rm -rf data 2>&1",
    "sort < in.txt; rm -rf data",
    "  rm -rf data",
    "rm -rf data   ",
    "\trm -rf data",
    "rm\t-rf  data",
    "(rm -rf data)",
    "{ rm -rf data; }",
    "cd /tmp && (cd x; rm -rf data)",
    '"rm" -rf data',
    "r''m -rf 'data'",
    "\\rm -rf data",
]

DENY_PATTERNS = ["", "rm *", "rm -rf *", "rm -rf data"]


def _rule(conversation, decision: str, pattern: str, *, tool: str = "bash", **kwargs):
    return PermissionRule.objects.create(
        conversation=conversation, tool_name=tool, pattern=pattern, decision=decision, **kwargs
    )


def _bash(conversation, command: str) -> Decision:
    return evaluate(conversation, "bash", {"command": command})


@pytest.mark.parametrize("scope", ["global", "conversation"])
@pytest.mark.parametrize("pattern", DENY_PATTERNS)
@pytest.mark.parametrize("command", CHAINED)
def test_a_deny_rule_catches_a_chained_simple_command(user, scope, pattern, command):
    conversation = new_conversation(user)
    rule = _rule(conversation if scope == "conversation" else None, "deny", pattern)
    decision, reason, matched = _bash(conversation, command)
    assert (decision, matched) == ("deny", rule)
    assert reason == "Denied by permission policy."


@pytest.mark.parametrize(
    "command",
    [
        "echo rm -rf data",  # rm is an argument here, not a command
        'echo "a; rm -rf data"',  # quoted: one argument of echo, as the shell reads it
        "farm -rf data",
        "git status; ls",
        "make > rm",  # a redirection target is its own part: "rm" is not "rm *"
    ],
)
def test_a_deny_rule_does_not_catch_what_it_does_not_name(user, command):
    conversation = new_conversation(user)
    _rule(None, "deny", "rm *")
    reason = f"No permission rule allows bash to run “{command}”."
    assert _bash(conversation, command) == ("ask", reason, None)


def test_a_global_deny_wins_over_an_exact_conversation_allow_of_the_chain(user):
    conversation = new_conversation(user)
    _rule(conversation, "allow", "rm -rf data; true")
    deny = _rule(None, "deny", "rm *")
    assert _bash(conversation, "rm -rf data; true").rule == deny


@pytest.mark.parametrize(
    ("pattern", "command", "decision"),
    [
        # Wildcards never carry a control character.
        ("git status*", "git status; rm -rf /", "ask"),
        ("git status*", "git status && x", "ask"),
        ("git status*", "git status | sh", "ask"),
        ("git status*", "git status > f", "ask"),
        ("git status*", "git status $(x)", "ask"),
        ("git status*", "git status `x`", "ask"),
        ("git status*", "git status\nrm x", "ask"),
        ("ls *", "ls -a & rm -rf /", "ask"),
        ("ls *", "ls -a & ls -b", "allow"),  # every simple command matched
        ("*", "ls & rm -rf /", "allow"),  # a rule for every command allows every command
        ("", "ls & rm -rf /", "allow"),
        ("ls | wc -?", "ls | wc -l", "ask"),
        # Exact equality does.
        ("ls | wc -l", "ls | wc -l", "allow"),
        ("make build > log.txt", "make build > log.txt", "allow"),
        ("ls [*].py > out", "ls *.py > out", "allow"),
        ("ls [*].py > out", "ls a.py > out", "ask"),
        ("make build > log.txt", " make build > log.txt", "ask"),
        # A single simple command: the glob applies to its words.
        ("git status*", "git status --short", "allow"),
        ("", "anything at all", "allow"),
    ],
)
def test_allow_rules_match_every_simple_command_or_the_whole_line_exactly(
    user, pattern, command, decision
):
    conversation = new_conversation(user)
    _rule(conversation, "allow", pattern)
    assert _bash(conversation, command).decision == decision


def test_an_ask_rule_on_a_host_tool_holds_for_its_command_in_a_chain(user):
    conversation = new_conversation(user)
    ask = _rule(conversation, "ask", "deploy *", tool="remote_shell")
    assert evaluate(conversation, "remote_shell", {"command": "deploy prod"}).decision == "ask"
    # The strictest decision of the simple commands: the rule asks for ``deploy a``, though
    # the host tool's default (allow) decides ``b``.
    assert evaluate(conversation, "remote_shell", {"command": "deploy a; b"}).rule == ask
    assert evaluate(conversation, "remote_shell", {"command": "b; c"}).decision == "allow"
    # A deny rule catches a part of it.
    _rule(None, "deny", "b", tool="remote_shell")
    assert evaluate(conversation, "remote_shell", {"command": "deploy a; b"}).decision == "deny"


def test_ordering_is_unchanged_for_plain_commands(user):
    conversation = new_conversation(user)
    _rule(None, "ask", "git *")
    _rule(conversation, "allow", "git *")
    push = _rule(conversation, "ask", "git push*")
    assert _bash(conversation, "git log").decision == "allow"
    assert _bash(conversation, "git push origin").rule == push
    # A conversation deny is ordered like any conversation rule: the more specific allow wins.
    _rule(conversation, "deny", "git p*")
    assert _bash(conversation, "git push origin").rule == push
    assert _bash(conversation, "git pull").decision == "deny"


def test_a_long_rule_reason_is_cut(user):
    conversation = new_conversation(user)
    _rule(None, "deny", "", reason="€" * 500)
    reason = _bash(conversation, "ls").reason
    assert len(reason.encode()) <= 1024 and reason.endswith("…")


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("rm -rf ./build/*", "rm -rf ./build/[*]"),
        ("ls a?.txt", "ls a[?].txt"),
        ("cat [x].txt", "cat [[]x].txt"),
        ("plain", "plain"),
    ],
)
def test_escape_glob_matches_exactly_its_text(text, pattern):
    assert escape_glob(text) == pattern
    assert glob_literal(pattern) == text
    assert specificity(pattern) == len(text)


def test_glob_literal_refuses_real_wildcards():
    for pattern in ("a*", "a?", "[ab]", "x[*]*", "a["):
        assert glob_literal(pattern) is None, pattern
    assert glob_literal("") == ""


def test_suggestions_are_the_escaped_exact_command_then_a_wider_entry():
    bash = tool_spec("bash")
    assert suggested_rules(bash, {"command": "rm -rf ./build/*"}, None) == [
        {"toolName": "bash", "pattern": "rm -rf ./build/[*]", "decision": "allow"},
        {"toolName": "bash", "pattern": "rm *", "decision": "allow"},
    ]
    assert suggested_rules(bash, {"command": "make > log; true"}, None) == [
        {"toolName": "bash", "pattern": "make > log; true", "decision": "allow"},
    ]
    assert suggested_rules(bash, {"command": "ls"}, None) == [
        {"toolName": "bash", "pattern": "ls", "decision": "allow"},
    ]


def test_a_path_suggestion_is_the_escaped_resolved_path(settings):
    workspace = Path(settings.TOOLCORE_WORKSPACE_ROOT).resolve() / "1" / "ws"  # checked: below it
    (suggestion,) = suggested_rules(tool_spec("read"), {"path": "src/../a[1]*.txt"}, workspace)
    assert suggestion["pattern"] == f"{escape_glob(str(workspace))}/a[[]1][*].txt"


def test_no_suggestion_when_the_exact_one_could_not_be_saved():
    # Never a wider rule in its place: persisting such an approval saves nothing.
    assert suggested_rules(tool_spec("bash"), {"command": "echo " + "*" * 400}, None) == []
    assert suggested_rules(tool_spec("bash"), {"command": "echo " + "x" * 1019}, None) != []


# --- approval reasons: which tool, which command or path, and why ----------------------------


def test_an_approval_reason_names_the_tool_and_the_command(user):
    conversation = new_conversation(user)
    assert _bash(conversation, "git push origin main").reason == (
        "No permission rule allows bash to run “git push origin main”."
    )
    # Only the first line of a script, marked as going on; a long line is cut.
    assert _bash(conversation, "make build\nmake test").reason == (
        "No permission rule allows bash to run “make build …”."
    )
    long = _bash(conversation, "echo " + "x" * 500).reason
    assert long.startswith("No permission rule allows bash to run “echo xxx")
    assert len(long.encode()) < 300 and "…" in long


def test_an_approval_reason_names_the_ask_rule_that_matched(user):
    conversation = new_conversation(user)
    _rule(conversation, "allow", "git *")
    push = _rule(conversation, "ask", "git push*")
    decision = _bash(conversation, "git push origin")
    assert decision == (
        "ask",
        "This conversation's rule “ask bash git push*” asks before it allows bash to run "
        "“git push origin”.",
        push,
    )
    noted = _rule(None, "ask", "docker *", reason="Containers touch the shared host.")
    assert _bash(conversation, "docker ps") == (
        "ask",
        "The global rule “ask bash docker *” asks before it allows bash to run “docker ps”. "
        "Its reason: Containers touch the shared host.",
        noted,
    )


def test_an_approval_reason_for_a_path_tool_names_the_resolved_path(user, settings):
    conversation = new_conversation(user)
    _rule(conversation, "ask", "*/secrets/*", tool="read")
    decision = evaluate(conversation, "read", {"path": "secrets/key.pem"})
    path = conversation_workspace(conversation) / "secrets" / "key.pem"
    assert decision.reason == (
        f"This conversation's rule “ask read */secrets/*” asks before it allows read on “{path}”."
    )


def test_an_approval_reason_says_why_no_rule_can_allow_the_command(user):
    conversation = new_conversation(user)
    _rule(conversation, "allow", "ls *")
    assert _bash(conversation, "$X -la").reason == (
        "No rule can allow bash to run “$X -la”: it is not a plain command (a command word "
        "from an expansion: $X)."
    )
    assert _bash(conversation, "ls -la > out.txt").reason == (
        "No permission rule allows bash to run “ls -la > out.txt”: it writes to a file "
        "(> out.txt), which a rule allows only when it names the whole command."
    )


def test_deny_and_allow_reasons_keep_their_short_forms(user):
    conversation = new_conversation(user)
    _rule(conversation, "allow", "ls *")
    assert _bash(conversation, "ls -la").reason == "Allowed by a permission rule."
    _rule(None, "deny", "rm *")
    assert _bash(conversation, "rm -rf x").reason == "Denied by permission policy."
    assert evaluate(conversation, "read", {"path": "a.txt"}).reason == "Allowed by default."
