"""The catalog: every tool declared once; arguments checked before any handler sees them."""

from __future__ import annotations

import pytest

from tools.catalog import CORE_TOOLS, ArgumentsInvalid, tool_spec, validate_arguments

RUN_ID = "6f6c6f63-6f72-4500-8000-746f6f6c6361"


def _refusal(tool: str, arguments) -> tuple[str, str]:
    with pytest.raises(ArgumentsInvalid) as refused:
        validate_arguments(tool_spec(tool), arguments)
    return refused.value.field, refused.value.message


def test_replay_safe_is_derived_read_and_not_suspending():
    assert {name for name, spec in CORE_TOOLS.items() if spec.replay_safe} == {
        "read",
        "grep",
        "find",
        "ls",
        "async_bash_logs",
    }
    host = tool_spec("notes_lookup")
    assert (host.core, host.risk, host.replay_safe, host.default_decision) == (
        False,
        "execute",
        False,
        "allow",
    )


@pytest.mark.parametrize("tool", ["async_bash_logs", "async_bash_kill"])
def test_a_run_id_must_be_a_uuid(tool):
    validate_arguments(tool_spec(tool), {"id": RUN_ID})
    assert _refusal(tool, {"id": "../etc"}) == (
        "id",
        "Invalid argument 'id': must be a valid uuid.",
    )


@pytest.mark.parametrize("pattern", ["(", "a{2,1}", "[z-a]"])
def test_a_grep_pattern_must_compile(pattern):
    field, message = _refusal("grep", {"pattern": pattern})
    assert field == "pattern" and len(message.encode()) <= 1024


@pytest.mark.parametrize(
    ("tool", "arguments", "field"),
    [
        ("read", {"path": "a", "limit": 2001}, "limit"),
        ("read", {"path": "a", "limit": 0}, "limit"),
        ("read", {}, "path"),
        ("bash", {"command": "ls", "timeout": 86401}, "timeout"),
        ("ask_user", {"questions": []}, "questions"),
        ("ls", {"path": "a", "extra": 1}, "arguments"),
    ],
)
def test_refusals_name_the_field(tool, arguments, field):
    assert _refusal(tool, arguments)[0] == field
