"""The host tool port: an external host claims the calls of the tools it serves, reports their
progress and settles them (docs/subsystems/host_tools.md).

A host holds a call exactly as a worker does: by its claim's token and generation. Every update
renews the lease in the transaction that folds it; a holder that lost its claim gets
``StaleClaim`` and changes nothing. Anything else (a missing id, a core tool's call, another
owner's, another holder's, a made-up token) is ``NotFound``, the same answer byte for byte, so
ids cannot be probed: a host claim's token is derived from the call, its generation and the
holder (``tools/runtime/host/claim_tokens.py``), which is how a lost claim is told from a probe.
Output goes through the per-turn tracker, whose memory is the call's ``ToolActivity`` row, so
any process may take the next update.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from conversations.errors import NotFound, StaleClaim, ValidationFailed
from conversations.models import ConversationEvent, ToolCall
from conversations.services import publish
from conversations.services.activity import activity_fold
from conversations.services.claims import claim_acquire_batch, claim_renew
from conversations.services.settlement import AttemptFile, ClaimGuard, call_settle
from conversations.sql.common import maybe_uuid
from conversations.storage import FileExistsDifferent, attempt_dir, write_exclusive
from projections.fold import ToolUpdateError, validate_tool_update
from projections.tool_input import bound_tool_input
from tools.catalog import CORE_TOOLS, tool_spec

from ..images import IMAGE_TYPES, looks_like
from .claim_tokens import host_claim_token, host_claim_token_issued

logger = logging.getLogger(__name__)

CLAIMS_DEFAULT = 1
CLAIMS_MAX = 100
WORKER_MAX_CHARS = 255
FAILED_WITHOUT_TEXT = "The host reported a failure without a message."
# tool.updated fields only the server sets: the claim wrote startedAt, settlement writes
# finishedAt, and interaction mirrors what the call waits for (a person), never a host's.
SERVER_FIELDS = ("interaction", "startedAt", "finishedAt")


@dataclass(frozen=True)
class HostClaim:
    call_id: UUID
    tool_name: str
    arguments: Any
    token: UUID
    generation: int
    expires_at: datetime


@dataclass(frozen=True)
class HostUpdated:
    call_id: UUID
    rev: int
    expires_at: datetime


def host_claim(
    *, tool_names: Sequence[str], worker: str, limit: int, owner_id: Any, holder: str
) -> list[HostClaim]:
    """Claim up to ``limit`` ``ready`` calls of ``tool_names`` for ``worker``, oldest first:
    of ``owner_id``'s conversations, or of every owner when it is None. Each claim's token is
    derived for ``holder`` (``claim_tokens.holder_name``).

    Core catalog tools, and the tools of the MCP servers Toolcore is a client of, are the
    server's own workers' to run: naming one is refused (``ValidationFailed`` on ``tools``) and
    nothing is claimed.
    """
    core = sorted({name for name in tool_names if name in CORE_TOOLS or not tool_spec(name).host})
    if core:
        raise ValidationFailed(
            f"tools: {', '.join(core)} {'is' if len(core) == 1 else 'are'} run by the server's "
            "own workers; a host claims only host tools (names not in the catalog).",
            field="tools",
        )
    claims = claim_acquire_batch(
        tool_names=sorted(set(tool_names)),
        worker=worker,
        limit=limit,
        owner_id=owner_id,
        token_for=lambda call_id, generation: host_claim_token(
            call_id=call_id, generation=generation, holder=holder
        ),
    )
    taken = []
    for claim in claims:
        if claim.taken is None:  # claim_acquire_batch always reads it
            continue
        tool_name, arguments = claim.taken.tool_name, claim.taken.arguments
        conversation_id = claim.taken.conversation_id
        logger.info(
            "call claimed by host",
            extra={
                "conversation_id": conversation_id,
                "tool_call_id": claim.call_id,
                "claim_token": claim.token,
                "worker": worker,
            },
        )
        taken.append(
            HostClaim(
                claim.call_id, tool_name, arguments, claim.token, claim.generation, claim.expires_at
            )
        )
    return taken


STALE = (
    "This claim no longer holds the call: it expired and was recovered, or the call was "
    "cancelled or settled. Read the call with GET /tool-calls/{id}."
)


def _holds(call: ToolCall, token: UUID, generation: int) -> bool:
    """Whether the call, as read, is ``running`` under this token and generation."""
    claim = getattr(call, "claim", None) if call.state == ToolCall.State.RUNNING else None
    return (
        claim is not None
        and claim.generation == generation
        and hmac.compare_digest(claim.token.bytes, token.bytes)
    )


def _held_call(
    *, call_id: Any, token: UUID, generation: int, holder: str, owner_id: Any
) -> ToolCall:
    """The unfinished call, reached by the asker (``owner_id`` None: any owner's), that the
    claim ``token`` and ``generation`` holds, the host port having given that claim to
    ``holder``.

    A claim the port gave ``holder`` for this call and generation that holds no longer is
    ``StaleClaim`` (it was the asker's, and is lost). Anything else is ``NotFound``, the
    answer for a missing id, reached without reading the database: a core tool's call (the
    port never claims one), another owner's, another holder's claim, a made-up token."""
    pk = maybe_uuid(call_id)
    if pk is None or not host_claim_token_issued(
        call_id=pk, generation=generation, holder=holder, token=token
    ):
        raise NotFound("Tool call not found.")
    calls = ToolCall.objects.select_related("claim").filter(pk=pk)
    if owner_id is not None:
        calls = calls.filter(conversation__owner_id=owner_id)
    call = calls.first()
    if call is None or not _holds(call, token, generation):
        raise StaleClaim(STALE)
    return call


def _refused(error: ToolUpdateError) -> ValidationFailed:
    field = f"update.{error.field}" if error.field else "update"
    return ValidationFailed(f"update.{error}" if error.field else f"update: {error}", field=field)


def _checked_update(call: ToolCall, update: Any) -> dict[str, Any]:
    """The host's update, checked and completed: ``toolCallId`` and ``turnId`` filled in (a
    different value is refused, like a different ``toolName``), no server-owned field,
    ``output`` a plain string, ``input`` bounded. ``ValidationFailed`` names the field."""
    if not isinstance(update, dict):
        raise ValidationFailed("update: must be a JSON object.", field="update")
    for name in SERVER_FIELDS:
        if name in update:
            raise _refused(ToolUpdateError(name, "is set by the server, not by a host"))
    own = {"toolCallId": str(call.pk), "turnId": str(call.turn_id), "toolName": call.tool_name}
    for name, value in own.items():
        if name in update and update[name] != value:
            raise _refused(ToolUpdateError(name, "must be this call's own"))
    update = {**update, "toolCallId": own["toolCallId"], "turnId": own["turnId"]}
    try:
        validate_tool_update(update, from_host=True)
    except ToolUpdateError as exc:
        raise _refused(exc) from None
    if "output" in update and not isinstance(update["output"], str):
        raise _refused(
            ToolUpdateError(
                "output", "must be a string: the whole output so far (new text goes in outputDelta)"
            )
        )
    if "input" in update:
        kind = update.get("kind") or tool_spec(call.tool_name).kind
        bounded = bound_tool_input(update.pop("input"), tool_name=call.tool_name, kind=kind)
        if bounded is None:
            update["inputOmitted"] = True
        else:
            update["input"] = bounded
    return update


def host_update(
    *, call_id: Any, token: UUID, generation: int, update: Any, owner_id: Any, holder: str
) -> HostUpdated:
    """Fold a host's progress ``update`` into the call's activity and renew its lease, in one
    transaction; unless the claim holds, nothing changes: ``StaleClaim`` for a claim the host
    port gave ``holder`` that is lost, else ``NotFound`` (``_held_call``). The claim is checked
    before the update is: what the update may hold depends on the call.

    ``update`` holds ``tool.updated`` fields (``status`` only ``pending`` or ``in_progress``);
    ``output`` is the whole output so far, which the tracker turns into an append delta when
    it extends what was sent. Answers the activity's ``rev`` and the new ``expires_at``.
    """
    call = _held_call(
        call_id=call_id, token=token, generation=generation, holder=holder, owner_id=owner_id
    )
    checked = _checked_update(call, update)
    with publish.atomic():
        # The claim's row stays locked by the renewal until the fold commits: a settlement
        # or cancel of the call waits for it (lock order: call, claim, activity).
        expires_at = claim_renew(call_id=call.pk, token=token, generation=generation)
        activity = activity_fold(tool_call_id=call.pk, update=checked, tracked=True)
    rev = activity.rev if activity is not None else 0
    return HostUpdated(call.pk, rev, expires_at)


def _image_bytes(block: dict[str, Any], index: int) -> bytes:
    """The decoded bytes of an image block: strict base64 whose bytes are an image of the
    declared media type. ``ValidationFailed`` naming ``content.<index>.data`` otherwise."""
    field = f"content.{index}.data"
    try:
        data = base64.b64decode(block["data"], validate=True)
    except (binascii.Error, ValueError):
        raise ValidationFailed(
            f"{field}: must be standard base64 (A-Z, a-z, 0-9, +, /, with = padding).",
            field=field,
        ) from None
    media_type = block["mediaType"]
    if not data or not looks_like(media_type, data):
        raise ValidationFailed(f"{field}: the bytes are not a {media_type} image.", field=field)
    return data


def host_settle(
    *,
    call_id: Any,
    token: UUID,
    generation: int,
    outcome: str,
    content: Sequence[dict[str, Any]],
    details: Any = None,
    with_details: bool = False,
    owner_id: Any,
    holder: str,
) -> ConversationEvent:
    """Settle a host's call with ``outcome`` and ``content`` blocks. Unless the claim holds,
    nothing changes (no asset row, no file of the winner touched): ``StaleClaim`` for a claim
    the host port gave ``holder`` that is lost, else ``NotFound`` (``_held_call``).

    Text blocks, joined with newlines, are the text the projections summarise. Image blocks
    become files ``images/<n>.<ext>`` of the attempt folder (exclusive, durable) and ``image``
    assets of the response. ``result.json`` holds the content, images by file, and
    ``details`` when ``with_details``.
    """
    images = {i: _image_bytes(b, i) for i, b in enumerate(content) if b["type"] == "image"}
    call = _held_call(  # before a file is written
        call_id=call_id, token=token, generation=generation, holder=holder, owner_id=owner_id
    )
    folder = attempt_dir(call.conversation_id, call.pk, generation)
    blocks: list[dict[str, Any]] = []
    files: list[AttemptFile] = []
    texts: list[str] = []
    for index, block in enumerate(content):
        if block["type"] == "text":
            texts.append(block["text"])
            blocks.append({"type": "text", "text": block["text"]})
            continue
        media_type = block["mediaType"]
        name = f"images/{len(files) + 1}.{IMAGE_TYPES[media_type]}"
        try:
            write_exclusive(folder / name, images[index])
        except FileExistsDifferent as exc:
            raise StaleClaim("Another settlement of this attempt wrote its files first.") from exc
        files.append(AttemptFile(path=folder / name, kind="image", media_type=media_type))
        blocks.append({"type": "image", "mediaType": media_type, "file": name})
    result: dict[str, Any] = {"content": blocks}
    if with_details:
        result["details"] = details
    text = "\n".join(texts) if texts else None
    event = call_settle(
        call_id=call.pk,
        outcome=outcome,
        guard=ClaimGuard(token, generation),
        result=result,
        text=text,
        reason=FAILED_WITHOUT_TEXT if outcome == "failed" and text is None else None,
        files=files,
    )
    logger.info(
        "host settled %s",
        outcome,
        extra={
            "conversation_id": call.conversation_id,
            "tool_call_id": call.pk,
            "claim_token": token,
            "worker": call.claim.worker,
            "sequence": event.sequence,
        },
    )
    return event
