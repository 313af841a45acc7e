"""The tool catalog: every tool the server knows, declared once (spec tools.md, "Catalog").

A tool name not in the catalog is a host tool: executed by an external host through the host
tool port, default decision ``allow``, profile ``conservative_fallback`` (``delegated_reports``
for host tools declared as sub-agents).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator

RISKS = ("read", "write", "execute")


@dataclass(frozen=True)
class ToolSpec:
    name: str
    schema: dict[str, Any]
    risk: str
    default_decision: str
    profile: str
    # tool.updated kind (projections.md): read, edit, search, execute, think, other …
    kind: str = "other"
    suspending: bool = False
    core: bool = True
    # The argument a permission rule's pattern matches: "command", a path, or none.
    subject: str | None = None
    traits: frozenset[str] = field(default_factory=frozenset)

    @property
    def replay_safe(self) -> bool:
        """Only read-only, non-suspending tools are ever run twice (derived, never set)."""
        return self.risk == "read" and not self.suspending

    @property
    def is_path_tool(self) -> bool:
        return self.subject == "path"


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


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
                    "id": {"type": "string", "format": "uuid", "minLength": 1},
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
            schema=_object({"id": {"type": "string", "minLength": 1}}, ["id"]),
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

# Host tools: the host applies its own policy, so the server's default is allow. Their risk is
# unknown to the server; "write" keeps them out of replay and does not demand run_commands.
_HOST_SCHEMA: dict[str, Any] = {"type": "object"}


def tool_spec(name: str, *, delegated: bool = False) -> ToolSpec:
    """The catalog entry of ``name``; a name not in the catalog is a host tool."""
    spec = CORE_TOOLS.get(name)
    if spec is not None:
        return spec
    return ToolSpec(
        name=name,
        schema=_HOST_SCHEMA,
        risk="write",
        default_decision="allow",
        profile="delegated_reports" if delegated else "conservative_fallback",
        kind="other",
        core=False,
        subject=None,
    )


class ArgumentsInvalid(ValueError):
    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


_VALIDATORS: dict[str, Draft202012Validator] = {}


def validate_arguments(spec: ToolSpec, arguments: Any) -> None:
    """Raise ``ArgumentsInvalid`` naming the first offending field when the schema refuses."""
    validator = _VALIDATORS.get(spec.name)
    if validator is None or not spec.core:
        validator = Draft202012Validator(spec.schema)
        if spec.core:
            _VALIDATORS[spec.name] = validator
    errors = sorted(validator.iter_errors(arguments), key=lambda e: (list(e.path), e.message))
    if not errors:
        return
    error = errors[0]
    path = [str(p) for p in error.absolute_path]
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else ""
        path.append(missing)
        message = f"Missing required argument '{missing}'."
    elif error.validator == "additionalProperties":
        message = f"Invalid arguments: {error.message}."
    else:
        where = ".".join(path) or "arguments"
        message = f"Invalid argument '{where}': {error.message}."
    field = ".".join(path) or "arguments"
    raise ArgumentsInvalid(message, field)
