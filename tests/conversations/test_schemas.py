"""A resolution body knows the resolution it becomes (``to_resolution``): the REST route and the
socket's ``resolve`` frame hand the service the same dict for the same body."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter

from conversations.api.schemas.conversations import ApprovalIn, InputIn, ResolutionIn

RESOLUTION = TypeAdapter(ResolutionIn)


@pytest.mark.parametrize(
    ("body", "resolution"),
    [
        (
            {"requestId": "r1", "kind": "approval", "decision": "allow"},
            {"kind": "approval", "decision": "allow", "persist": False},
        ),
        (
            {"requestId": "r1", "kind": "approval", "decision": "deny", "rule": None},
            {"kind": "approval", "decision": "deny", "persist": False},
        ),
        (
            {
                "requestId": "r1",
                "kind": "approval",
                "decision": "allow",
                "persist": True,
                "rule": 0,
            },
            {"kind": "approval", "decision": "allow", "persist": True, "rule": 0},
        ),
        (
            {"requestId": "r1", "kind": "approval", "decision": "allow", "rule": "git *"},
            {"kind": "approval", "decision": "allow", "persist": False, "rule": "git *"},
        ),
        (
            {"requestId": "r1", "kind": "input", "value": {"answers": {"env": "dev"}}},
            {"kind": "input", "value": {"answers": {"env": "dev"}}},
        ),
    ],
)
def test_a_resolution_body_becomes_the_recorded_resolution(body, resolution):
    """Everything but ``requestId``; an approval's ``rule`` only when the client named one."""
    parsed = RESOLUTION.validate_python(body)
    assert isinstance(parsed, ApprovalIn | InputIn)
    assert parsed.to_resolution() == resolution
