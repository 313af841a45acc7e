"""Domain errors, mapped once to HTTP (conversations/api_base.py) and websocket error frames."""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """A refusal the client can act on. ``code`` and ``status`` are the API contract."""

    status: int = 409
    code: str = "conflict"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def body(self) -> dict[str, Any]:
        """``{"error": {"code", "message", "field"?}}``: exactly the keys of api.md."""
        return error_body(self.code, self.message, self.field)


class NotFound(DomainError):
    status, code = 404, "not_found"


class ValidationFailed(DomainError):
    status, code = 422, "validation_error"


class Forbidden(DomainError):
    status, code = 403, "forbidden"


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
    error: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        error["field"] = field
    return {"error": error}
