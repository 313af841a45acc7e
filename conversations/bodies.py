"""What a client's JSON may hold, for REST bodies and websocket frames alike: ``strict_loads``
reads it within the body's limits, and ``field_of`` names the field a validation error is about
(the ``field`` of the error body or frame). The ninja API (``api/base.py``) and the sockets
(``realtime/``) both read with these, so a refusal reads the same on either.
"""

from __future__ import annotations

import json
import math
from typing import Any

from projections.units import clean_text

from .errors import ValidationFailed

# Arrays and objects nest at most this deep in a body (the body itself is level 1): far more
# than any tool's arguments need, and far below what recursive code (validation, encoding)
# survives.
MAX_JSON_DEPTH = 100


class _Refused(Exception):
    """A value the body may not hold; ``path`` is collected while unwinding (innermost first)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind
        self.path: list[str] = []


def _checked(value: Any, depth: int) -> Any:
    """``value`` with its strings cleaned (lone surrogates and U+0000 become U+FFFD), refusing
    non-finite numbers and nesting beyond ``MAX_JSON_DEPTH``. One walk for the three."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Refused("number")
        return value
    if isinstance(value, dict):
        if depth > MAX_JSON_DEPTH:
            raise _Refused("depth")
        cleaned = {}
        for key, item in value.items():
            key = clean_text(key)
            try:
                cleaned[key] = _checked(item, depth + 1)
            except _Refused as exc:
                exc.path.append(key)
                raise
        return cleaned
    if isinstance(value, list):
        if depth > MAX_JSON_DEPTH:
            raise _Refused("depth")
        items = []
        for index, item in enumerate(value):
            try:
                items.append(_checked(item, depth + 1))
            except _Refused as exc:
                exc.path.append(str(index))
                raise
        return items
    return value


def _too_deep() -> ValidationFailed:
    return ValidationFailed(
        f"The JSON body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels.",
        field="body",
    )


def strict_loads(raw: str | bytes) -> Any:
    """``json.loads`` with the body's limits: lone surrogates and U+0000 become U+FFFD, every
    number is finite (``NaN``, ``Infinity`` and ``1e999`` cannot be stored: ``ValidationFailed``
    naming the field) and nesting is bounded (``ValidationFailed`` saying so, not "malformed").
    Text that is not JSON raises ``ValueError``. REST bodies and websocket frames alike."""
    try:
        # NaN and ±Infinity are read as floats so that they are refused like 1e999, with
        # the field that holds them.
        value = json.loads(raw, parse_constant=float)
    except RecursionError as exc:  # nested beyond what the parser itself follows
        raise _too_deep() from exc
    try:
        return _checked(value, 1)
    except _Refused as exc:
        if exc.kind == "depth":
            raise _too_deep() from None
        field = ".".join(reversed(exc.path)) or "body"
        raise ValidationFailed(
            f"{field}: numbers must be finite (NaN, Infinity and numbers beyond the range "
            "of a double are refused).",
            field=field,
        ) from None


# Union tags pydantic adds to the location of an error inside a discriminated union.
_UNION_TAGS = {"text", "tool_call", "image", "approval", "input"}


def field_of(error: dict[str, Any]) -> str:
    parts = [str(p) for p in error.get("loc", [])]
    if parts and parts[0] in ("body", "query", "path", "header", "cookie"):
        parts = parts[1:]
    if parts and parts[0] in ("payload", "query"):
        parts = parts[1:]
    # A tag stands first (a union body) or right after a list index (a union item).
    parts = [
        p
        for i, p in enumerate(parts)
        if not (p in _UNION_TAGS and (i == 0 or parts[i - 1].isdigit()))
    ]
    if error.get("type") in ("union_tag_not_found", "union_tag_invalid"):
        discriminator = str(error.get("ctx", {}).get("discriminator", "")).strip("'")
        parts.append(discriminator)
    return ".".join(p for p in parts if p) or "body"
