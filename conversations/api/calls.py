"""REST endpoints of tool calls: read one, resolve what it awaits, cancel it, its projections
and assets. Thin: parse, check access, call one service or selector, shape the answer.

The docstrings of the views are the operations' descriptions on the OpenAPI page: they are
written for someone who has only that page.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from ninja import Router

from .. import selectors
from ..services.cancel import call_cancel
from ..services.interactions import call_resolve
from .responses import json_response
from .schemas.common import PathId
from .schemas.conversations import (
    READ_ERRORS,
    WRITE_ERRORS,
    CallCancelOut,
    CallDetailsOut,
    ResolutionIn,
    SettledCallOut,
    UnfinishedCallOut,
    errors,
)
from .schemas.events import ResolutionOut

calls_router = Router(tags=["tool calls"])


@calls_router.get(
    "/tool-calls/{call_id}",
    operation_id="get_tool_call",
    summary="Get a tool call",
    response={200: UnfinishedCallOut | SettledCallOut, **errors(*READ_ERRORS)},
)
def get_call(request: HttpRequest, call_id: PathId) -> HttpResponse:
    """An unfinished call with its `state`, `arguments`, `interaction` (what it waits for:
    while `awaiting_approval`, `{kind: "approval", request}`; while `awaiting_input`, the
    questions) and execution `claim`; once settled, `{id, outcome, response}` with its
    `tool_call_response` event.
    """
    return json_response(selectors.call_detail(request.auth, call_id))


@calls_router.post(
    "/tool-calls/{call_id}/resolution",
    operation_id="resolve_tool_call",
    summary="Approve, deny or answer a tool call",
    response={200: ResolutionOut, **errors(*WRITE_ERRORS, 409)},
)
def resolve_call(request: HttpRequest, call_id: PathId, payload: ResolutionIn) -> HttpResponse:
    """Resolves what the call awaits and answers the recorded resolution.

    - `{"requestId", "kind": "approval", "decision": "allow" | "deny", "persist"?, "rule"?}`
      for a call `awaiting_approval`. Allowing moves it to `ready` for execution; denying
      settles it `denied`. `persist: true` with `allow` also saves one of the request's
      `suggestedRules` as a rule of this conversation: the one `rule` names (its index, 0 for
      the first, or its `pattern`; 422 naming `rule` when none matches), else the first (the
      exact command or path, glob characters escaped). Approving a tool that runs programs
      (`bash`, host tools) needs the permission `tools.run_commands` (else 403 `forbidden`);
      denying needs none.
    - `{"requestId", "kind": "input", "value": {"answers": {questionId: answer}}}` for a call
      `awaiting_input`: every question answered, a list only where the question allows
      several answers (else 422 naming `value.answers.<id>`). It settles `completed`.

    **`requestId` is the client's own idempotency key.** The same request with the same
    resolution again answers the recorded result (also after the call settled); any other
    resolution of a call already resolved is 409 `resolution_conflict`, naming the recorded
    one. A call not awaiting this kind is 409 `not_awaiting`.
    """
    call, _ = selectors.call_for(request.auth, call_id)
    target = call.pk if call is not None else call_id
    answer = call_resolve(
        call_id=target,
        user=request.auth,
        request_id=payload.requestId,
        resolution=payload.to_resolution(),
    )
    return json_response(answer)


@calls_router.post(
    "/tool-calls/{call_id}/cancel",
    operation_id="cancel_tool_call",
    summary="Cancel a tool call",
    response={200: CallCancelOut, **errors(401, 403, 404, 409, 413)},
)
def cancel_call(request: HttpRequest, call_id: PathId) -> HttpResponse:
    """Settles one unfinished call as a cancel does and answers its outcome with
    `alreadySettled: false`. Idempotent: a call already settled answers its recorded outcome
    with `alreadySettled: true` and changes nothing.
    """
    call, event = selectors.call_for(request.auth, call_id)
    if call is None:
        return json_response({"outcome": event.payload["outcome"], "alreadySettled": True})  # type: ignore[union-attr]
    return json_response(call_cancel(call_id=call.pk))


@calls_router.get(
    "/tool-calls/{call_id}/details",
    operation_id="get_tool_call_details",
    summary="Get a tool call's projections and assets",
    response={200: CallDetailsOut, **errors(*READ_ERRORS)},
)
def call_details(request: HttpRequest, call_id: PathId) -> HttpResponse:
    """On demand, for a call settled or not: what the model sees (`modelContent`), the
    transcript view (`userProjection`), the bounded `tool.updated` state with its `rev`, and
    the assets keeping the whole output (read them with `GET /assets/{id}`).
    """
    return json_response(selectors.call_details(request.auth, call_id))
