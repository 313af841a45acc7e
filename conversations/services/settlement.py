"""Settlement: the one function that turns an unfinished call into its response event.

Whatever settles a call (handler, host, cancel, recovery, approval deny, end of turn), it goes
through ``call_settle``: guard, prepare outside the transaction, then one transaction that
appends ``tool_call_response``, links the asset rows, deletes the row and its claim and writes
the final activity; publications follow the commit.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from projections.fold import status_for_state
from projections.model import model_content
from projections.transcript import project_transcript
from projections.wire import bound_tool_input, bound_tool_output
from tools.catalog import tool_spec

from ..errors import NotFound, StaleClaim
from ..fields import dumps
from ..models import ConversationEvent, ToolCall, Turn
from ..shapes import iso
from ..storage import (
    FileExistsDifferent,
    attempt_relative,
    data_dir,
    relative_to_data,
    sha256_file,
    write_exclusive,
)
from .activity import (
    activity_apply,
    activity_fold,
    activity_published,
    fold_write,
    status_update,
)
from .calls import call_removed
from .events import event_append, event_instance, event_published
from .publish import Message, publish_on_commit
from .settlement_sql import (
    AssetRow,
    ClaimGuard,
    GenerationGuard,
    Guard,
    SettlingCall,
    assets_insert,
    call_delete_guarded,
    guard_check,
    settle_statement,
    settling_call_load,
)
from .transitions import check_settlement
from .turns import turn_close

__all__ = ["AttemptFile", "ClaimGuard", "GenerationGuard", "call_settle"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AttemptFile:
    """A file the attempt wrote (capture, report, image), registered as an asset on settling."""

    path: Path
    kind: str
    media_type: str = "text/plain; charset=utf-8"
    truncated: bool = False


@dataclass
class _Prepared:
    assets: list[AssetRow] = field(default_factory=list)
    model: list[dict[str, Any]] = field(default_factory=list)
    transcript: dict[str, Any] = field(default_factory=dict)
    arguments: Any = None


def _resource(call: SettlingCall) -> str | None:
    spec = tool_spec(call.tool_name)
    args = call.arguments if isinstance(call.arguments, dict) else {}
    if spec.subject == "command":
        return args.get("command") if isinstance(args.get("command"), str) else None
    if spec.is_path_tool:
        return args.get("path") if isinstance(args.get("path"), str) else None
    return None


def _asset(
    path: Path,
    kind: str,
    media_type: str,
    truncated: bool = False,
    data: bytes | None = None,
    relative: str | None = None,
) -> AssetRow:
    """An asset row for a file of the attempt; ``data`` when the caller holds its bytes (no
    re-read), else the file is stat'ed and hashed (streamed). ``relative``: its path under
    ``DATA_DIR`` when the caller knows it."""
    return AssetRow(
        id=uuid.uuid4(),
        kind=kind,
        path=relative if relative is not None else relative_to_data(path),
        size=len(data) if data is not None else path.stat().st_size,
        sha256=hashlib.sha256(data).hexdigest() if data is not None else sha256_file(path),
        media_type=media_type,
        truncated=truncated,
    )


def _prepare(
    call: SettlingCall,
    *,
    outcome: str,
    result: Any,
    text: str | None,
    items: Sequence[str] | None,
    process: dict[str, Any] | None,
    reason: str | None,
    files: Sequence[AttemptFile],
) -> _Prepared:
    """Write and hash the attempt's files; compute the model and transcript projections."""
    spec = tool_spec(call.tool_name)
    relative = attempt_relative(call.conversation_id, call.id, call.generation)
    folder = data_dir() / relative
    prepared = _Prepared()
    prepared.arguments = bound_tool_input(call.arguments, tool_name=call.tool_name, kind=spec.kind)
    written: list[tuple[str, str, bytes]] = []
    if prepared.arguments != call.arguments:
        written.append(("arguments.json", "arguments", dumps(call.arguments).encode()))
    result_path = folder / "result.json"
    if result is not None:
        written.append(("result.json", "payload", dumps(result).encode()))
    for name, kind, data in written:
        path = folder / name
        write_exclusive(path, data)
        prepared.assets.append(
            _asset(path, kind, "application/json", data=data, relative=f"{relative}/{name}")
        )
    for item in files:
        prepared.assets.append(_asset(item.path, item.kind, item.media_type, item.truncated))
    output_path = folder / "output.txt"
    artifacts = [
        {
            "label": Path(a.path).name,
            "kind": a.kind,
            "size": a.size,
            "path": str(folder / Path(a.path).name),
        }
        for a in prepared.assets
        if a.kind in {"report", "image"}
    ]
    prepared.model = model_content(
        tool_name=call.tool_name,
        profile=spec.profile,
        outcome=outcome,
        reason=reason,
        resource=_resource(call),
        text=text,
        items=items,
        process=process,
        path=str(output_path if process is not None else result_path),
        artifacts=artifacts,
    )
    args = call.arguments if isinstance(call.arguments, dict) else {}
    if text is None and items is None and outcome != "completed":
        preview_text = prepared.model[0]["text"]
    else:
        preview_text = text
    prepared.transcript = project_transcript(
        tool_name=call.tool_name, arguments=args, result_text=preview_text, result_items=items
    )
    return prepared


def call_settle(
    *,
    call_id: UUID | str,
    outcome: str,
    guard: Guard,
    result: Any = None,
    text: str | None = None,
    items: Sequence[str] | None = None,
    process: dict[str, Any] | None = None,
    reason: str | None = None,
    files: Sequence[AttemptFile] = (),
    supervision: dict[str, Any] | None = None,
    resolution: dict[str, Any] | None = None,
    resolution_request_id: str | None = None,
    resolved_by: Any = None,
    permission_refused: bool | None = None,
    extra: dict[str, Any] | None = None,
    close_command_turn: bool = True,
) -> ConversationEvent:
    """Settle one call exactly once; a loser changes nothing and gets ``StaleClaim`` (409).

    ``result`` is the complete result, written as ``result.json`` in the attempt's folder;
    ``text``/``items``/``process`` are what the model projection summarises; ``reason`` the
    message of a terminal outcome.
    """
    call = settling_call_load(call_id)
    if call is None:
        if ConversationEvent.objects.filter(tool_call_id=call_id).exists():
            raise StaleClaim("The call has already settled.")
        raise NotFound("Tool call not found.")
    guard_check(call, guard)
    refused = call.permission_refused if permission_refused is None else permission_refused
    if refused and outcome == "failed":
        outcome = (
            "denied"  # "A call that fails after the user refused its permission reads denied."
        )
    check_settlement(call.state, outcome, permission_refused=refused)
    try:
        prepared = _prepare(
            call,
            outcome=outcome,
            result=result,
            text=text,
            items=items,
            process=process,
            reason=reason,
            files=files,
        )
    except FileExistsDifferent as exc:
        raise StaleClaim("Another settlement of this attempt wrote its result first.") from exc
    payload = _response_payload(
        call,
        outcome=outcome,
        prepared=prepared,
        supervision=supervision,
        resolution=resolution,
        resolution_request_id=resolution_request_id,
        resolved_by=resolved_by,
        extra=extra,
    )
    messages: list[Message] = []
    try:
        with transaction.atomic():
            event = _commit(call, guard, payload, prepared, text, messages, close_command_turn)
            publish_on_commit(messages)
    except IntegrityError as exc:
        # The unique tool_call_id: another settlement won between our guard and insert.
        raise StaleClaim("The call has already settled.") from exc
    logger.info(
        "call settled %s",
        outcome,
        extra={
            "conversation_id": call.conversation_id,
            "tool_call_id": call.id,
            "sequence": event.sequence,
        },
    )
    return event


def _commit(
    call: SettlingCall,
    guard: Guard,
    payload: dict[str, Any],
    prepared: _Prepared,
    text: str | None,
    messages: list[Message],
    close_command_turn: bool,
) -> ConversationEvent:
    """The settlement transaction. Lock order: conversation row (sequence), then call row."""
    now = timezone.now()
    update = status_update(call, status_for_state(payload["outcome"]), finishedAt=iso(now))
    if text is not None:
        update["output"] = bound_tool_output(text)
    if connection.vendor == "postgresql":
        event = _commit_statement(call, guard, payload, prepared, update, now, messages)
    else:
        event = _commit_steps(call, guard, payload, prepared, update, messages)
    call_removed(
        conversation_id=call.conversation_id,
        call_id=call.id,
        turn_id=call.turn_id,
        messages=messages,
    )
    if (
        close_command_turn
        and call.turn_origin == Turn.Origin.COMMAND
        and not ToolCall.objects.filter(turn_id=call.turn_id).exists()
    ):
        turn = Turn.objects.filter(pk=call.turn_id, status=Turn.Status.OPEN).first()
        if turn is not None:
            turn_close(turn=turn, reason="command", messages=messages)
    return event


def _commit_statement(
    call: SettlingCall,
    guard: Guard,
    payload: dict[str, Any],
    prepared: _Prepared,
    update: dict[str, Any],
    now: Any,
    messages: list[Message],
) -> ConversationEvent:
    """PostgreSQL: the whole body in one statement (``settle_statement``)."""
    known = call.activity_rev is not None and call.activity_state is not None
    fold = fold_write(call.activity_rev, call.activity_state, update) if known else None
    row = settle_statement(
        call, guard, payload_text=dumps(payload), now=now, assets=prepared.assets, fold=fold
    )
    event = event_instance(
        pk=row.event_id,
        conversation_id=call.conversation_id,
        sequence=row.sequence,
        type=ConversationEvent.Type.TOOL_CALL_RESPONSE,
        payload=payload,
        turn_id=call.turn_id,
        tool_call_id=call.id,
        message_id=None,
        created_at=now,
    )
    event_published(event, messages)
    if row.activity_written:
        activity_published(call.conversation_id, fold.rev + 1, update, messages)
    elif fold is not None or not known:
        # The activity moved since it was read (or was not read): fold again, row locked.
        activity_apply(tool_call_id=call.id, update=update, messages=messages)
    return event


def _commit_steps(
    call: SettlingCall,
    guard: Guard,
    payload: dict[str, Any],
    prepared: _Prepared,
    update: dict[str, Any],
    messages: list[Message],
) -> ConversationEvent:
    """SQLite (writers already serialised by ``BEGIN IMMEDIATE``): one statement a step."""
    event = event_append(
        conversation_id=call.conversation_id,
        type=ConversationEvent.Type.TOOL_CALL_RESPONSE,
        payload=payload,
        turn_id=call.turn_id,
        tool_call_id=call.id,
        messages=messages,
    )
    call_delete_guarded(call, guard)
    assets_insert(
        prepared.assets,
        conversation_id=call.conversation_id,
        call_id=call.id,
        event_id=event.pk,
        now=event.created_at,
    )
    activity_fold(
        tool_call_id=call.id,
        conversation_id=call.conversation_id,
        known=(call.activity_rev, call.activity_state),
        update=update,
        messages=messages,
    )
    return event


def _response_payload(
    call: SettlingCall,
    *,
    outcome: str,
    prepared: _Prepared,
    supervision: dict[str, Any] | None,
    resolution: dict[str, Any] | None,
    resolution_request_id: str | None,
    resolved_by: Any,
    extra: dict[str, Any] | None,
) -> dict[str, Any]:
    by_name = resolved_by.get_username() if resolved_by is not None else call.resolved_by_name
    payload: dict[str, Any] = {
        "toolCallId": str(call.id),
        "providerCallId": call.provider_call_id,
        "toolName": call.tool_name,
        "arguments": prepared.arguments,
        "origin": call.origin,
        "assistantSequence": call.assistant_sequence,
        "contentIndex": call.content_index,
        "outcome": outcome,
        "modelContent": prepared.model,
        "userProjection": prepared.transcript,
        "supervision": supervision if supervision is not None else call.supervision,
        "interaction": call.interaction or call.resolved_interaction,
        "resolution": resolution if resolution is not None else call.resolution,
        "resolutionRequestId": resolution_request_id or call.resolution_request_id,
        "resolvedBy": by_name,
        "assetIds": [str(a.id) for a in prepared.assets],
        "attempts": call.attempt,
    }
    if extra:
        payload.update(extra)
    return payload
