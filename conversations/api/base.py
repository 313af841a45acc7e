"""The ninja API object: compact JSON in and out, and every error as the JSON error body.

Domain errors are mapped to HTTP here, once. So are outages (the database or the channel layer
away): 503 ``unavailable``, before django-ninja's own handler of other exceptions, which with
``DEBUG`` on answers a 500 with the traceback (``conversations.api.outages``).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, AuthorizationError, HttpError, ValidationError
from ninja.parser import Parser
from ninja.renderers import BaseRenderer
from ninja.responses import NinjaJSONEncoder

from ..bodies import field_of, strict_loads
from ..errors import DomainError, error_body
from ..fields import dumps
from .auth import BearerAuth, SessionAuth
from .outages import OUTAGES, unavailable_response
from .responses import json_response


class StrictJSONParser(Parser):
    """Request bodies read with ``strict_loads``."""

    def parse_body(self, request: HttpRequest) -> Any:
        if not request.body:
            return None  # no body at all: validation says which field is missing
        return strict_loads(request.body)


class CompactRenderer(BaseRenderer):
    media_type = "application/json"

    def render(self, request: HttpRequest, data: Any, *, response_status: int) -> Any:
        return dumps(data)


@csrf_exempt  # read-only and public: a POST answers 405, not a CSRF page
def openapi_json(request: HttpRequest) -> HttpResponse:
    """``/api/v1/openapi.json`` as compact JSON, like everything else on the wire (ninja's own
    view indents with spaces)."""
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])  # made JSON by ApiErrorMiddleware
    text = json.dumps(
        api.get_openapi_schema(), cls=NinjaJSONEncoder, ensure_ascii=False, separators=(",", ":")
    )
    return HttpResponse(text.encode(), content_type="application/json")


API_DESCRIPTION = """\
The server side of an AI coding-agent platform: the life of every tool call, from the assistant
message that asks for it, through the permission check, approval or input, execution and
settlement, to the bounded views of its result. Durable facts are events numbered 1, 2, 3 … per
conversation; `GET /conversations/{cid}/events` replays them.

**Authentication.** `Authorization: Bearer <token>` (`python manage.py create_token USERNAME`
prints one), or the session of a browser logged in to the admin, which sends the CSRF token
(`X-CSRFToken` header) with every write (else 403 `csrf_failed`). A request that sends an
`Authorization` header is judged by it alone: an invalid token is 401 even with a session.
A 401 carries `WWW-Authenticate: Bearer`. Failed tokens are counted per client address: after
a few in a row (5 by default, each within 15 minutes of the one before), a failed token from
that address answers 429 `throttled` with `Retry-After` until the lockout ends (a valid token
is never refused for it). Another user's resource answers 404, like a missing one.

**Bodies** are JSON objects with camelCase keys, at most 1 MiB (413 above). Types are strict: a
boolean is `true`/`false`, an integer a JSON number without a fraction (`3` or `3.0`, never
`"3"`). Numbers must be finite (`NaN`, `Infinity`, `1e999` are 422) and arrays and objects may
nest at most 100 levels deep (422). Unknown fields are 422.

**Errors** are JSON: `{"error": {"code", "message", "field"?}}`, `message` at most 1 KiB. 400
malformed JSON, 401 no or bad credentials, 403 a missing permission or a failed CSRF check,
404 missing or not yours, 409 a conflict with recorded state (the code names it), 413 too
large, 422 a field refused (`field` names it, as a dotted path such as `content.0.arguments`),
429 `throttled` a failed token from an address locked out for failing too often.
503 `unavailable` with `Retry-After` when the database or the channel layer cannot be reached
(nothing was written: send the same request again).

**Idempotency.** `messageId`, `inputId` and `requestId` are the client's own keys: the same
request again answers what was recorded the first time; the same key with other content is 409.

Ids are strings (UUIDs), times ISO 8601 UTC with milliseconds. The conversation list is newest
first, paged with `limit` and the previous page's `nextCursor`; events are replayed oldest
first with `after` and the previous page's `nextAfter`.
"""

api = NinjaAPI(
    title="Toolcore API",
    version="1",
    description=API_DESCRIPTION,
    urls_namespace="api-v1",
    auth=[BearerAuth(), SessionAuth()],
    parser=StrictJSONParser(),
    renderer=CompactRenderer(),
)


@api.exception_handler(DomainError)
def _domain_error(request: HttpRequest, exc: DomainError) -> HttpResponse:
    response = json_response(exc.body(), exc.status)
    for name, value in exc.headers().items():
        response[name] = value
    return response


@api.exception_handler(ValidationError)
def _validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    first = exc.errors[0] if exc.errors else {}
    field = field_of(first)
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
    if isinstance(exc.__cause__, DomainError):  # the parser's refusal, wrapped by ninja
        return _domain_error(request, exc.__cause__)
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


def _unavailable(request: HttpRequest, exc: Exception) -> HttpResponse:
    return unavailable_response(request, exc)


# django-ninja looks a handler up by the exception's class and its bases, in order: one
# registration per class (Django's and psycopg's errors share no base but ``Exception``).
for _outage in OUTAGES:
    api.add_exception_handler(_outage, _unavailable)
