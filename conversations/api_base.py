"""The ninja API object: compact JSON in and out, and every error as the spec's JSON body.

Domain errors are mapped to HTTP here, once.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, AuthorizationError, HttpError, ValidationError
from ninja.parser import Parser
from ninja.renderers import BaseRenderer
from ninja.responses import NinjaJSONEncoder

from projections.units import clean_json

from .auth import BearerAuth, SessionAuth
from .errors import DomainError, error_body
from .fields import dumps
from .responses import json_response


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class StrictJSONParser(Parser):
    """``json.loads`` refusing ``NaN`` and ``Infinity``, which are not JSON."""

    def parse_body(self, request: HttpRequest) -> Any:
        if not request.body:
            return None  # no body at all: validation says which field is missing
        # Lone surrogates and U+0000 become U+FFFD before validation (spec README, "Text").
        return clean_json(json.loads(request.body, parse_constant=_refuse_constant))


class CompactRenderer(BaseRenderer):
    media_type = "application/json"

    def render(self, request: HttpRequest, data: Any, *, response_status: int) -> Any:
        return dumps(data)


def openapi_json(request: HttpRequest) -> HttpResponse:
    """``/api/v1/openapi.json`` as compact JSON, like everything else on the wire (ninja's own
    view indents with spaces)."""
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])  # made JSON by ApiErrorMiddleware
    text = json.dumps(
        api.get_openapi_schema(), cls=NinjaJSONEncoder, ensure_ascii=False, separators=(",", ":")
    )
    return HttpResponse(text.encode(), content_type="application/json")


api = NinjaAPI(
    title="Toolcore API",
    version="1",
    description="The server side of an AI coding-agent platform: the life of every tool call.",
    urls_namespace="api-v1",
    auth=[BearerAuth(), SessionAuth()],
    parser=StrictJSONParser(),
    renderer=CompactRenderer(),
)


# Union tags pydantic adds to the location of an error inside a discriminated union.
_UNION_TAGS = {"text", "tool_call", "approval", "input"}


def _field_of(error: dict[str, Any]) -> str:
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


@api.exception_handler(DomainError)
def _domain_error(request: HttpRequest, exc: DomainError) -> HttpResponse:
    return json_response(exc.body(), exc.status)


@api.exception_handler(ValidationError)
def _validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    first = exc.errors[0] if exc.errors else {}
    field = _field_of(first)
    message = f"{field}: {first.get('msg', 'invalid value')}"
    return json_response(error_body("validation_error", message, field), 422)


@api.exception_handler(AuthenticationError)
def _unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return json_response(error_body("unauthorized", "Authentication required."), 401)


@api.exception_handler(AuthorizationError)
def _unauthorized(request: HttpRequest, exc: AuthorizationError) -> HttpResponse:
    return json_response(error_body("forbidden", "Not allowed."), 403)


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if exc.status_code == 400 and str(exc).startswith("Cannot parse request body"):
        return json_response(
            error_body("malformed_json", "The request body is not valid JSON."), 400
        )
    return json_response(error_body("error", str(exc)), exc.status_code)


@api.exception_handler(RequestDataTooBig)
def _too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return json_response(error_body("payload_too_large", "Request body too large."), 413)


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return json_response(error_body("not_found", "Not found."), 404)
