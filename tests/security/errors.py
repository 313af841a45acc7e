"""The JSON error body of the API docs (docs/subsystems/api.md, "Errors"), checked strictly."""

from __future__ import annotations

import json
from typing import Any

MESSAGE_MAX_BYTES = 1024


def error_of(status: int, content_type: str, content: bytes) -> dict[str, Any]:
    """The ``error`` object of an error answer: JSON, exactly ``{"error": {"code", "message",
    "field"?}}``, message and field strings of at most 1 KiB. Raises AssertionError else."""
    assert status >= 400, status
    assert content_type.split(";")[0].strip() == "application/json", (status, content_type)
    body = json.loads(content)
    assert isinstance(body, dict) and set(body) == {"error"}, body
    error = body["error"]
    assert isinstance(error, dict) and {"code", "message"} <= set(error), error
    assert set(error) <= {"code", "message", "field"}, error
    assert isinstance(error["code"], str) and error["code"], error
    assert isinstance(error["message"], str) and error["message"], error
    assert len(error["message"].encode("utf-8")) <= MESSAGE_MAX_BYTES, error
    if "field" in error:
        assert isinstance(error["field"], str) and error["field"], error
        assert len(error["field"].encode("utf-8")) <= MESSAGE_MAX_BYTES, error
    if status == 500:
        raise AssertionError(f"500 internal_error: {error}")
    return error
