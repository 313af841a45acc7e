"""Structured log formatters: one JSON object per line in production, readable lines in development.

Both carry the context keys of docs/subsystems/settings.md ("Logs") when a log call passes them in ``extra``.
"""

from __future__ import annotations

import json
import logging

CONTEXT_KEYS = ("conversation_id", "tool_call_id", "sequence", "claim_token", "worker")
# The fields of an access line (``config/access_log.py``), kept as JSON strings and numbers; a
# readable line has them all in its message already.
ACCESS_KEYS = ("client", "method", "path", "status", "bytes", "duration_ms")


def _context(record: logging.LogRecord) -> dict[str, object]:
    return {key: getattr(record, key) for key in CONTEXT_KEYS if hasattr(record, key)}


def _access(record: logging.LogRecord) -> dict[str, object]:
    return {key: getattr(record, key) for key in ACCESS_KEYS if hasattr(record, key)}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, object] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **{k: str(v) for k, v in _context(record).items()},
            **_access(record),
        }
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)


class PlainFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        context = _context(record)
        if context:
            text += " " + " ".join(f"{k}={v}" for k, v in context.items())
        return text


class ApiRefusalFilter(logging.Filter):
    """Drops Django's own record of a 4xx answer under ``/api/`` ("Not Found: …"): the API logs
    each refusal once, with its error code (``conversations.api.middleware``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        path = getattr(getattr(record, "request", None), "path", "")
        return not (
            isinstance(status, int) and 400 <= status < 500 and str(path).startswith("/api/")
        )
