"""REST endpoints of conversations, calls and assets (spec api.md). Thin: parse, check access,
call one service or selector, shape the answer."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import connections
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from ninja import Query, Router, Schema
from pydantic import Field

from tools.logpages import PageParamError, read_page

from . import selectors
from .assets import RangeNotSatisfiable, asset_verify, iter_file, parse_range
from .auth import AsyncAuth
from .barrier import turn_results_wait
from .detached import detached
from .errors import ValidationFailed, error_body
from .responses import json_response
from .schemas import (
    ERRORS,
    CommandIn,
    ConversationIn,
    ConversationOut,
    ConversationPage,
    MessageIn,
    QueueAckIn,
    ResolutionIn,
    TurnEndIn,
)
from .services.cancel import call_cancel
from .services.conversations import conversation_create, conversation_delete
from .services.interactions import call_resolve
from .services.messages import command_post, message_post
from .services.queue import queue_ack
from .services.turns import turn_cancel, turn_end
from .shapes import conversation_wire

router = Router(tags=["conversations"])
calls_router = Router(tags=["tool calls"])
assets_router = Router(tags=["assets"])

Limit = Query(50, ge=1, le=100)


@router.post("/conversations", response={201: ConversationOut, **ERRORS})
def create_conversation(
    request: HttpRequest, payload: ConversationIn | None = None
) -> HttpResponse:
    """Both fields are optional (api.md ``{title?, workspace?}``), so is the body itself."""
    payload = payload or ConversationIn()
    conversation = conversation_create(
        owner=request.auth, title=payload.title or "", workspace=payload.workspace
    )
    return json_response(conversation_wire(conversation), 201)


@router.get("/conversations", response={200: ConversationPage, **ERRORS})
def list_conversations(
    request: HttpRequest, cursor: str | None = None, limit: int = Limit
) -> HttpResponse:
    return json_response(selectors.conversations_page(request.auth, cursor=cursor, limit=limit))


@router.get("/conversations/{cid}", response={200: ConversationOut, **ERRORS})
def get_conversation(request: HttpRequest, cid: str) -> HttpResponse:
    return json_response(conversation_wire(selectors.conversation_for(request.auth, cid)))


@router.delete("/conversations/{cid}", response={204: None, **ERRORS})
def delete_conversation(request: HttpRequest, cid: str) -> HttpResponse:
    conversation = selectors.conversation_for(request.auth, cid)
    conversation_delete(conversation_id=conversation.pk)
    response = HttpResponse(status=204)
    del response["Content-Type"]  # no body, so no type
    return response


@router.post("/conversations/{cid}/messages", response={200: dict, 201: dict, **ERRORS})
def post_message(request: HttpRequest, cid: str, payload: MessageIn) -> HttpResponse:
    conversation = selectors.conversation_for(request.auth, cid)
    posted = message_post(
        conversation_id=conversation.pk,
        message_id=payload.messageId,
        role=payload.role,
        turn_id=payload.turnId,
        content=[block.model_dump() for block in payload.content],
    )
    return json_response(posted.body, 201 if posted.created else 200)


@router.post("/conversations/{cid}/commands", response={200: dict, 201: dict, **ERRORS})
def post_command(request: HttpRequest, cid: str, payload: CommandIn) -> HttpResponse:
    conversation = selectors.conversation_for(request.auth, cid)
    posted = command_post(
        conversation_id=conversation.pk,
        input_id=payload.inputId,
        command=payload.command,
        include_in_context=payload.includeInContext,
    )
    return json_response(posted.body, 201 if posted.created else 200)


@router.get("/conversations/{cid}/events", response={200: dict, **ERRORS})
def list_events(
    request: HttpRequest,
    cid: str,
    after: int = Query(0, ge=0),
    limit: int = Query(100, ge=1, le=100),
) -> HttpResponse:
    body = selectors.events_page_json(request.auth, cid, after=after, limit=limit)
    return HttpResponse(body, content_type="application/json")


def _barrier_scope(user: Any, cid: str, tid: str) -> tuple[Any, Any]:
    try:
        conversation = selectors.conversation_for(user, cid)
        return conversation.pk, selectors.turn_for(conversation, tid).pk
    finally:
        connections.close_all()


@router.get(
    "/conversations/{cid}/turns/{tid}/results", auth=AsyncAuth(), response={200: dict, **ERRORS}
)
async def turn_results(
    request: HttpRequest, cid: str, tid: str, wait: float = Query(0, ge=0, le=60)
) -> HttpResponse:
    conversation_id, turn_id = await detached(_barrier_scope)(request.auth, cid, tid)
    answer = await turn_results_wait(conversation_id=conversation_id, turn_id=turn_id, wait=wait)
    return json_response(answer)


@router.post("/conversations/{cid}/queue/ack", response={200: dict, **ERRORS})
def ack_queue(request: HttpRequest, cid: str, payload: QueueAckIn) -> HttpResponse:
    conversation = selectors.conversation_for(request.auth, cid)
    return json_response(queue_ack(conversation_id=conversation.pk, up_to=payload.upTo))


@router.post("/conversations/{cid}/turns/{tid}/cancel", response={200: dict, **ERRORS})
def cancel_turn(request: HttpRequest, cid: str, tid: str) -> HttpResponse:
    conversation = selectors.conversation_for(request.auth, cid)
    turn = selectors.turn_for(conversation, tid)
    return json_response(turn_cancel(conversation_id=conversation.pk, turn_id=turn.pk))


@router.post("/conversations/{cid}/turns/{tid}/end", response={200: dict, **ERRORS})
def end_turn(
    request: HttpRequest, cid: str, tid: str, payload: TurnEndIn | None = None
) -> HttpResponse:
    conversation = selectors.conversation_for(request.auth, cid)
    turn = selectors.turn_for(conversation, tid)
    reason = payload.reason if payload is not None else "completed"
    return json_response(turn_end(conversation_id=conversation.pk, turn_id=turn.pk, reason=reason))


@calls_router.get("/tool-calls/{call_id}", response={200: dict, **ERRORS})
def get_call(request: HttpRequest, call_id: str) -> HttpResponse:
    return json_response(selectors.call_detail(request.auth, call_id))


@calls_router.post("/tool-calls/{call_id}/resolution", response={200: dict, **ERRORS})
def resolve_call(request: HttpRequest, call_id: str, payload: ResolutionIn) -> HttpResponse:
    call, _ = selectors.call_for(request.auth, call_id)
    target = call.pk if call is not None else call_id
    resolution = payload.model_dump(exclude={"requestId"})
    answer = call_resolve(
        call_id=target, user=request.auth, request_id=payload.requestId, resolution=resolution
    )
    return json_response(answer)


@calls_router.post("/tool-calls/{call_id}/cancel", response={200: dict, **ERRORS})
def cancel_call(request: HttpRequest, call_id: str) -> HttpResponse:
    call, event = selectors.call_for(request.auth, call_id)
    if call is None:
        return json_response({"outcome": event.payload["outcome"], "alreadySettled": True})  # type: ignore[union-attr]
    return json_response(call_cancel(call_id=call.pk))


@calls_router.get("/tool-calls/{call_id}/details", response={200: dict, **ERRORS})
def call_details(request: HttpRequest, call_id: str) -> HttpResponse:
    return json_response(selectors.call_details(request.auth, call_id))


@assets_router.get("/assets/{asset_id}", response={200: None, 206: None, **ERRORS})
def get_asset(request: HttpRequest, asset_id: str) -> HttpResponse:
    asset = selectors.asset_for(request.auth, asset_id)
    path = asset_verify(asset)
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
        iter_file(path, start, length), status=206 if span else 200, content_type=asset.media_type
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


@assets_router.get("/assets/{asset_id}/lines", response={200: dict, **ERRORS})
def get_asset_lines(request: HttpRequest, asset_id: str, query: Query[LinesQuery]) -> HttpResponse:
    asset = selectors.asset_for(request.auth, asset_id)
    path = asset_verify(asset)
    try:
        page = read_page(
            path,
            offset=query.offset,
            limit=query.limit,
            status=None,
            truncated=asset.truncated,
            index_dir=settings.DATA_DIR / "index",
        )
    except PageParamError as exc:
        raise ValidationFailed(str(exc), field=exc.field) from exc
    return json_response(page)
