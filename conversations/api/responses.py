"""JSON answers as the server sends them: compact, non-ASCII kept (docs/architecture.md, "Conventions")."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse

from ..fields import dumps


def json_response(body: Any, status: int = 200) -> HttpResponse:
    return HttpResponse(dumps(body), status=status, content_type="application/json")
