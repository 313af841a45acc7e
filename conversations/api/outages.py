"""The database, the channel layer or the asset storage away: which errors say so, and what a client is told.

Such an error is not the request's fault and not a bug: the same request may succeed in a
moment. Every way a request can end (django-ninja's exception handlers, the middleware for other
views, an error raised outside any view, the thread that serves a request) answers it the same:
503 with the code ``unavailable`` and ``Retry-After``, in every mode (``DEBUG`` on or off); a
websocket gets an ``error`` frame with that code, or is closed with 1013 ("try again later") where
no frame can be sent (docs/subsystems/api.md, "Errors"; docs/reliability.md).

Nothing half-done stays behind: every service writes in one transaction, and a failure inside it
rolls the whole back.
"""

from __future__ import annotations

import logging

import psycopg
import redis.exceptions
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse

from .. import metrics
from ..errors import error_body
from ..storage import StorageUnavailable
from .responses import json_response

logger = logging.getLogger(__name__)

# Django wraps the driver's errors in its own classes; psycopg's own (and psycopg_pool's
# ``PoolTimeout``, an ``OperationalError``) are listed for code that reaches the driver directly.
DATABASE_AWAY: tuple[type[BaseException], ...] = (
    OperationalError,
    InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)
# What redis-py (under channels_redis) raises when Redis cannot be reached or does not answer.
CHANNEL_LAYER_AWAY: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
)
# The S3 asset store refusing or not answering (conversations/storage/s3.py): a read of an asset
# cannot be served now (a settlement does not raise it: it settles without its files).
STORAGE_AWAY: tuple[type[BaseException], ...] = (StorageUnavailable,)
OUTAGES = DATABASE_AWAY + CHANNEL_LAYER_AWAY + STORAGE_AWAY

RETRY_AFTER_SECONDS = 1
API_PREFIX = "/api/"
DATABASE_UNAVAILABLE = "The database is unavailable: nothing was changed; try again shortly."
LAYER_UNAVAILABLE = "The channel layer is unavailable; try again shortly."
STORAGE_UNAVAILABLE = "The asset storage is unavailable; try again shortly."
UNAVAILABLE_CODE = "unavailable"
# A websocket that cannot even be served its first frame is closed with this code (RFC 6455:
# "Try Again Later").
CLOSE_TRY_AGAIN_LATER = 1013


def is_outage(exc: BaseException | None) -> bool:
    return isinstance(exc, OUTAGES)


def outage_noted(exc: BaseException | None, where: str) -> bool:
    """Count ``exc`` in ``toolcore_outages_total`` (kind ``database``, ``channel_layer`` or
    ``asset_storage``, caught ``where``: ``http``, ``websocket``, ``worker``, ``mcp``) when it
    is an outage; whether it was."""
    if not is_outage(exc):
        return False
    kind = (
        "channel_layer"
        if isinstance(exc, CHANNEL_LAYER_AWAY)
        else "asset_storage"
        if isinstance(exc, STORAGE_AWAY)
        else "database"
    )
    metrics.outage_counted(kind, where)
    return True


def unavailable_message(exc: BaseException) -> str:
    if isinstance(exc, STORAGE_AWAY):
        return STORAGE_UNAVAILABLE
    return LAYER_UNAVAILABLE if isinstance(exc, CHANNEL_LAYER_AWAY) else DATABASE_UNAVAILABLE


def unavailable_response(request: HttpRequest | None, exc: BaseException) -> HttpResponse:
    """503 with ``Retry-After``: the JSON error body under ``/api/``, plain text elsewhere (the
    pages, the admin). Logged here, once, without a traceback: the cause is outside the code."""
    path = getattr(request, "path", "") or ""
    logger.error("%s on %s: %s", "unavailable", path or "-", exc)
    outage_noted(exc, "http")
    message = unavailable_message(exc)
    if path.startswith(API_PREFIX) or request is None:
        response = json_response(error_body(UNAVAILABLE_CODE, message), 503)
    else:
        response = HttpResponse(message, status=503, content_type="text/plain; charset=utf-8")
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    response._has_been_logged = True  # type: ignore[attr-defined]  # Django's own mark
    return response


def unavailable_frame(exc: BaseException, **extra: object) -> dict[str, object]:
    """The websocket ``error`` frame of an outage: the client may send its frame again."""
    outage_noted(exc, "websocket")
    frame: dict[str, object] = {
        "type": "error",
        "code": UNAVAILABLE_CODE,
        "message": unavailable_message(exc),
    }
    frame.update({k: v for k, v in extra.items() if v is not None})
    return frame
