"""Every answer under ``/api/`` is JSON, also the ones Django produces itself (404, 405, 413, 500).

A database or channel layer that is away (a dropped or refused connection, a lock not granted
in time) is a 503 `unavailable` with ``Retry-After``, not a 500, on every path and in every mode
(``conversations.api.outages``): raised by a view, or anywhere else in the request (another
middleware), which Django would answer 500 (with ``DEBUG`` on, its debug page). Every 401 carries ``WWW-Authenticate: Bearer``, and every 4xx is logged here, once: one line with
method, path, status and code (``conversations.logging.ApiRefusalFilter`` keeps Django's own
"Not Found"/"Bad Request" lines for these paths out of the log).

Async-capable, so the async turn-barrier view runs without a thread hop.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.core.signals import got_request_exception
from django.http import HttpRequest, HttpResponse

from projections.units import cut_text

from .. import metrics
from ..errors import error_body
from .outages import API_PREFIX, is_outage, unavailable_response
from .responses import json_response

logger = logging.getLogger(__name__)

# Where an outage raised outside a view is noted, for ``ApiErrorMiddleware.after``.
_OUTAGE_ATTRIBUTE = "_toolcore_outage"
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


def _note_outage(sender: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
    """Django is answering an exception raised outside any view with a 500: note an outage on
    the request, so that ``ApiErrorMiddleware.after`` answers 503 instead."""
    exc = sys.exc_info()[1]
    if request is not None and is_outage(exc):
        setattr(request, _OUTAGE_ATTRIBUTE, exc)


got_request_exception.connect(_note_outage, dispatch_uid="toolcore-note-outage")


class ApiErrorMiddleware(SyncAndAsyncMiddleware):
    """Under ``/api/``: bodies over the limit refused before parsing, every error as JSON, the
    bearer challenge on 401, each refusal logged once, no 500 without a JSON body. On every
    path: an outage is a 503 (``conversations.api.outages``), never a 500."""

    def before(self, request: HttpRequest) -> HttpResponse | None:
        return _too_large(request) if request.path.startswith(API_PREFIX) else None

    def after(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        outage = getattr(request, _OUTAGE_ATTRIBUTE, None)
        if outage is not None and response.status_code == 500:
            response = unavailable_response(request, outage)
        return _finish(request, response) if request.path.startswith(API_PREFIX) else response

    def process_exception(self, request: HttpRequest, exception: Exception):
        if is_outage(exception):
            # A connection dropped or refused, a lock not granted in time: nothing was written
            # (each service is one transaction), and the same request may succeed shortly.
            return unavailable_response(request, exception)
        if not request.path.startswith(API_PREFIX):
            return None
        logger.exception("unhandled error on %s", request.path)
        response = json_response(error_body("internal_error", "Internal server error."), 500)
        response._has_been_logged = True  # type: ignore[attr-defined]  # logged just above
        return response


class AnswerCountMiddleware(SyncAndAsyncMiddleware):
    """Every HTTP answer counted by its status class (``toolcore_http_responses_total``): first
    in ``MIDDLEWARE``, so it sees the answer as sent, ``/healthz``, refusals and 503s included.
    ``/mcp/`` is not Django's: its ASGI application counts its answers itself."""

    def after(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        metrics.http_answer_counted(response.status_code)
        return response
