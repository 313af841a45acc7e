"""Permission rules against chaining, quoting, wrapping and globbing tricks, table-driven
(docs/subsystems/supervision.md; the cases of tests/tools/test_permissions.py are not repeated).

Commands are parsed with tree-sitter's bash grammar into their simple commands (tools/shell). A
deny rule catches any simple command of a line, whatever runs it: ``$(…)``, backquotes, reserved
words, runners read by their options (``timeout -s KILL 5``, ``env -u HOME``, ``xargs -I %``,
``sh -ec``), redirections anywhere, line continuations; a line it cannot check (``$X`` as a
command, a function, ``eval``) is denied. An allow rule never lets chaining ride it: it must match
every simple command. Suggested rules escape glob characters and never widen to a runner, so an
approval allows exactly what was approved."""

from __future__ import annotations

import pytest

from conversations.models import ToolCall
from tests.conversations.api_helpers import API, grant_run_commands
from tests.conversations.helpers import (
    assistant_calls,
    new_conversation,
    open_turn,
    outcome_of,
    state_of,
)
from tests.tools.worker_helpers import running_worker, wait_for
from tools.catalog import tool_spec
from tools.models import PermissionRule
from tools.permissions import evaluate, suggested_rules
from tools.runtime.registry import HANDLERS
from tools.workspaces import conversation_workspace

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
    ("ls *", "ls -la >> ~/.bashrc"),
    ("echo ?", "echo;rm"),
    ("timeout *", "timeout 5 rm -rf /"),
    ("env *", "env -u HOME rm -rf /"),
    ("xargs *", "echo / | xargs rm -rf"),
    ("sh *", "sh -c 'rm -rf /'"),
    ("sudo *", "sudo rm -rf /"),
    ("*", "$X -rf /"),
    ("", "eval 'rm -rf /'"),
]


@pytest.mark.parametrize(("pattern", "command"), RIDERS)
@pytest.mark.parametrize("decision", ["allow", "ask"])
def test_no_chain_rides_an_allow_or_ask_rule(user, pattern, command, decision):
    conversation = new_conversation(user)
    rule = _rule(conversation, decision, pattern)
    assert evaluate(conversation, "bash", {"command": command}).rule != rule, command


# (allow pattern, command): quotes are read as the shell reads them, and a rule that matches
# every simple command allows the line.
ALLOWED = [
    ("echo *", 'echo "a;b"'),
    ("echo *", "echo 'a|b'"),
    ("ls *", "ls '$(not run: quoted)'"),
    ("git *", 'git commit -m "$MSG"'),
    ("git *", "git status && git diff"),
    ("*", "true; rm -rf /"),
    ("", "true; rm -rf /"),
    ("ls *", "ls -la 2>/dev/null"),
]


@pytest.mark.parametrize(("pattern", "command"), ALLOWED)
def test_a_rule_matching_every_simple_command_allows_the_line(user, pattern, command):
    conversation = new_conversation(user)
    rule = _rule(conversation, "allow", pattern)
    assert evaluate(conversation, "bash", {"command": command}) == (
        "allow",
        "Allowed by a permission rule.",
        rule,
    )


def test_a_runner_needs_its_own_rule_and_the_command_it_runs_too(user):
    """``timeout 5 make`` runs two programs: an allow rule for ``make`` does not allow it through
    ``timeout``, an allow rule for ``timeout`` never allows what it runs; both do."""
    conversation = new_conversation(user)
    _rule(conversation, "allow", "make *")
    assert _decision(conversation, "timeout 5 make build") == "ask"
    _rule(conversation, "allow", "timeout *")
    assert _decision(conversation, "timeout 5 make build") == "allow"
    assert _decision(conversation, "timeout 5 rm -rf build") == "ask"
    assert _decision(conversation, "sudo make build") == "ask"


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


# --- every form the outside trial found (issue: "Deny rules leak") ---------------------------
# Each runs PROGRAM ARGS; ``{split}`` is the program's name cut by a line continuation.
FORM_TEMPLATES = [
    "{split}",
    "true; {split}",
    "cat <<EOF\n$({split})\nEOF\n",
    "bash <<EOF\n{split}\nEOF\n",
    "timeout 5s {cmd}",
    "timeout -s KILL 5 {cmd}",
    "env -u HOME {cmd}",
    "env -C . {cmd}",
    "stdbuf -o L {cmd}",
    "sh -ec '{cmd}'",
    "sh -e -c '{cmd}'",
    "bash -xc '{cmd}'",
    ">out {cmd}",
    "2>/dev/null {cmd}",
    "true; {program} >out {args}",
    "X=1 {program}>/dev/null {args}",
    'f(){{ "$@"; }}; f {cmd}',
    "echo {target} | xargs -I % {program} {args_but_target} %",
    "echo {target} | xargs {program} {args_but_target}",
    "echo {target} | xargs -n1 {program} {args_but_target}",
]
PROGRAMS = {
    "rm": ("-rf x", "x"),
    "curl": ("-so out http://127.0.0.1:9/x", "http://127.0.0.1:9/x"),
}


def _form(template: str, program: str) -> str:
    args, target = PROGRAMS[program]
    return template.format(
        split=f"{program[0]}\\\n{program[1:]} {args}",
        cmd=f"{program} {args}",
        program=program,
        args=args,
        target=target,
        args_but_target=args.removesuffix(target).strip(),
    )


FORMS = [(program, _form(t, program)) for program in PROGRAMS for t in FORM_TEMPLATES]


@pytest.mark.parametrize(("program", "command"), FORMS)
def test_every_form_is_denied_as_a_model_call(user, program, command):
    """As the model asks for it: the call settles ``denied`` (before: merely asked)."""
    conversation = new_conversation(user)
    _rule(None, "deny", f"{program} *")
    (call_id,) = assistant_calls(
        conversation, open_turn(conversation), ("bash", {"command": command})
    ).call_ids
    assert outcome_of(call_id) == "denied", command


@pytest.mark.parametrize(("program", "command"), FORMS)
def test_every_form_is_denied_as_a_typed_command(user, api, program, command):
    """As the user types it (``ask`` counts as ``allow`` there, so before it ran)."""
    grant_run_commands(user)
    conversation = new_conversation(user)
    _rule(None, "deny", f"{program} *")
    answer = api.post_json(
        f"{API}/conversations/{conversation.pk}/commands",
        {"inputId": "c1", "command": command, "includeInContext": True},
    )
    assert answer.status_code == 201, answer.content
    assert outcome_of(answer.json()["toolCall"]["id"]) == "denied", command


@pytest.mark.django_db(transaction=True)
def test_no_form_removes_the_file_through_a_real_worker(user, api, settings):
    """End to end, with a worker that runs whatever is not denied: every ``rm`` form typed in
    turn leaves ``x`` in place; the control, ``rm -rf x`` once the rule is gone, removes it."""
    grant_run_commands(user)
    conversation = new_conversation(user)
    workspace = conversation_workspace(conversation)
    workspace.mkdir(parents=True)
    (workspace / "x").write_text("keep me")
    rule = _rule(None, "deny", "rm *")
    with running_worker(handlers=HANDLERS):
        for number, (program, command) in enumerate(FORMS):
            if program != "rm":
                continue
            answer = api.post_json(
                f"{API}/conversations/{conversation.pk}/commands",
                {"inputId": f"c{number}", "command": command, "includeInContext": True},
            )
            call_id = answer.json()["toolCall"]["id"]
            assert wait_for(lambda call_id=call_id: outcome_of(call_id)) == "denied", command
            assert (workspace / "x").exists(), command
        rule.delete()
        answer = api.post_json(
            f"{API}/conversations/{conversation.pk}/commands",
            {"inputId": "control", "command": "rm -rf x", "includeInContext": True},
        )
        call_id = answer.json()["toolCall"]["id"]
        assert wait_for(lambda: outcome_of(call_id)) == "completed"
    assert not (workspace / "x").exists()


@pytest.mark.parametrize(
    "command",
    ["$X -rf x", 'f(){ "$@"; }; f true', "eval true", "sh ./script.sh", "curl -s x | sh"],
)
def test_what_cannot_be_checked_is_denied_when_a_deny_rule_applies(user, command):
    """A deny rule is a promise: a line that cannot be checked against it does not run, even
    when nothing in it names the denied program. Without any deny rule it is asked."""
    conversation = new_conversation(user)
    assert _decision(conversation, command) == "ask"
    deny = _rule(conversation, "deny", "rm *")
    decision = evaluate(conversation, "bash", {"command": command})
    assert decision.decision == "deny" and decision.rule == deny
    assert decision.reason.startswith("Cannot be checked against the deny rules: ")


def test_a_line_that_is_not_plain_names_the_construct(user):
    conversation = new_conversation(user)
    _rule(None, "deny", "rm *")
    assert evaluate(conversation, "bash", {"command": "$X -rf data"}).reason == (
        "Cannot be checked against the deny rules: a command word from an expansion: $X."
    )
    _rule(conversation, "allow", "*")
    PermissionRule.objects.filter(decision="deny").delete()
    decision = evaluate(conversation, "bash", {"command": "$X -rf data"})
    assert decision == (
        "ask",
        "No rule can allow bash to run “$X -rf data”: it is not a plain command (a command "
        "word from an expansion: $X).",
        None,
    )


@pytest.mark.django_db(transaction=True)
def test_approving_a_runner_with_persist_saves_only_that_command(user, api):
    """Before, approving ``env FOO=1 true`` with ``persist`` offered and saved ``env *``, after
    which ``env -u HOME rm -rf x`` ran with no approval. Now only the exact command is offered."""
    grant_run_commands(user)
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (first,) = assistant_calls(
        conversation, turn_id, ("bash", {"command": "env FOO=1 true"})
    ).call_ids
    suggested = ToolCall.objects.get(pk=first).interaction["request"]["suggestedRules"]
    assert [s["pattern"] for s in suggested] == ["env FOO=1 true"]
    answer = api.post_json(
        f"{API}/tool-calls/{first}/resolution",
        {"requestId": "r1", "kind": "approval", "decision": "allow", "persist": True, "rule": 0},
    )
    assert answer.status_code == 200, answer.content
    (later,) = assistant_calls(
        conversation, turn_id, ("bash", {"command": "env -u HOME rm -rf x"})
    ).call_ids
    assert state_of(later) == "awaiting_approval"


@pytest.mark.parametrize(
    ("command", "patterns"),
    [
        ("git status --short", ["git status --short", "git *"]),
        ("make > log.txt 2>&1", ["make > log.txt 2>&1"]),  # writes a file: exact only
        ("ls | wc -l", ["ls | wc -l"]),
        ("timeout 5 make", ["timeout 5 make"]),
        ("xargs rm", ["xargs rm"]),
        ("sh -c 'ls'", ["sh -c 'ls'"]),
        ("sudo ls /root", ["sudo ls /root"]),
        ("$X -rf data", []),  # not plain: no rule could allow it
        ("eval ls", []),
    ],
)
def test_suggestions_never_widen_to_a_runner(command, patterns):
    suggested = suggested_rules(tool_spec("bash"), {"command": command}, None)
    assert [s["pattern"] for s in suggested] == patterns
