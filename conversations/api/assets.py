"""REST endpoints of assets: their bytes, checked against their SHA-256, and text assets by
lines. Thin: check access, read, shape the answer.

The docstrings of the views are the operations' descriptions on the OpenAPI page: they are
written for someone who has only that page.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from ninja import Query, Router, Schema
from pydantic import Field

from projections.logpages import PageParamError

from .. import selectors
from ..assets import RangeNotSatisfiable, parse_range
from ..errors import ValidationFailed, error_body
from ..storage import asset_store
from .responses import json_response
from .schemas.common import PathId
from .schemas.conversations import READ_ERRORS, LinesPageOut, errors

assets_router = Router(tags=["assets"])

# An asset's bytes. `application/octet-stream` first: the binary type a client generator reads
# (it takes the first content type it knows); `*/*` because the `Content-Type` actually sent is
# the asset's own (`text/plain; charset=utf-8`, `application/json`, `image/png`, …).
_BINARY = {"schema": {"type": "string", "format": "binary"}}
_BYTES = {"content": {"application/octet-stream": _BINARY, "*/*": _BINARY}}


@assets_router.get(
    "/assets/{asset_id}",
    operation_id="get_asset",
    summary="Read an asset's bytes",
    response={200: None, 206: None, **errors(*READ_ERRORS, 409, 416)},
    openapi_extra={
        "responses": {
            200: {**_BYTES, "description": "The whole asset, with its own media type."},
            206: {**_BYTES, "description": "The range asked (`Content-Range` says which)."},
        }
    },
)
def get_asset(request: HttpRequest, asset_id: PathId) -> HttpResponse:
    """The stored bytes, served only after their SHA-256 was checked (`ETag` and
    `X-Content-SHA256` carry it). Altered or missing bytes are 409 `asset_corrupt`, and
    nothing is served.

    One `Range: bytes=start-end` is honoured (206 with `Content-Range`); a range outside the
    asset is 416. Other ranges get the whole file.
    """
    asset = selectors.asset_for(request.auth, asset_id)
    store = asset_store()
    handle = store.verify(asset)
    size = asset.size
    try:
        span = parse_range(request.headers.get("Range"), size)
    except RangeNotSatisfiable:
        response = json_response(
            error_body("range_not_satisfiable", "The range is outside the asset."), 416
        )
        response["Content-Range"] = f"bytes */{size}"
        return response
    start, end = span if span is not None else (0, size - 1)
    length = max(0, end - start + 1)
    response = StreamingHttpResponse(
        store.stream(asset, handle, start, length),
        status=206 if span else 200,
        content_type=asset.media_type,
    )
    response["Content-Length"] = str(length)
    response["Accept-Ranges"] = "bytes"
    response["ETag"] = f'"{asset.sha256}"'
    response["X-Content-SHA256"] = asset.sha256
    if span is not None:
        response["Content-Range"] = f"bytes {start}-{end}/{size}"
    return response


class LinesQuery(Schema):
    offset: int | None = Field(None, ge=0)
    limit: int = Field(100, ge=1, le=500)


@assets_router.get(
    "/assets/{asset_id}/lines",
    operation_id="get_asset_lines",
    summary="Read a text asset by lines",
    response={200: LinesPageOut, **errors(*READ_ERRORS, 409, 422)},
)
def get_asset_lines(
    request: HttpRequest, asset_id: PathId, query: Query[LinesQuery]
) -> HttpResponse:
    """A page of lines: from the 0-based line `offset`, or without it the last `limit` lines
    (`limit` 1…500, default 100). A page holds at most 512 KiB of text; `nextOffset` is the
    first line not returned (null at the end). An offset at or past the end answers an empty
    page. `path` names the file when the page does not hold it all.
    """
    asset = selectors.asset_for(request.auth, asset_id)
    store = asset_store()
    handle = store.verify(asset)
    try:
        page = store.read_page(asset, handle, offset=query.offset, limit=query.limit)
    except PageParamError as exc:
        raise ValidationFailed(str(exc), field=exc.field) from exc
    return json_response(page)
