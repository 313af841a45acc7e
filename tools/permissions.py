"""The permission port: ``allow``, ``ask`` or ``deny`` for (conversation, tool, arguments).

Never executes anything and never writes. A shell command is parsed, not pattern-cut
(``tools/shell``): rules are matched against each simple command it runs, runners unwrapped.
A deny rule that matches any simple command denies the whole line; a line that is not plain
(``$X`` as a command, ``eval``, a function…) cannot be checked, so it is denied whenever a deny
rule of the tool applies and never allowed by a rule; an allow or ask rule decides a plain line
only when every simple command is matched, the strictest decision winning. A rule whose pattern
reads exactly as the whole line (the exact suggestion of an approval) matches the whole line.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

import regex
from django.db.models import Q

from projections.units import cut_text

from .catalog import ToolSpec, tool_spec
from .models import PermissionRule
from .shell import CommandLine, SimpleCommand, is_runner, parse_command
from .shell.runners import UNCHECKABLE
from .workspaces import conversation_workspace, path_subject

_DECISION_RANK = {"deny": 0, "ask": 1, "allow": 2}
_WILDCARD = re.compile(r"\*|\?|\[[^\]]*\]")
# A glob character written as a one-character set matches exactly that character.
_ESCAPED = re.compile(r"\[([*?[])\]")
_LITERAL_GLOB = re.compile(r"(?:\[[*?[]\]|[^*?[])*")
# A suggestion longer than a rule's pattern column could not be saved; none is offered then.
_PATTERN_MAX_CHARS = PermissionRule._meta.get_field("pattern").max_length
# The line the port checks when a command runs nothing at all (``X=1``, a comment).
_NOTHING = SimpleCommand(())


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


def rule_subject(spec: ToolSpec, arguments: Any, workspace: Path | None) -> str:
    """What a rule's pattern is matched against: the call's subject (``ToolSpec.subject_of``,
    a path tool without ``path`` working on ``.``) with a path resolved against ``workspace``;
    ``""`` when the call has none.

    ``PathRefused`` (``tools/workspaces.py``) when a path cannot be resolved (a symlink loop, a
    component that vanished) or the workspace is refused: the caller refuses that call."""
    subject = spec.subject_of(arguments, no_path=".")
    if subject is None:
        return ""
    if spec.subject_is_command(arguments) or workspace is None:
        return subject
    return path_subject(workspace, subject)  # PathRefused when it cannot be resolved


def command_of(tool: ToolSpec | str, arguments: Any) -> str | None:
    """The command line a call's rules read (``bash``'s, a host tool's string ``command``);
    None when its subject is no command."""
    spec = tool if isinstance(tool, ToolSpec) else tool_spec(tool)
    return spec.subject_of(arguments) if spec.subject_is_command(arguments) else None


def path_rule_matches(rule: PermissionRule, path: str) -> bool:
    """Whether ``rule`` applies to the resolved ``path`` of a path tool."""
    return rule.pattern == "" or fnmatch.fnmatchcase(path, rule.pattern)


def command_rule_matches(
    rule: PermissionRule, command: SimpleCommand, *, line: str, parsed: CommandLine
) -> bool:
    """Whether ``rule`` applies to one simple ``command`` of the command ``line``.

    A deny rule is tried on every spelling of the command (``/bin/rm`` as ``rm`` too); where
    the command's text runs into an unknown part (``rm -rf $X``, the arguments ``xargs``
    reads), it matches when some text there could complete a match. An allow or ask rule
    matches the text as written; over an unknown part only when its pattern accepts any text
    there (``git *`` for ``git commit -m "$MSG"``). A rule whose pattern reads exactly as the
    whole line matches each of its commands; otherwise an allow or ask rule never covers a line
    that writes to a file through a redirection (the line is then the default's to decide).
    """
    pattern = rule.pattern
    if pattern == "":
        return True
    if command.words and command.words[0].dynamic:
        return False  # no program to match: the line is not plain, and judged as such
    if rule.decision == "deny":
        if command.open:
            return any(_could_match(pattern, text) for text in command.spellings)
        return any(fnmatch.fnmatchcase(text, pattern) for text in command.spellings)
    if glob_literal(pattern) == line:
        return True
    if parsed.writes is not None:
        return False
    if command.open:
        return _accepts_any_completion(pattern, command.text)
    return fnmatch.fnmatchcase(command.text, pattern)


@lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> Any:
    return regex.compile(fnmatch.translate(pattern))


def _could_match(pattern: str, prefix: str) -> bool:
    """Whether some text starting with ``prefix`` matches the glob ``pattern``."""
    return _glob_regex(pattern).fullmatch(prefix, partial=True) is not None


def _accepts_any_completion(pattern: str, prefix: str) -> bool:
    """Whether every text starting with ``prefix`` matches ``pattern``: the pattern ends in
    ``*`` and what comes before that star matches a start of ``prefix``."""
    if not pattern.endswith("*") or pattern.endswith("[*]"):
        return False
    stem = pattern[:-1]
    return any(fnmatch.fnmatchcase(prefix[:end], stem) for end in range(len(prefix) + 1))


def evaluate(
    conversation: Any, tool: ToolSpec | str, arguments: Any, *, workspace: Path | None = None
) -> Decision:
    """``evaluate(conversation, tool, arguments) -> (decision, reason, rule)``.

    ``conversation`` is a ``Conversation`` (its workspace resolves path rules unless
    ``workspace`` is given) or its id; ``tool`` a catalog entry or a tool name. A matching
    global deny wins; then conversation rules before global ones, most specific pattern first,
    deny > ask > allow at equal specificity; else the tool's default decision. A command is
    decided per simple command (``_command_decision``).
    """
    spec = tool if isinstance(tool, ToolSpec) else tool_spec(tool)
    conversation_id = getattr(conversation, "pk", conversation)
    if workspace is None and hasattr(conversation, "owner_id"):
        workspace = conversation_workspace(conversation)
    subject = rule_subject(spec, arguments, workspace)
    rules = list(
        PermissionRule.objects.filter(
            Q(conversation_id=conversation_id) | Q(conversation__isnull=True), tool_name=spec.name
        )
    )
    if spec.subject_is_command(arguments):
        return _command_decision(spec, subject, rules)
    who = _who(spec, subject, command=False)
    best = _precedence([rule for rule in rules if path_rule_matches(rule, subject)])
    if best is None:
        return _default(spec, who)
    return _by_rule(best, who)


def _precedence(matching: Sequence[PermissionRule]) -> PermissionRule | None:
    """The rule that decides among ``matching``: a global deny first; then conversation rules
    before global ones, the most specific pattern first, deny > ask > allow at a tie."""
    for rule in matching:
        if rule.conversation_id is None and rule.decision == "deny":
            return rule
    if not matching:
        return None
    return min(
        matching,
        key=lambda r: (
            0 if r.conversation_id is not None else 1,
            -specificity(r.pattern),
            _DECISION_RANK[r.decision],
            r.pk,
        ),
    )


def _command_decision(spec: ToolSpec, line: str, rules: list[PermissionRule]) -> Decision:
    """The decision for a command: each simple command is decided by the rules that match it
    (or the tool's default); a deny of any one denies the line; a line that is not plain is
    denied when any deny rule applies and never allowed by a rule; else the strictest."""
    parsed = parse_command(line)
    who = _who(spec, line, command=True)
    decided = [
        _precedence([r for r in rules if command_rule_matches(r, c, line=line, parsed=parsed)])
        for c in parsed.commands or (_NOTHING,)
    ]
    denied = [rule for rule in decided if rule is not None and rule.decision == "deny"]
    if denied:
        return _by_rule(_precedence(denied), who)
    if not parsed.plain:
        deny_rules = [rule for rule in rules if rule.decision == "deny"]
        if deny_rules:
            reason = f"Cannot be checked against the deny rules: {parsed.unplain}."
            return Decision("deny", reason, _precedence(deny_rules))
        if not rules and spec.default_decision == "allow":
            return _default(spec, who)  # a host tool without rules: the host's policy decides
        decision = "deny" if spec.default_decision == "deny" else "ask"
        reason = f"No rule can allow {who}: it is not a plain command ({parsed.unplain})."
        return Decision(decision, reason, None)
    ranked = [(rule.decision if rule else spec.default_decision, rule) for rule in decided]
    # At a tie the default speaks: rules decide a line only where they match all of it.
    decision, rule = min(ranked, key=lambda d: (_DECISION_RANK[d[0]], d[1] is not None))
    if rule is not None:
        return _by_rule(rule, who)
    if (
        parsed.writes is not None
        and decision == "ask"
        and any(r.decision == "allow" for r in rules)
    ):
        reason = (
            f"No permission rule allows {who}: it writes to a file ({parsed.writes}), which a "
            "rule allows only when it names the whole command."
        )
        return Decision(decision, reason, None)
    return _default(spec, who)


# --- reasons ------------------------------------------------------------------------------
# An approval's reason says why it is asked: which tool, which command or path, and that no
# rule allows it, or which ``ask`` rule matched. Deny and allow reasons keep their short forms
# (the model's terminal text quotes "Denied by permission policy.").

# How much of a command or path a reason quotes (UTF-8 bytes, "…" included).
SUBJECT_QUOTE_BYTES = 200
DENIED_REASON = "Denied by permission policy."


def _who(spec: ToolSpec, subject: str, *, command: bool) -> str:
    """The tool and what it was asked to do, as a reason names it: ``bash to run “make”``,
    ``read on “/w/a.txt”``, or the tool's name alone: the first line of the subject, cut, in
    typographic quotes (a shell command has straight quotes and backquotes of its own)."""
    first, _, more = subject.strip().partition("\n")
    if not first:
        return spec.name
    shown = cut_text(first.rstrip("\r"), SUBJECT_QUOTE_BYTES) + (" …" if more.strip() else "")
    return f"{spec.name} to run “{shown}”" if command else f"{spec.name} on “{shown}”"


def denial_text(decision: Decision) -> str:
    """A denial as an error message says it: the reason, and the rule that denied, by name
    (``Denied by the global rule “deny bash rm *”: No deleting.``)."""
    if decision.rule is None:
        return decision.reason
    return cut_text(f"Denied by {_rule_shown(decision.rule)}: {decision.reason}")


def _rule_shown(rule: PermissionRule) -> str:
    """``the global rule “ask bash git push*”``, ``this conversation's rule “ask read”``."""
    scope = "the global rule" if rule.conversation_id is None else "this conversation's rule"
    named = " ".join(part for part in (rule.decision, rule.tool_name, rule.pattern) if part)
    return f"{scope} “{named}”"


def _by_rule(rule: PermissionRule, who: str) -> Decision:
    """The decision a matching ``rule`` makes, with its reason: the rule's own reason for a
    deny or an allow when it has one; for an ask, which rule asks before what."""
    if rule.decision == "ask":
        shown = _rule_shown(rule)
        reason = f"{shown[0].upper()}{shown[1:]} asks before it allows {who}."
        if rule.reason:
            reason = f"{reason} Its reason: {rule.reason}"
        return Decision("ask", cut_text(reason), rule)
    if rule.reason:
        return Decision(rule.decision, cut_text(rule.reason), rule)
    default = DENIED_REASON if rule.decision == "deny" else "Allowed by a permission rule."
    return Decision(rule.decision, default, rule)


def _default(spec: ToolSpec, who: str) -> Decision:
    """The tool's default decision, when no rule decides."""
    reason = {
        "deny": DENIED_REASON,
        "ask": f"No permission rule allows {who}.",
        "allow": "Allowed by default.",
    }[spec.default_decision]
    return Decision(spec.default_decision, cut_text(reason), None)


def suggested_rules(spec: ToolSpec, arguments: Any, workspace: Path | None) -> list[dict[str, str]]:
    """Rules an approver may save with ``persist: true``: first the exact subject, its glob
    characters escaped so that it matches only that text, then, for a plain command that is
    one program with its arguments (never a runner: ``env *`` would allow every command), a
    prefix glob as its own entry.

    No rules at all when the exact subject is too long for a rule's pattern (a wider rule is
    never saved in its place), or for a command that is not plain (no rule can allow it).
    """
    subject = rule_subject(spec, arguments, workspace)
    exact = escape_glob(subject)
    if len(exact) > _PATTERN_MAX_CHARS:
        return []
    rules = [{"toolName": spec.name, "pattern": exact, "decision": "allow"}]
    if not spec.subject_is_command(arguments):
        return rules
    parsed = parse_command(subject)
    if not parsed.plain:
        return []
    wider = _wider_pattern(parsed)
    if wider is not None and wider != exact:
        rules.append({"toolName": spec.name, "pattern": wider, "decision": "allow"})
    return rules


def _wider_pattern(parsed: CommandLine) -> str | None:
    """``PROGRAM *`` for a line that runs one program with arguments and writes no file."""
    if len(parsed.commands) != 1 or parsed.writes is not None:
        return None
    (command,) = parsed.commands
    program = command.program
    if len(command.words) < 2 or is_runner(program) or program in UNCHECKABLE:
        return None
    return f"{escape_glob(program)} *"
