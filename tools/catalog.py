"""The tool catalog: every tool the server knows, declared once.

The core tools are declared here (``CORE_TOOLS``). The tools of the MCP servers Toolcore is a
client of join the catalog as ``mcp__<server>__<tool>`` through a provider the runtime registers
at start (``tool_provider_register``; this layer imports neither models nor the runtime).

A tool name in neither is a host tool: executed by an external host through the host tool port,
risk ``execute``, default decision ``allow``, profile ``conservative_fallback``
(``delegated_reports`` for host tools declared as sub-agents).

Argument errors name the field and say what is wrong without quoting the offending value, and
stay within ``REASON_MAX_BYTES``: they end up in ``supervision.reason`` and the model's text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import regex
from jsonschema import Draft202012Validator, ValidationError
from jsonschema.validators import validator_for

from projections.units import cut_text

# How much of an unexpected argument's name an error message quotes.
_NAME_QUOTE_BYTES = 64


class ArgumentsInvalid(ValueError):
    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


@dataclass(frozen=True)
class ToolSpec:
    name: str
    schema: dict[str, Any]
    risk: str
    default_decision: str
    profile: str
    # tool.updated kind (docs/projections.md): read, edit, search, execute, think, other …
    kind: str = "other"
    suspending: bool = False
    core: bool = True
    # A host tool: run by an external host, its subject read from its arguments (``subject_of``).
    host: bool = False
    # What a permission rule's pattern matches: "command", "path", or none (``subject_of``).
    subject: str | None = None
    # Checks the JSON schema cannot express, run once it passes; each raises ArgumentsInvalid.
    checks: tuple[Callable[[dict[str, Any]], None], ...] = ()
    # What the tool says it does (an MCP server's description; empty for the core tools).
    description: str = ""
    # Offered only to this owner's conversations (an MCP server registered for one owner).
    offered_to: int | None = None
    # Why no call of it can run now (an MCP server disabled, a tool it does not list): the
    # call settles failed in supervision with this reason.
    refusal: str | None = None

    @property
    def replay_safe(self) -> bool:
        """Only read-only, non-suspending tools are ever run twice (derived, never set)."""
        return self.risk == "read" and not self.suspending

    @property
    def is_path_tool(self) -> bool:
        return self.subject == "path"

    def refused_for(self, owner_id: Any) -> str | None:
        """Why a call of this tool in a conversation of ``owner_id`` cannot run, or None."""
        if self.refusal is not None:
            return self.refusal
        if self.offered_to is not None and self.offered_to != owner_id:
            parts = mcp_tool_parts(self.name)
            what = f"MCP server “{parts[0]}”" if parts else f"The tool {self.name}"
            return f"{what} serves only its owner's conversations, not this one's."
        return None

    def subject_is_command(self, arguments: Any) -> bool:
        """Whether the call's subject is a shell command: ``bash``, or a host tool whose
        arguments hold a string ``command``."""
        return self.subject == "command" or (
            self.host and isinstance(arguments, dict) and isinstance(arguments.get("command"), str)
        )

    def subject_of(self, arguments: Any, *, no_path: str | None = None) -> str | None:
        """The command or path a call works on, as its arguments write it; None when there is
        none (not a string, or a tool without a subject).

        The ``command`` of ``bash`` and of a host tool that passes a string ``command``; the
        ``path`` of a path tool; a host tool's ``path``, else its ``file_path``. ``no_path`` is
        what a path tool called without ``path`` works on: the permission port passes ``"."``
        (the workspace root) and resolves the subject against the workspace
        (``tools/permissions.py`` ``rule_subject``); the model's text names no resource then.
        """
        if not isinstance(arguments, dict):
            return None
        if self.subject_is_command(arguments):
            value = arguments.get("command")
        elif self.is_path_tool or self.host:
            value = arguments.get("path")
            if value is None and self.host:
                value = arguments.get("file_path")
            if value is None and self.is_path_tool:
                value = no_path
        else:
            return None
        return value if isinstance(value, str) else None


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _regex(name: str) -> Callable[[dict[str, Any]], None]:
    """A check that the argument ``name``, when given, compiles as a Python regex, and with the
    ``regex`` library in its ``re``-compatible mode, which is what ``grep`` runs."""

    def check(arguments: dict[str, Any]) -> None:
        if name not in arguments:
            return
        try:
            re.compile(arguments[name])
            regex.compile(arguments[name], regex.VERSION0)
        except (re.error, regex.error, RecursionError, OverflowError, ValueError) as exc:
            detail = getattr(exc, "msg", None) or type(exc).__name__
            where = f" at position {exc.pos}" if getattr(exc, "pos", None) is not None else ""
            message = (
                f"Invalid argument '{name}': not a valid regular expression ({detail}{where})."
            )
            raise ArgumentsInvalid(cut_text(message), name) from None

    return check


_STRING = {"type": "string"}
_PATH = {"type": "string", "minLength": 1, "maxLength": 4096}
_QUESTION = _object(
    {
        "id": {"type": "string", "minLength": 1, "maxLength": 128},
        "question": {"type": "string", "minLength": 1, "maxLength": 4000},
        "options": {"type": "array", "items": _STRING, "maxItems": 32},
        "multiple": {"type": "boolean"},
    },
    ["id", "question"],
)

CORE_TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in [
        ToolSpec(
            name="bash",
            schema=_object(
                {
                    "command": {"type": "string", "minLength": 1},
                    "timeout": {"type": "integer", "minimum": 1, "maximum": 86400},
                    "run_in_background": {"type": "boolean"},
                },
                ["command"],
            ),
            risk="execute",
            default_decision="ask",
            profile="process_diagnostics",
            kind="execute",
            subject="command",
        ),
        ToolSpec(
            name="read",
            schema=_object(
                {
                    "path": _PATH,
                    "offset": {"type": "integer", "minimum": 1},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 2000},
                },
                ["path"],
            ),
            risk="read",
            default_decision="allow",
            profile="source_text",
            kind="read",
            subject="path",
        ),
        ToolSpec(
            name="grep",
            schema=_object(
                {
                    "pattern": {"type": "string", "minLength": 1},
                    "path": _PATH,
                    "glob": _STRING,
                    "ignore_case": {"type": "boolean"},
                },
                ["pattern"],
            ),
            risk="read",
            default_decision="allow",
            profile="search_matches",
            kind="search",
            subject="path",
            checks=(_regex("pattern"),),
        ),
        ToolSpec(
            name="find",
            schema=_object(
                {"pattern": {"type": "string", "minLength": 1}, "path": _PATH}, ["pattern"]
            ),
            risk="read",
            default_decision="allow",
            profile="file_listing",
            kind="search",
            subject="path",
        ),
        ToolSpec(
            name="ls",
            schema=_object({"path": _PATH}, []),
            risk="read",
            default_decision="allow",
            profile="file_listing",
            kind="read",
            subject="path",
        ),
        ToolSpec(
            name="async_bash_logs",
            schema=_object(
                {
                    "id": {"type": "string", "format": "uuid"},
                    "stream": {"enum": ["output", "stdout", "stderr"]},
                    "offset": {"type": "integer", "minimum": 0},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 500},
                },
                ["id"],
            ),
            risk="read",
            default_decision="allow",
            profile="process_diagnostics",
            kind="read",
        ),
        ToolSpec(
            name="async_bash_kill",
            schema=_object({"id": {"type": "string", "format": "uuid"}}, ["id"]),
            risk="execute",
            default_decision="allow",
            profile="mutation_acknowledgement",
            kind="execute",
        ),
        ToolSpec(
            name="ask_user",
            schema=_object(
                {"questions": {"type": "array", "items": _QUESTION, "minItems": 1, "maxItems": 8}},
                ["questions"],
            ),
            risk="read",
            default_decision="allow",
            profile="source_text",
            kind="think",
            suspending=True,
        ),
    ]
}


# The arguments ``ToolSpec.subject_of`` reads: a list that shows a call's subject reads only
# these in the database, not the call's whole arguments.
SUBJECT_ARGUMENTS = ("command", "path", "file_path")

# Host tools: the host applies its own policy, so the server's default is allow. Their risk is
# unknown to the server, so they count as "execute": never replayed, and approving one needs
# run_commands like approving bash.
_HOST_SCHEMA: dict[str, Any] = {"type": "object"}


# MCP tools are named as Claude Code's events name them: ``mcp__<server>__<tool>``. A server's
# name never holds ``__`` and neither starts nor ends with ``_``, so the first ``__`` after the
# server's name ends it; the tool's name is the rest. This pattern is the one place the naming
# is read: ``mcp_tool_parts`` here, and the pages' script through their configuration.
MCP_PREFIX = "mcp__"
MCP_SERVER_NAME = r"[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*"
MCP_TOOL_NAME = re.compile(rf"^mcp__({MCP_SERVER_NAME})__(.+)$", re.S)


def mcp_tool_parts(name: str) -> tuple[str, str] | None:
    """``(server, tool)`` of an ``mcp__<server>__<tool>`` name; None for any other name."""
    match = MCP_TOOL_NAME.match(name) if name.startswith(MCP_PREFIX) else None
    return None if match is None else (match.group(1), match.group(2))


def mcp_tool_name(server: str, tool: str) -> str:
    """The catalog name of the MCP server ``server``'s tool ``tool``."""
    return f"{MCP_PREFIX}{server}__{tool}"


@dataclass(frozen=True)
class ToolProvider:
    """Tools declared outside this module, registered by the runtime at start
    (``tools/apps.py``): ``spec(name)`` answers the entry of a name under ``prefix`` (None: not
    one of its tools, so a host tool), ``listing()`` the entries it publishes."""

    prefix: str
    spec: Callable[[str], ToolSpec | None]
    listing: Callable[[], Iterable[ToolSpec]]


_PROVIDERS: dict[str, ToolProvider] = {}


def tool_provider_register(provider: ToolProvider) -> None:
    """Consult ``provider`` for the names under its prefix (the last one registered wins)."""
    _PROVIDERS[provider.prefix] = provider


def catalog_tools() -> list[ToolSpec]:
    """Every tool the catalog publishes: the core tools, then the providers' (the tools of the
    enabled MCP servers)."""
    specs = list(CORE_TOOLS.values())
    for provider in _PROVIDERS.values():
        specs.extend(provider.listing())
    return specs


def tool_spec(name: str, *, delegated: bool = False) -> ToolSpec:
    """The catalog entry of ``name``: a core tool, a provider's (an MCP server's tool), else a
    host tool."""
    spec = CORE_TOOLS.get(name)
    if spec is not None:
        return spec
    for prefix, provider in _PROVIDERS.items():
        if name.startswith(prefix):
            spec = provider.spec(name)
            if spec is not None:
                return spec
    return ToolSpec(
        name=name,
        schema=_HOST_SCHEMA,
        risk="execute",
        default_decision="allow",
        profile="delegated_reports" if delegated else "conservative_fallback",
        kind="other",
        core=False,
        host=True,
        subject=None,
    )


_VALIDATORS: dict[str, Draft202012Validator] = {}


def validate_arguments(spec: ToolSpec, arguments: Any) -> None:
    """Raise ``ArgumentsInvalid`` naming the first offending field when the schema or a check of
    the tool refuses; its message is at most ``REASON_MAX_BYTES`` and never quotes a value."""
    validator = _VALIDATORS.get(spec.name)
    if validator is None or not spec.core:
        # Formats are asserted (a run's id is a UUID), not only annotations. An MCP server's
        # schema may name its own draft (``$schema``); 2020-12 otherwise.
        cls = validator_for(spec.schema, default=Draft202012Validator)
        validator = cls(spec.schema, format_checker=cls.FORMAT_CHECKER)
        if spec.core:
            _VALIDATORS[spec.name] = validator
    errors = sorted(validator.iter_errors(arguments), key=lambda e: (list(e.path), e.message))
    if not errors:
        for check in spec.checks:
            check(arguments)
        return
    error = errors[0]
    path = [str(p) for p in error.absolute_path]
    if error.validator == "required":
        missing = next((n for n in error.validator_value if n not in error.instance), "")
        path.append(missing)
        message = f"Missing required argument '{missing}'."
    elif error.validator == "additionalProperties":
        message = f"Invalid arguments: {_unexpected(error)}."
    else:
        where = f"argument '{'.'.join(path)}'" if path else "arguments"
        message = f"Invalid {where}: {_problem(error)}."
    field = ".".join(path) or "arguments"
    raise ArgumentsInvalid(cut_text(message), cut_text(field))


def _unexpected(error: ValidationError) -> str:
    """The unexpected names of an object, each quoted short, at most three of them."""
    known = set(error.schema.get("properties", {}))
    names = sorted(n for n in error.instance if n not in known)
    quoted = ", ".join(f"'{cut_text(n, _NAME_QUOTE_BYTES)}'" for n in names[:3])
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return f"unexpected {'argument' if len(names) == 1 else 'arguments'} {quoted}{more}"


_EXPECTED = {
    "type": "must be of type {}",
    "minLength": "must be at least {} character(s) long",
    "maxLength": "must be at most {} characters long",
    "minimum": "must be at least {}",
    "maximum": "must be at most {}",
    "minItems": "must have at least {} item(s)",
    "maxItems": "must have at most {} items",
    "format": "must be a valid {}",
}


def _problem(error: ValidationError) -> str:
    """What is wrong with a value, told from the schema (the value itself can be huge)."""
    expected = error.validator_value
    if error.validator == "type" and isinstance(expected, list):
        expected = " or ".join(expected)
    if error.validator in ("minLength", "minItems") and expected == 1:
        return "must not be empty"
    template = _EXPECTED.get(str(error.validator))
    if template is not None:
        return template.format(expected)
    if error.validator == "enum":
        return "must be one of " + ", ".join(f"'{option}'" for option in expected)
    return f"fails the '{error.validator}' check"
