"""Domain errors, mapped once to HTTP (conversations/api/base.py) and websocket error frames."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from projections.units import cut_text


class DomainError(Exception):
    """A refusal the client can act on. ``code`` and ``status`` are the API contract.

    Messages and fields often quote user input (ids, values, keys): both are cut to 1 KiB on a
    code point, so no error answer, frame or log line grows with what a client sent.
    """

    status: int = 409
    code: str = "conflict"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        message = cut_text(message)
        super().__init__(message)
        self.message = message
        self.field = None if field is None else cut_text(field)

    def body(self) -> dict[str, Any]:
        """``{"error": {"code", "message", "field"?}}``: exactly the keys of the error body."""
        return error_body(self.code, self.message, self.field)

    def headers(self) -> dict[str, str]:
        """Headers the answer carries besides the body (none by default)."""
        return {}


class NotFound(DomainError):
    status, code = 404, "not_found"


class ValidationFailed(DomainError):
    status, code = 422, "validation_error"


class Forbidden(DomainError):
    status, code = 403, "forbidden"


class CsrfFailed(DomainError):
    """A session request whose CSRF token is missing or wrong (a bearer token needs none)."""

    status, code = 403, "csrf_failed"


class Throttled(DomainError):
    """Too many failed credential checks from the client's address, or too much command
    reading by one user: refused for ``retry_after`` seconds (``Retry-After``)."""

    status, code = 429, "throttled"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class PayloadTooLarge(DomainError):
    """A body or a record over its byte budget."""

    status, code = 413, "payload_too_large"


class MessageConflict(DomainError):
    code = "message_conflict"


class CommandConflict(DomainError):
    code = "command_conflict"


class TurnOpen(DomainError):
    code = "turn_open"


class TurnNotOpen(DomainError):
    code = "turn_not_open"


class InvalidTransition(DomainError):
    code = "invalid_transition"


class NotAwaiting(DomainError):
    code = "not_awaiting"


class ResolutionConflict(DomainError):
    code = "resolution_conflict"

    def __init__(self, message: str, *, recorded_request: str | None, recorded: Any) -> None:
        super().__init__(message)
        self.recorded_request = recorded_request  # named in the message too
        self.recorded = recorded


class StaleClaim(DomainError):
    code = "stale_claim"


class CursorAhead(DomainError):
    code = "cursor_ahead"


class AssetCorrupt(DomainError):
    code = "asset_corrupt"


def error_body(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    """``{"error": {"code", "message", "field"?}}``, message and field cut to 1 KiB each."""
    error: dict[str, Any] = {"code": code, "message": cut_text(message)}
    if field is not None:
        error["field"] = cut_text(field)
    return {"error": error}


def found(rows: Any, pk: Any, what: str) -> Any:
    """The row of the queryset ``rows`` whose primary key is ``pk`` (a UUID, as text or not);
    ``NotFound`` ("<what> not found.") when there is none or ``pk`` is no UUID. Narrow ``rows``
    to the asker's own: another owner's row then answers exactly as a missing one."""
    try:
        key = UUID(str(pk))
    except ValueError as exc:
        raise NotFound(f"{what} not found.") from exc
    hit = list(rows.filter(pk=key).order_by()[:1])  # no ORDER BY: ``first()`` would add one
    if not hit:
        raise NotFound(f"{what} not found.")
    return hit[0]


class HostUnavailable(DomainError):
    """What was asked is on the disk of a worker host none of whose workers answers (pinned
    workspaces, docs/deployment.md): the outage answer, 503 ``unavailable``."""

    status, code = 503, "unavailable"

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "5"}
