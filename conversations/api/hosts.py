"""Requests whose ``Host`` header ``ALLOWED_HOSTS`` does not list: one warning, and a 400 in the
form of the path (JSON under ``/api/`` and at ``/readyz``, Django's page elsewhere).

Left to Django, such a request raises ``DisallowedHost`` from the first ``get_host()`` and is
logged as an ERROR with its traceback, though nothing failed: a scanner or a misdirected probe
sent the wrong name. Checked here, right after ``/healthz`` (which answers any ``Host``), before
anything else reads the host.
"""

from __future__ import annotations

import logging

from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponse
from django.urls import get_resolver, get_urlconf

from projections.units import cut_text

from ..errors import error_body
from .middleware import SyncAndAsyncMiddleware
from .outages import API_PREFIX
from .responses import json_response

# Django's own logger for this refusal, so filters and alerts written for it keep working.
logger = logging.getLogger("django.security.DisallowedHost")

READYZ_PATH = "/readyz"
REFUSED_MESSAGE = "The Host header names no host this server answers to (ALLOWED_HOSTS)."


def _answers_json(request: HttpRequest) -> bool:
    return request.path_info.startswith(API_PREFIX) or request.path_info == READYZ_PATH


class AllowedHostMiddleware(SyncAndAsyncMiddleware):
    """Refuses a ``Host`` that ``ALLOWED_HOSTS`` does not list with a 400, logged once."""

    def before(self, request: HttpRequest) -> HttpResponse | None:
        try:
            request.get_host()
        except DisallowedHost as exc:
            logger.warning("%s %s: %s", request.method, cut_text(request.path), exc)
            if _answers_json(request):
                response = json_response(error_body("bad_request", REFUSED_MESSAGE), 400)
            else:  # a page: the site's 400 page, as Django would answer
                handler = get_resolver(get_urlconf()).resolve_error_handler(400)
                response = handler(request, exc)
            response._has_been_logged = True  # type: ignore[attr-defined]  # logged just above
            return response
        return None
