"""The permission port: ``allow``, ``ask`` or ``deny`` for (conversation, tool, arguments).

Never executes anything and never writes (spec lifecycle.md "Supervision", tools.md).
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import Any, NamedTuple

from django.db.models import Q

from .catalog import ToolSpec, tool_spec
from .models import PermissionRule
from .workspaces import conversation_workspace

# A command with one of these matches only a wildcard-free pattern equal to it.
_SHELL_CONTROL = re.compile(r"[;&|`><\n]|\$\(")
_DECISION_RANK = {"deny": 0, "ask": 1, "allow": 2}
_WILDCARD = re.compile(r"\*|\?|\[[^\]]*\]")


class Decision(NamedTuple):
    """``(decision, reason, rule)``: the port's answer, unpackable as the spec writes it."""

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
    """Number of literal, non-wildcard characters of a glob; the empty pattern ranks below
    every other (-1), so ``""`` never ties with ``"*"``."""
    if pattern == "":
        return -1
    return len(_WILDCARD.sub("", pattern))


def has_wildcards(pattern: str) -> bool:
    return _WILDCARD.search(pattern) is not None


def rule_subject(spec: ToolSpec, arguments: Any, workspace: Path | None) -> str:
    """What a rule's pattern is matched against: the command, the resolved path, or ``""``."""
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
    return str((workspace / raw).resolve())


def rule_matches(rule: PermissionRule, subject: str, *, is_command: bool) -> bool:
    pattern = rule.pattern
    if is_command and _SHELL_CONTROL.search(subject):
        return not has_wildcards(pattern) and pattern == subject
    if pattern == "":
        return True
    return fnmatch.fnmatchcase(subject, pattern)


def evaluate(
    conversation: Any, tool: ToolSpec | str, arguments: Any, *, workspace: Path | None = None
) -> Decision:
    """``evaluate(conversation, tool, arguments) -> (decision, reason, rule)`` (tools.md).

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
            return Decision("deny", rule.reason or "Denied by permission policy.", rule)
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
        return Decision(best.decision, best.reason or _default_reason(best.decision), best)
    return Decision(
        spec.default_decision, _default_reason(spec.default_decision, default=True), None
    )


def _default_reason(decision: str, *, default: bool = False) -> str:
    if decision == "deny":
        return "Denied by permission policy."
    if decision == "ask":
        return "This tool needs approval." if default else "A permission rule asks for approval."
    return "Allowed by default." if default else "Allowed by a permission rule."


def suggested_rules(spec: ToolSpec, arguments: Any, workspace: Path | None) -> list[dict[str, str]]:
    """Rules an approver may save with ``persist: true``: the exact subject, then a prefix glob."""
    subject = rule_subject(spec, arguments, workspace)
    rules = [{"toolName": spec.name, "pattern": subject, "decision": "allow"}]
    if spec.subject == "command" and subject and not _SHELL_CONTROL.search(subject):
        first = subject.split()[0]
        if first != subject:
            rules.append({"toolName": spec.name, "pattern": f"{first} *", "decision": "allow"})
    return rules
