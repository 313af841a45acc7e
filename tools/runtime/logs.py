"""The log pages of async runs and launches: a capture file read by lines
(docs/subsystems/api.md, "Log pages")."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from django.conf import settings
from django.http import HttpResponse
from ninja import Schema
from pydantic import Field

from conversations.api.responses import json_response
from conversations.errors import ValidationFailed
from conversations.storage import CAPTURE_MAX_BYTES
from projections.logpages import PageParamError, read_page

Stream = Literal["output", "stdout", "stderr"]


class LogQuery(Schema):
    stream: Stream = "output"
    offset: Annotated[int, Field(ge=0)] | None = None
    limit: Annotated[int, Field(ge=1, le=500)] = 100


def log_page(path: Path, query: LogQuery, status: str) -> HttpResponse:
    """A page of a capture file by lines (``truncated``: capture stopped at its cap)."""
    try:
        truncated = path.stat().st_size >= CAPTURE_MAX_BYTES
    except FileNotFoundError:  # not started yet: an empty page (a read never writes)
        empty = {"lines": [], "offset": query.offset or 0, "limit": query.limit, "totalLines": 0}
        return json_response(
            {**empty, "nextOffset": None, "status": status, "path": None, "truncated": False}
        )
    try:
        page = read_page(
            path,
            offset=query.offset,
            limit=query.limit,
            status=status,
            truncated=truncated,
            index_dir=settings.DATA_DIR / "index",
        )
    except PageParamError as exc:
        raise ValidationFailed(str(exc), field=exc.field) from exc
    return json_response(page)
