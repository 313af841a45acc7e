"""Permission rules against chaining, quoting, wrapping and globbing tricks, table-driven
(docs/subsystems/supervision.md; the cases of tests/tools/test_permissions.py are not repeated).

A deny rule catches any simple command of a chain, whatever runs it: ``$(…)``, backquotes,
reserved words (``!``, ``if``, ``while``, ``time``), runners (``exec``, ``env``, ``sudo``,
``xargs``, ``sh -c``), a folder before the command name, ANSI-C quoting and brace lists. An allow
rule never lets chaining ride it: a command holding a control character matches an allow rule
only by exact equality. Suggested rules escape glob characters, so an approval allows exactly
what was approved."""

from __future__ import annotations

import pytest

from conversations.models import ToolCall
from tests.conversations.api_helpers import API, grant_run_commands
from tests.conversations.helpers import assistant_calls, new_conversation, open_turn
from tools.models import PermissionRule
from tools.permissions import evaluate

pytestmark = pytest.mark.django_db

# Each runs ``rm -rf data`` (or would, where the command exists): a deny ``rm *`` catches it.
DENIED = [
    # chaining
    "true && rm -rf data",
    "false || rm -rf data",
    "ls |& rm -rf data",
    "ls\r\nrm -rf data",
    "x=$(rm -rf data)",
    'echo "$(rm -rf data)"',
    "echo $( rm -rf data )",
    "cat <(rm -rf data)",
    "tee >(rm -rf data)",
    "echo `rm -rf data` done",
    "case x in x) rm -rf data;; esac",
    "f() { rm -rf data; }; f",
    # reserved words of the grammar
    "! rm -rf data",
    "true && ! rm -rf data",
    "if rm -rf data; then :; fi",
    "if true; then rm -rf data; fi",
    "if false; then :; else rm -rf data; fi",
    "while rm -rf data; do :; done",
    "until rm -rf data; do :; done",
    "for x in 1; do rm -rf data; done",
    "time rm -rf data",
    "time -p rm -rf data",
    "coproc rm -rf data",
    # assignments and runners
    "LC_ALL=C rm -rf data",
    "A=1 B=2 rm -rf data",
    "exec rm -rf data",
    "command rm -rf data",
    "builtin command rm -rf data",
    "eval rm -rf data",
    "eval 'rm -rf data'",
    "nohup rm -rf data",
    "env rm -rf data",
    "env -i PATH=/bin rm -rf data",
    "sudo rm -rf data",
    "nice -n 5 rm -rf data",
    "timeout 10 rm -rf data",
    "ls | xargs rm -rf data",
    "sh -c 'rm -rf data'",
    'bash -c "rm -rf data"',
    "/bin/sh -c 'true; rm -rf data'",
    # how the command is spelled
    "/bin/rm -rf data",
    "/usr/bin/rm -rf data",
    "./rm -rf data",
    "$'rm' -rf data",
    '$"rm" -rf data',
    "$'\\x72m' -rf data",
    "$'\\162m' -rf data",
    "r\\m -rf data",
    "'r'\"m\" -rf data",
    "{rm,-rf,data}",
]

# Not ``rm -rf data`` at all: a deny ``rm *`` leaves them to the default (ask).
NOT_DENIED = [
    "echo rm -rf data",
    "grep -r 'rm -rf' .",
    "git commit -m 'rm -rf data'",
    "farm -rf data",
    "ls rm",
    "make > rm",
    "time ls",
    "env",
    "sudo ls",
    "sh -c ls",
]


def _rule(conversation, decision: str, pattern: str, *, tool: str = "bash"):
    return PermissionRule.objects.create(
        conversation=conversation, tool_name=tool, pattern=pattern, decision=decision
    )


def _decision(conversation, command: str) -> str:
    return evaluate(conversation, "bash", {"command": command}).decision


@pytest.mark.parametrize("pattern", ["rm *", "rm -rf *", "rm -rf data"])
@pytest.mark.parametrize("command", DENIED)
def test_a_deny_rule_catches_the_command_however_it_is_run(user, pattern, command):
    conversation = new_conversation(user)
    _rule(None, "deny", pattern)
    assert _decision(conversation, command) == "deny", command


@pytest.mark.parametrize("command", NOT_DENIED)
def test_a_deny_rule_leaves_what_does_not_run_it(user, command):
    conversation = new_conversation(user)
    _rule(None, "deny", "rm *")
    assert _decision(conversation, command) == "ask", command


# (allow pattern, command): the chain must not ride the rule, so the default (ask) decides.
RIDERS = [
    ("ls *", "ls; rm -rf /"),
    ("ls *", "ls && rm -rf /"),
    ("ls *", "ls || rm -rf /"),
    ("ls *", "ls | sh"),
    ("ls *", "ls & rm -rf /"),
    ("ls *", "ls\nrm -rf /"),
    ("ls *", "ls $(rm -rf /)"),
    ("ls *", "ls `rm -rf /`"),
    ("ls *", "ls <(rm -rf /)"),
    ("ls *", "ls > /etc/passwd"),
    ("ls *", "ls 2>/etc/passwd"),
    ("ls *", "ls <<< x"),
    ("ls *", "ls &> log"),
    ("ls *", 'ls "$(rm -rf /)"'),
    ("ls *", "ls '$(not run, but quoted)'"),  # quoted: still only by exact equality
    ("echo *", 'echo "a;b"'),  # not a separator for the shell, but the port does not read quotes
    ("echo *", "echo 'a|b'"),
    ("*", "true; rm -rf /"),
    ("", "true; rm -rf /"),
    ("echo ?", "echo;rm"),
]


@pytest.mark.parametrize(("pattern", "command"), RIDERS)
@pytest.mark.parametrize("decision", ["allow", "ask"])
def test_no_chain_rides_an_allow_or_ask_rule(user, pattern, command, decision):
    conversation = new_conversation(user)
    rule = _rule(conversation, decision, pattern)
    assert evaluate(conversation, "bash", {"command": command}).rule != rule, command


@pytest.mark.parametrize(
    "command",
    ['echo "a;b"', "ls | wc -l", "make > log.txt 2>&1", "rm -rf ./build/*", "ls a?[bc].txt"],
)
def test_the_exact_suggestion_allows_exactly_that_command(user, command):
    """What an approver saves from ``suggestedRules[0]``: the command with its glob characters
    escaped; it allows that text and nothing the glob characters would have matched."""
    conversation = new_conversation(user)
    (call_id,) = assistant_calls(
        conversation, open_turn(conversation), ("bash", {"command": command})
    ).call_ids
    exact = ToolCall.objects.get(pk=call_id).interaction["request"]["suggestedRules"][0]
    _rule(conversation, "allow", exact["pattern"])
    assert _decision(conversation, command) == "allow"
    for other in (command + " x", command.replace("*", "../../home"), command.replace("?", "x")):
        if other != command:
            assert _decision(conversation, other) == "ask", (exact, other)


@pytest.mark.django_db(transaction=True)
def test_approving_a_glob_command_with_persist_never_allows_a_wider_one(user, api):
    """End to end: ``rm -rf ./build/*`` approved with ``persist`` (the exact suggestion) saves
    ``rm -rf ./build/[*]``; the next ``rm -rf ./build/../../home`` still asks."""
    grant_run_commands(user)
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (first,) = assistant_calls(
        conversation, turn_id, ("bash", {"command": "rm -rf ./build/*"})
    ).call_ids
    answer = api.post_json(
        f"{API}/tool-calls/{first}/resolution",
        {"requestId": "r1", "kind": "approval", "decision": "allow", "persist": True, "rule": 0},
    )
    assert answer.status_code == 200, answer.content
    saved = PermissionRule.objects.get(conversation=conversation)
    assert (saved.pattern, saved.decision) == ("rm -rf ./build/[*]", "allow")
    again, wider = assistant_calls(
        conversation,
        turn_id,
        ("bash", {"command": "rm -rf ./build/*"}),
        ("bash", {"command": "rm -rf ./build/../../home"}),
    ).call_ids
    states = dict(ToolCall.objects.filter(pk__in=[again, wider]).values_list("pk", "state"))
    assert states[wider] == "awaiting_approval"
    assert states.get(again, "ready") in ("ready", "running")  # allowed (a worker may take it)
