"""The log pages of async runs and launches: a capture file read by lines
(docs/subsystems/api.md, "Log pages"), on the disk of the host that ran the process.

With pinned workspaces (``TOOLCORE_SHARED_WORKSPACES`` off) each host keeps the captures of
what it ran on its own disk: a web process of another host asks a worker of the run's host for
the page over the channel layer (``host_pages.py``), and answers exactly what it would have
read itself.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from django.conf import settings
from django.http import HttpResponse
from ninja import Schema
from pydantic import Field

from conversations.api.responses import json_response
from conversations.errors import ValidationFailed
from conversations.storage import CAPTURE_MAX_BYTES, data_dir
from projections.logpages import PageParamError, page_answer, read_page

from .host_pages import page_asked

Stream = Literal["output", "stdout", "stderr"]
STREAMS = ("output", "stdout", "stderr")


class LogQuery(Schema):
    stream: Stream = "output"
    offset: Annotated[int, Field(ge=0)] | None = None
    limit: Annotated[int, Field(ge=1, le=500)] = 100


def log_page(folder: str, query: LogQuery, status: str, *, host: str = "") -> HttpResponse:
    """A page of the capture file ``stream`` of ``folder`` (below ``DATA_DIR``) by lines
    (``truncated``: capture stopped at its cap); read here, or asked of ``host`` when the file
    is on that host's disk only (not here: a ``DATA_DIR`` shared on NFS is read here)."""
    asked = {
        "folder": folder,
        "stream": query.stream,
        "offset": query.offset,
        "limit": query.limit,
        "status": status,
    }
    remote = (
        host
        and host != settings.TOOLCORE_HOST_NAME
        and not settings.TOOLCORE_SHARED_WORKSPACES
        and not _capture(asked).exists()
    )
    return json_response(page_asked(host, asked) if remote else page_read(asked))


def _capture(asked: dict[str, Any]) -> Path:
    """The capture file ``asked`` names, below ``DATA_DIR``; ``ValidationFailed`` for a folder
    or a stream that is not a capture's."""
    folder, stream = PurePosixPath(str(asked["folder"])), asked["stream"]
    if folder.is_absolute() or ".." in folder.parts or stream not in STREAMS:
        raise ValidationFailed("Not a capture file.", field="stream")
    return data_dir() / folder / f"{stream}.txt"


def page_read(asked: dict[str, Any]) -> dict[str, Any]:
    """The page ``asked`` (``log_page``'s keys) of this host's disk; ``ValidationFailed`` for
    a bad offset (or ``_capture``'s)."""
    path = _capture(asked)
    offset, limit, status = asked["offset"], asked["limit"], asked["status"]
    try:
        truncated = path.stat().st_size >= CAPTURE_MAX_BYTES
    except FileNotFoundError:  # not started yet: an empty page (a read never writes)
        return page_answer(
            offset or 0, [], 0, 0, limit=limit, status=status, truncated=False, path=""
        )
    try:
        return read_page(
            Path(path),
            offset=offset,
            limit=limit,
            status=status,
            truncated=truncated,
            index_dir=settings.DATA_DIR / "index",
        )
    except PageParamError as exc:
        raise ValidationFailed(str(exc), field=exc.field) from exc
