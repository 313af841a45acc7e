"""The catalog: every tool declared once; arguments checked before any handler sees them."""

from __future__ import annotations

import pytest

from tools.catalog import (
    CORE_TOOLS,
    SUBJECT_ARGUMENTS,
    ArgumentsInvalid,
    tool_spec,
    validate_arguments,
)

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


# --- A call's subject: one definition (``ToolSpec.subject_of``) --------------------------------

QUESTION = {"questions": [{"id": "q", "question": "Which?"}]}


@pytest.mark.parametrize(
    ("tool", "arguments", "subject"),
    [
        ("bash", {"command": "make test"}, "make test"),
        ("read", {"path": "src/app.py"}, "src/app.py"),
        ("grep", {"pattern": "TODO", "path": "src"}, "src"),
        ("grep", {"pattern": "TODO"}, None),
        ("find", {"pattern": "*.py", "path": "src"}, "src"),
        ("ls", {"path": "docs"}, "docs"),
        ("ls", {}, None),
        ("async_bash_logs", {"id": RUN_ID}, None),
        ("async_bash_kill", {"id": RUN_ID}, None),
        ("ask_user", QUESTION, None),
        # A host tool: a string command first, else its path, else its file_path.
        ("editor", {"command": "sed -i s/a/b/ x", "path": "x"}, "sed -i s/a/b/ x"),
        ("editor", {"path": "src/a.py", "file_path": "src/b.py"}, "src/a.py"),
        ("editor", {"file_path": "src/b.py"}, "src/b.py"),
        ("editor", {"command": ["not", "a", "string"], "file_path": "b"}, "b"),
        ("editor", {"text": "no subject"}, None),
        # Not a string, or no arguments object: no subject.
        ("bash", {"command": 5}, None),
        ("read", {"path": ["a"]}, None),
        ("editor", {"path": 5, "file_path": "b"}, None),
        ("bash", ["make"], None),
        ("read", None, None),
    ],
)
def test_subject_of_each_core_tool_and_a_host_tool(tool, arguments, subject):
    assert tool_spec(tool).subject_of(arguments) == subject


def test_a_path_tool_without_a_path_works_on_what_the_caller_names():
    """The permission port passes ``"."``, the workspace root; a host tool or a tool without a
    subject never gets it."""
    assert [tool_spec(t).subject_of({}, no_path=".") for t in ("grep", "find", "ls")] == ["."] * 3
    assert tool_spec("read").subject_of({"path": "a"}, no_path=".") == "a"
    assert tool_spec("editor").subject_of({}, no_path=".") is None
    assert tool_spec("ask_user").subject_of(QUESTION, no_path=".") is None


@pytest.mark.parametrize(
    ("tool", "arguments", "is_command"),
    [
        ("bash", {"command": "ls"}, True),
        ("bash", {}, True),  # bash's subject is a command even when it is missing
        ("editor", {"command": "ls"}, True),
        ("editor", {"command": 5, "path": "a"}, False),
        ("editor", {"path": "a"}, False),
        ("read", {"path": "a", "command": "ls"}, False),
    ],
)
def test_a_subject_is_a_command_for_bash_and_a_host_tool_with_a_string_command(
    tool, arguments, is_command
):
    assert tool_spec(tool).subject_is_command(arguments) is is_command


def test_subject_arguments_name_every_argument_subject_of_reads():
    """A list reads only ``SUBJECT_ARGUMENTS`` from the database: with just those, every tool's
    subject is the same as with its whole arguments."""
    whole = {"command": "c", "path": "p", "file_path": "f", "pattern": "x", "id": RUN_ID}
    only = {name: whole[name] for name in SUBJECT_ARGUMENTS}
    for spec in [*CORE_TOOLS.values(), tool_spec("editor")]:
        assert spec.subject_of(only) == spec.subject_of(whole), spec.name
        assert spec.subject_of({**only, "command": None}) == spec.subject_of(
            {**whole, "command": None}
        )
