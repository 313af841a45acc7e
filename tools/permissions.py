"""The permission port: ``allow``, ``ask`` or ``deny`` for (conversation, tool, arguments).

Never executes anything and never writes. Shell commands are matched with care: an ``allow`` or
``ask`` rule matches a command holding shell control characters only by exact equality, while a
``deny`` rule also matches any simple command of it (``rm -rf data; true`` is caught by
``deny rm *``).
"""

from __future__ import annotations

import fnmatch
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

from django.db.models import Q

from projections.units import cut_text

from .catalog import ToolSpec, tool_spec
from .models import PermissionRule
from .workspaces import conversation_workspace, path_subject

# A command with one of these matches an allow or ask rule only by exact equality.
_SHELL_CONTROL = re.compile(r"[;&|`><\n]|\$\(")
# Where a command line is cut into simple commands: the control characters, and subshell and
# group brackets too (a deny rule errs toward matching). A redirection takes its file descriptor
# number along (``2>``), so that ``rm -rf data 2>&1`` still holds ``rm -rf data``.
_COMMAND_SEPARATOR = re.compile(r"\$\(|(?:(?<!\S)\d+)?[<>]|[;&|`\n(){}]")
# Dropped from a simple command for a deny rule's second look: the shell removes them too.
_QUOTING = str.maketrans("", "", "'\"\\")
# ANSI-C and locale quoting (``$'rm'``, ``$"rm"``): the ``$`` goes with the quotes.
_DOLLAR_QUOTE = re.compile(r"\$(?=['\"])")
_ANSI_C = re.compile(r"\$'((?:[^'\\]|\\.)*)'")
# Words before the command of a simple command that make the next word the command: reserved
# words of the shell grammar, builtins and programs that run their arguments as a command.
_PRECOMMANDS = frozenset(
    [
        "!",
        "if",
        "then",
        "elif",
        "else",
        "do",
        "while",
        "until",
        "time",
        "coproc",
        "exec",
        "command",
        "builtin",
        "eval",
        "nohup",
        "env",
        "sudo",
        "doas",
        "xargs",
        "nice",
        "ionice",
        "timeout",
        "stdbuf",
        "setsid",
    ]
)
_SHELLS = frozenset(["sh", "bash", "dash", "zsh", "ksh", "mksh", "busybox"])  # ``sh -c 'rm -rf x'``
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_DECISION_RANK = {"deny": 0, "ask": 1, "allow": 2}
_WILDCARD = re.compile(r"\*|\?|\[[^\]]*\]")
# A glob character written as a one-character set matches exactly that character.
_ESCAPED = re.compile(r"\[([*?[])\]")
_LITERAL_GLOB = re.compile(r"(?:\[[*?[]\]|[^*?[])*")
# A suggestion longer than a rule's pattern column could not be saved; none is offered then.
_PATTERN_MAX_CHARS = PermissionRule._meta.get_field("pattern").max_length


class Decision(NamedTuple):
    """``(decision, reason, rule)``: the port's answer, unpackable as a triple."""

    decision: str
    reason: str
    rule: PermissionRule | None

    def as_supervision(self) -> dict[str, Any]:
        rule = None
        if self.rule is not None:
            rule = {
                "id": str(self.rule.pk),
                "toolName": self.rule.tool_name,
                "pattern": self.rule.pattern,
                "decision": self.rule.decision,
                "scope": "global" if self.rule.conversation_id is None else "conversation",
            }
        return {"decision": self.decision, "reason": self.reason, "rule": rule}


def specificity(pattern: str) -> int:
    """Number of literal, non-wildcard characters of a glob (an escaped ``[*]`` is one literal
    character); the empty pattern ranks below every other (-1), so ``""`` never ties with
    ``"*"``."""
    if pattern == "":
        return -1
    return len(_WILDCARD.sub("", _ESCAPED.sub("x", pattern)))


def escape_glob(text: str) -> str:
    """A pattern that matches exactly ``text``: ``*``, ``?`` and ``[`` as ``[*]``, ``[?]``,
    ``[[]``."""
    return re.sub(r"[*?[]", lambda m: f"[{m.group()}]", text)


def glob_literal(pattern: str) -> str | None:
    """The only text ``pattern`` matches when it has no real wildcard (escaped glob characters
    read as themselves), else None."""
    if _LITERAL_GLOB.fullmatch(pattern) is None:
        return None
    return _ESCAPED.sub(r"\1", pattern)


def simple_commands(command: str) -> list[str]:
    """The simple commands of a command line, each trimmed, empty ones dropped.

    Cut at ``;``, ``&&``, ``||``, ``|``, ``&``, newlines, ``>`` and ``<`` (a redirection target
    is a part of its own), ``$(`` and ``)``, backquotes, and ``(``, ``{``, ``}``. Quotes are not
    read: a separator inside quotes cuts too, which only ever gives a deny rule more to match.
    """
    return [part.strip() for part in _COMMAND_SEPARATOR.split(command) if part.strip()]


def _ansi_c_unquoted(text: str) -> str:
    """``$'\\x72m'`` read as the shell reads it (``rm``), for a deny rule's look."""

    def decode(match: re.Match) -> str:
        try:
            return match.group(1).encode("latin-1", "backslashreplace").decode("unicode_escape")
        except UnicodeDecodeError:
            return match.group(1)

    return _ANSI_C.sub(decode, text)


def _unwrapped(words: list[str]) -> list[str]:
    """The words from the command on: reserved words (``!``, ``if``, ``do``, ``time`` …),
    assignments (``X=1``), command runners (``exec``, ``env``, ``sudo``, ``nice -n 5`` …, with
    their options) and ``sh -c`` dropped from the front."""
    at, wrapped = 0, False
    while at < len(words):
        word = words[at]
        if word in _PRECOMMANDS or _ASSIGNMENT.match(word):
            at, wrapped = at + 1, True
        elif wrapped and (word.startswith("-") or word.isdigit()):
            at += 1  # an option of a runner: ``time -p``, ``nice -n 5``, ``timeout 10``
        elif word.rsplit("/", 1)[-1] in _SHELLS and words[at + 1 : at + 2] == ["-c"]:
            at, wrapped = at + 2, True
        else:
            break
    return words[at:]


def _command_forms(part: str) -> set[str]:
    """``part`` and the texts the shell would run it as: runners and reserved words dropped,
    the command named without its folder (``/bin/rm`` is ``rm``), a brace list spelled out
    (``{rm,-rf,data}`` is ``rm -rf data``)."""
    forms = {part, " ".join(part.split())}
    for words in (part.split(), part.replace(",", " ").split()):
        words = _unwrapped(words)
        if not words:
            continue
        forms.add(" ".join(words))
        if "/" in words[0]:
            forms.add(" ".join([words[0].rsplit("/", 1)[-1], *words[1:]]))
    return forms


@lru_cache(maxsize=4)  # one command meets every deny rule of its tool in turn
def _deny_candidates(command: str) -> frozenset[str]:
    """The texts a deny rule is tried on: the whole command, trimmed or not, and every simple
    command of it; each also with quotes and backslashes dropped and runs of white space made
    single spaces, as the shell reads them (``"rm"  -rf data`` runs ``rm -rf data``), and in
    the forms of ``_command_forms`` (``! rm``, ``if rm …``, ``sudo rm``, ``/bin/rm``)."""
    parts = {command, command.strip(), *simple_commands(command)}
    unquoted = {_ansi_c_unquoted(part) for part in parts}
    plain = {_DOLLAR_QUOTE.sub("", part).translate(_QUOTING) for part in parts | unquoted}
    out: set[str] = set()
    for part in parts | unquoted | plain:
        out |= _command_forms(part)
    return frozenset(out)


def rule_subject(spec: ToolSpec, arguments: Any, workspace: Path | None) -> str:
    """What a rule's pattern is matched against: the command, the resolved path, or ``""``.

    ``PathRefused`` (``tools/workspaces.py``) when a path cannot be resolved (a symlink loop, a
    component that vanished) or the workspace is refused: the caller refuses that call."""
    if not isinstance(arguments, dict):
        return ""
    if spec.subject == "command" or (not spec.core and isinstance(arguments.get("command"), str)):
        command = arguments.get("command")
        return command if isinstance(command, str) else ""
    raw = arguments.get("path")
    if raw is None and not spec.core:
        raw = arguments.get("file_path")
    if spec.is_path_tool and raw is None:
        raw = "."
    if not isinstance(raw, str):
        return ""
    if workspace is None:
        return raw
    return path_subject(workspace, raw)  # PathRefused when it cannot be resolved


def rule_matches(rule: PermissionRule, subject: str, *, is_command: bool) -> bool:
    """Whether ``rule`` applies to ``subject`` (a command when ``is_command``, else a path).

    On a command a deny rule matches the whole command or any simple command of it; an allow or
    ask rule matches a command with shell control characters only when the pattern has no real
    wildcard and reads exactly as the command.
    """
    pattern = rule.pattern
    if not is_command:
        return pattern == "" or fnmatch.fnmatchcase(subject, pattern)
    if rule.decision == "deny":
        return pattern == "" or any(
            fnmatch.fnmatchcase(part, pattern) for part in _deny_candidates(subject)
        )
    if _SHELL_CONTROL.search(subject):
        return glob_literal(pattern) == subject
    return pattern == "" or fnmatch.fnmatchcase(subject, pattern)


def evaluate(
    conversation: Any, tool: ToolSpec | str, arguments: Any, *, workspace: Path | None = None
) -> Decision:
    """``evaluate(conversation, tool, arguments) -> (decision, reason, rule)``.

    ``conversation`` is a ``Conversation`` (its workspace resolves path rules unless
    ``workspace`` is given) or its id; ``tool`` a catalog entry or a tool name. A matching
    global deny wins; then conversation rules before global ones, most specific pattern first,
    deny > ask > allow at equal specificity; else the tool's default decision.
    """
    spec = tool if isinstance(tool, ToolSpec) else tool_spec(tool)
    conversation_id = getattr(conversation, "pk", conversation)
    if workspace is None and hasattr(conversation, "owner_id"):
        workspace = conversation_workspace(conversation)
    subject = rule_subject(spec, arguments, workspace)
    is_command = spec.subject == "command" or (
        not spec.core and isinstance(arguments, dict) and "command" in arguments
    )
    rules = [
        rule
        for rule in PermissionRule.objects.filter(
            Q(conversation_id=conversation_id) | Q(conversation__isnull=True), tool_name=spec.name
        )
        if rule_matches(rule, subject, is_command=is_command)
    ]
    for rule in rules:
        if rule.conversation_id is None and rule.decision == "deny":
            return Decision("deny", _rule_reason(rule), rule)
    if rules:
        rules.sort(
            key=lambda r: (
                0 if r.conversation_id is not None else 1,
                -specificity(r.pattern),
                _DECISION_RANK[r.decision],
                r.pk,
            )
        )
        best = rules[0]
        return Decision(best.decision, _rule_reason(best), best)
    return Decision(
        spec.default_decision, _default_reason(spec.default_decision, default=True), None
    )


def _rule_reason(rule: PermissionRule) -> str:
    return cut_text(rule.reason) if rule.reason else _default_reason(rule.decision)


def _default_reason(decision: str, *, default: bool = False) -> str:
    if decision == "deny":
        return "Denied by permission policy."
    if decision == "ask":
        return "This tool needs approval." if default else "A permission rule asks for approval."
    return "Allowed by default." if default else "Allowed by a permission rule."


def suggested_rules(spec: ToolSpec, arguments: Any, workspace: Path | None) -> list[dict[str, str]]:
    """Rules an approver may save with ``persist: true``: first the exact subject, its glob
    characters escaped so that it matches only that text, then a prefix glob as its own entry.

    No rules at all when the exact subject is too long for a rule's pattern: a wider rule is
    never saved in its place.
    """
    subject = rule_subject(spec, arguments, workspace)
    exact = escape_glob(subject)
    if len(exact) > _PATTERN_MAX_CHARS:
        return []
    rules = [{"toolName": spec.name, "pattern": exact, "decision": "allow"}]
    if spec.subject == "command" and subject and not _SHELL_CONTROL.search(subject):
        first = subject.split()[0]
        if first != subject.strip():
            wider = f"{escape_glob(first)} *"
            rules.append({"toolName": spec.name, "pattern": wider, "decision": "allow"})
    return rules
