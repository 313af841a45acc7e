"""Every answer under ``/api/`` is JSON, also the ones Django produces itself (404, 405, 413, 500).

A database that is away (a dropped or refused connection) is a 503 `unavailable` with
``Retry-After``, not a 500. Every 401 carries ``WWW-Authenticate: Bearer``, and every 4xx is logged here, once: one line with
method, path, status and code (``conversations.logging.ApiRefusalFilter`` keeps Django's own
"Not Found"/"Bad Request" lines for these paths out of the log).

Async-capable, so the async turn-barrier view runs without a thread hop.
"""

from __future__ import annotations

import json
import logging

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse

from projections.units import cut_text

from .errors import error_body
from .responses import json_response

logger = logging.getLogger(__name__)

API_PREFIX = "/api/"
# Errors of the database itself rather than of the request: answered 503, to be tried again.
DATABASE_AWAY = (OperationalError, InterfaceError)
UNAVAILABLE = "The database is unavailable: nothing was changed; try again shortly."
RETRY_AFTER_SECONDS = 1
_CODES = {
    400: ("bad_request", "Malformed request."),
    401: ("unauthorized", "Authentication required."),
    403: ("forbidden", "Not allowed."),
    404: ("not_found", "Not found."),
    405: ("method_not_allowed", "Method not allowed."),
    413: ("payload_too_large", "Request body too large."),
    500: ("internal_error", "Internal server error."),
}


def _too_large(request: HttpRequest) -> HttpResponse | None:
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return json_response(error_body("bad_request", "Invalid Content-Length."), 400)
    if length > settings.TOOLCORE_MAX_BODY:
        message = f"Request body over {settings.TOOLCORE_MAX_BODY} bytes."
        return json_response(error_body("payload_too_large", message), 413)
    return None


def _asjson_response(response: HttpResponse) -> HttpResponse:
    if response.status_code < 400 or response.get("Content-Type", "").startswith(
        "application/json"
    ):
        return response
    code, message = _CODES.get(response.status_code, ("error", "Request failed."))
    new = json_response(error_body(code, message), response.status_code)
    if response.has_header("Allow"):
        new["Allow"] = response["Allow"]
    return new


def _error_code(response: HttpResponse) -> str:
    try:
        return str(json.loads(response.content)["error"]["code"])
    except (AttributeError, KeyError, TypeError, ValueError):
        return "-"


def _finish(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """The answer as sent: JSON errors, the bearer challenge on 401, each refusal logged once."""
    response = _asjson_response(response)
    status = response.status_code
    if status == 401 and not response.has_header("WWW-Authenticate"):
        response["WWW-Authenticate"] = "Bearer"
    if 400 <= status < 500:
        logger.warning(
            "%s %s %s %s",
            request.method,
            cut_text(request.path),
            status,
            _error_code(response),
            extra={"status_code": status},
        )
        response._has_been_logged = True  # type: ignore[attr-defined]  # Django's own mark
    return response


class SyncAndAsyncMiddleware:
    """A middleware that runs the way the chain does, sync or async, with no thread hop (the
    turn barrier's async view stays async). Subclasses say what to answer at once
    (``before``: a response, or None to go on) and what to make of the answer (``after``)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def before(self, request: HttpRequest) -> HttpResponse | None:
        return None

    def after(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        return response

    def __call__(self, request: HttpRequest):
        if iscoroutinefunction(self.get_response):
            return self.__acall__(request)
        return self.after(request, self.before(request) or self.get_response(request))

    async def __acall__(self, request: HttpRequest):
        return self.after(request, self.before(request) or await self.get_response(request))


class ApiErrorMiddleware(SyncAndAsyncMiddleware):
    """Under ``/api/``: bodies over the limit refused before parsing, every error as JSON, the
    bearer challenge on 401, each refusal logged once, no 500 without a JSON body."""

    def before(self, request: HttpRequest) -> HttpResponse | None:
        return _too_large(request) if request.path.startswith(API_PREFIX) else None

    def after(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        return _finish(request, response) if request.path.startswith(API_PREFIX) else response

    def process_exception(self, request: HttpRequest, exception: Exception):
        if not request.path.startswith(API_PREFIX):
            return None
        if isinstance(exception, DATABASE_AWAY):
            # A connection dropped or refused, a lock not granted in time: nothing was written
            # (each service is one transaction), and the same request may succeed shortly.
            logger.error("database unavailable on %s: %s", request.path, exception)
            response = json_response(error_body("unavailable", UNAVAILABLE), 503)
            response["Retry-After"] = str(RETRY_AFTER_SECONDS)
            response._has_been_logged = True  # type: ignore[attr-defined]  # logged just above
            return response
        logger.exception("unhandled error on %s", request.path)
        response = json_response(error_body("internal_error", "Internal server error."), 500)
        response._has_been_logged = True  # type: ignore[attr-defined]  # logged just above
        return response
