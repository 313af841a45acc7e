"""REST endpoints of the host tool port: claim, report progress, settle. Thin: parse, decide
whose calls the caller reaches, call one service, shape the answer.

The docstrings of the views are the operations' descriptions on the OpenAPI page.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from ninja import Router

from conversations.api.responses import json_response
from conversations.api.schemas.common import PathId
from conversations.api.schemas.conversations import SettledCallOut, errors
from conversations.models import ApiToken
from conversations.shapes import iso, settled_call_wire

from .claim_tokens import holder_name
from .schemas import HostClaimsIn, HostClaimsOut, HostSettleIn, HostUpdateIn, HostUpdateOut
from .services import host_claim, host_settle, host_update

host_router = Router(tags=["host tool port"])

_WRITE = (400, 401, 403, 404, 409, 413, 422)


def _holder(request: HttpRequest) -> str:
    """Who asks, as host claims' tokens are derived for it: the API token, else the user."""
    token = getattr(request, "api_token", None)
    return holder_name(
        api_token_id=None if token is None else token.pk,
        user_id=request.auth.pk,  # type: ignore[attr-defined]
    )


def _owner_reached(request: HttpRequest) -> Any:
    """Whose calls the caller reaches: every owner's (None) with a token of the ``host``
    scope; else its own user's (a token without the scope, a session)."""
    token = getattr(request, "api_token", None)
    if token is not None and token.has_scope(ApiToken.Scope.HOST):
        return None
    return request.auth.pk  # type: ignore[attr-defined]


@host_router.post(
    "/host/claims",
    operation_id="claim_host_calls",
    summary="Claim ready host tool calls",
    response={200: HostClaimsOut, **errors(400, 401, 403, 413, 422)},
)
def claim_host_calls(request: HttpRequest, payload: HostClaimsIn) -> HttpResponse:
    """Claims up to `max` (1…100, default 1) `ready` calls of the named host tools, oldest
    first, and answers each with its complete `arguments` and its claim: `token`,
    `generation` and `expiresAt` (the lease, `TOOLCORE_CLAIM_LEASE` seconds, 30 by default).
    Nothing ready answers `{"claims": []}`.

    A token reaches the calls of its own user's conversations; a token with the `host` scope
    (`create_token --scope host`) those of every owner. Core catalog tools (`bash`, `read`,
    `grep`, `find`, `ls`, `async_bash_*`, `ask_user`) are run by the server: naming one is 422
    naming `tools`. `worker` (1…255 characters) names the holder.

    Each claimed call is `running`: report progress with `POST /tool-calls/{id}/updates`
    (which renews the lease) and settle it with `POST /tool-calls/{id}/settle`. A claim that
    runs out is recovered: a host tool then settles `indeterminate`.
    """
    claims = host_claim(
        tool_names=payload.tools,
        worker=payload.worker,
        limit=payload.max,
        owner_id=_owner_reached(request),
        holder=_holder(request),
    )
    return json_response(
        {
            "claims": [
                {
                    "toolCallId": str(c.call_id),
                    "toolName": c.tool_name,
                    "arguments": c.arguments,
                    "token": str(c.token),
                    "generation": c.generation,
                    "expiresAt": iso(c.expires_at),
                }
                for c in claims
            ]
        }
    )


@host_router.post(
    "/tool-calls/{call_id}/updates",
    operation_id="update_host_call",
    summary="Report a host call's progress",
    response={200: HostUpdateOut, **errors(*_WRITE)},
)
def update_host_call(request: HttpRequest, call_id: PathId, payload: HostUpdateIn) -> HttpResponse:
    """Folds `update` into the call's tool card (published as `tool.updated` with its new
    `rev`) and renews the claim's lease; answers `{toolCallId, rev, expiresAt}`.

    `update` holds `tool.updated` fields. `toolCallId` and `turnId` may be left out (the
    server fills them in; other values are 422). `status` is only `pending` or `in_progress`:
    final states come from settling. `rev`, `interaction`, `startedAt` and `finishedAt` are
    the server's (422). Output comes either as `output`, **a string holding the whole output
    so far** (what extends the text sent before goes out as an append delta, anything else
    replaces it), or as `outputDelta`, new text to append (JSON cost 1…16384). `input` is
    bounded to 4 KiB of JSON. A bad field is 422 naming it (`update.status`).

    `token` and `generation` must hold the claim, and nothing changes otherwise: a claim this
    port gave the asking token (or session) that no longer holds (the call settled, was
    cancelled, or its claim expired and was recovered) is 409 `stale_claim`; anything else (a
    missing or another owner's call, a core tool's call, another token's claim, a token this
    port never gave for that call and generation) is 404 `not_found`, exactly as for a
    missing id. The claim is checked before the update is. Send an update at least every
    third of the lease to keep it.
    """
    updated = host_update(
        call_id=call_id,
        token=payload.token,
        generation=payload.generation,
        update=payload.update,
        owner_id=_owner_reached(request),
        holder=_holder(request),
    )
    return json_response(
        {
            "toolCallId": str(updated.call_id),
            "rev": updated.rev,
            "expiresAt": iso(updated.expires_at),
        }
    )


@host_router.post(
    "/tool-calls/{call_id}/settle",
    operation_id="settle_host_call",
    summary="Settle a host call",
    response={200: SettledCallOut, **errors(*_WRITE)},
)
def settle_host_call(request: HttpRequest, call_id: PathId, payload: HostSettleIn) -> HttpResponse:
    """Settles the call the claim holds and answers it settled: `{id, outcome, response}`
    with its `tool_call_response` event.

    - `outcome`: `completed`, `failed`, `cancelled` or `indeterminate` (the effect may or
      may not have happened).
    - `content`: at most 100 blocks. `{"type": "text", "text"}` blocks, joined with
      newlines, are the text the model's and the transcript's views are made from.
      `{"type": "image", "mediaType", "data"}` blocks (`image/png`, `image/jpeg`,
      `image/gif` or `image/webp`; `data` in standard base64, bytes of that type) are stored
      as files and become `image` assets listed in the response's `assetIds`, never inline.
    - `details`: any JSON, kept with the content in the complete result (`result.json`, the
      `payload` asset).

    `token` and `generation` must hold the claim, and nothing is written otherwise: a claim
    this port gave the asking token (or session) that no longer holds is 409 `stale_claim`,
    also when the call already settled (read it with `GET /tool-calls/{id}`); anything else
    (a missing or another owner's call, a core tool's call, another token's claim, a made-up
    token) is 404 `not_found`, exactly as for a missing id. The body is at most 1 MiB.
    """
    event = host_settle(
        call_id=call_id,
        token=payload.token,
        generation=payload.generation,
        outcome=payload.outcome,
        content=[block.model_dump() for block in payload.content],
        details=payload.details,
        with_details="details" in payload.model_fields_set,
        owner_id=_owner_reached(request),
        holder=_holder(request),
    )
    return json_response(settled_call_wire(event))
