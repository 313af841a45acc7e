"""Settlement: the one function that turns an unfinished call into its response event.

Whatever settles a call (handler, host, cancel, recovery, approval deny, end of turn), it goes
through ``call_settle``: guard, prepare outside the transaction, then one transaction that
appends ``tool_call_response``, links the asset rows, deletes the row and its claim and writes
the final activity; publications follow the commit.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from projections.fold import status_for_state
from projections.model import model_content
from projections.transcript import project_transcript
from projections.wire import bound_tool_input, bound_tool_output
from tools.catalog import tool_spec

from ..errors import NotFound, StaleClaim
from ..fields import dumps
from ..models import Asset, ConversationEvent, ExecutionClaim, ToolActivity, ToolCall, Turn
from ..shapes import iso
from ..storage import (
    FileExistsDifferent,
    attempt_dir,
    relative_to_data,
    sha256_file,
    write_exclusive,
)
from .activity import activity_fold, status_update
from .calls import call_removed
from .events import event_append
from .publish import Message, publish_on_commit
from .transitions import check_settlement
from .turns import turn_close

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClaimGuard:
    """A handler or host settling: holds the claim ``token`` of ``generation`` (fencing)."""

    token: UUID | str
    generation: int


@dataclass(frozen=True)
class GenerationGuard:
    """Cancel, end of turn, recovery, resolutions: compare-and-set on the generation read."""

    generation: int


Guard = ClaimGuard | GenerationGuard


@dataclass(frozen=True)
class AttemptFile:
    """A file the attempt wrote (capture, report, image), registered as an asset on settling."""

    path: Path
    kind: str
    media_type: str = "text/plain; charset=utf-8"
    truncated: bool = False


@dataclass
class _Prepared:
    assets: list[Asset] = field(default_factory=list)
    model: list[dict[str, Any]] = field(default_factory=list)
    transcript: dict[str, Any] = field(default_factory=dict)
    arguments: Any = None


_USER = get_user_model()
_LOAD_SQL = (
    "SELECT c.id, c.conversation_id, c.turn_id, c.state, c.generation, c.attempt, c.tool_name, "
    "c.arguments, c.provider_call_id, c.content_index, c.origin, c.supervision, c.interaction, "
    "c.resolved_interaction, c.resolution, c.resolution_request_id, c.permission_refused, "
    f"cl.token, t.origin, e.sequence, u.{_USER._meta.get_field(_USER.USERNAME_FIELD).column}, a.rev, a.state_json, a.payload_json "
    f"FROM {ToolCall._meta.db_table} c JOIN {Turn._meta.db_table} t ON t.id = c.turn_id "
    f"LEFT JOIN {ExecutionClaim._meta.db_table} cl ON cl.call_id = c.id "
    f"LEFT JOIN {ConversationEvent._meta.db_table} e ON e.id = c.assistant_event_id "
    f"LEFT JOIN {_USER._meta.db_table} u ON u.{_USER._meta.pk.column} = c.resolved_by_id "
    f"LEFT JOIN {ToolActivity._meta.db_table} a ON a.tool_call_id = c.id "
    "WHERE c.id = %s"
)


def _json_column(value: Any) -> Any:
    """A JSON column read by a cursor: text on SQLite, already decoded by psycopg."""
    return json.loads(value) if isinstance(value, str) else value


def _uuid_column(value: Any) -> UUID | None:
    return None if value is None else UUID(str(value))


@dataclass
class _Call:
    """What settlement needs of an unfinished call, its claim, turn, message, resolver and
    activity, read in one statement (a 4-way ``select_related`` costs ~10x more here)."""

    id: UUID
    conversation_id: UUID
    turn_id: UUID
    state: str
    generation: int
    attempt: int
    tool_name: str
    arguments: Any
    provider_call_id: str
    content_index: int | None
    origin: str
    supervision: Any
    interaction: Any
    resolved_interaction: Any
    resolution: Any
    resolution_request_id: str | None
    permission_refused: bool
    claim_token: UUID | None
    turn_origin: str
    assistant_sequence: int | None
    resolved_by_name: str | None
    activity_rev: int | None
    activity_state: dict[str, Any] | None


def _load_call(call_id: Any) -> _Call | None:
    try:
        pk = ToolCall._meta.pk.get_db_prep_value(call_id, connection)
    except (ValueError, TypeError):
        return None
    with connection.cursor() as cursor:
        cursor.execute(_LOAD_SQL, [pk])
        row = cursor.fetchone()
    if row is None:
        return None
    (cid, conversation_id, turn_id, state, generation, attempt, tool_name, arguments,
     provider_call_id, content_index, origin, supervision, interaction, resolved_interaction,
     resolution, request_id, refused, token, turn_origin, sequence, by_name, rev, small,
     payload) = row  # fmt: skip
    return _Call(
        id=UUID(str(cid)),
        conversation_id=UUID(str(conversation_id)),
        turn_id=UUID(str(turn_id)),
        state=state,
        generation=generation,
        attempt=attempt,
        tool_name=tool_name,
        arguments=_json_column(arguments),
        provider_call_id=provider_call_id,
        content_index=content_index,
        origin=origin,
        supervision=_json_column(supervision),
        interaction=_json_column(interaction),
        resolved_interaction=_json_column(resolved_interaction),
        resolution=_json_column(resolution),
        resolution_request_id=request_id,
        permission_refused=bool(refused),
        claim_token=_uuid_column(token),
        turn_origin=turn_origin,
        assistant_sequence=sequence,
        resolved_by_name=by_name,
        activity_rev=rev,
        activity_state=None if rev is None else {**_json_column(small), **_json_column(payload)},
    )


def _maybe_uuid(value: Any) -> UUID | None:
    try:
        return UUID(str(value))
    except ValueError:
        return None


def _check_guard(call: _Call, guard: Guard) -> None:
    """The guard on a row read without a lock (before preparing): fail early, write nothing."""
    token = call.claim_token if call.state == ToolCall.State.RUNNING else None
    if isinstance(guard, ClaimGuard):
        if (
            token is None
            or call.generation != guard.generation
            or token != _maybe_uuid(guard.token)
        ):
            raise StaleClaim("This claim no longer holds the call.")
    elif call.generation != guard.generation:
        raise StaleClaim("The call changed since it was read.")


_CALLS = ToolCall._meta.db_table
_CLAIMS = ExecutionClaim._meta.db_table


def _delete_guarded(call: _Call, guard: Guard) -> None:
    """Delete the row (and its claim) only if the guard still holds: the compare-and-set of
    settlement. On PostgreSQL the DELETE takes the row lock; a loser finds no row."""
    pk = ToolCall._meta.pk.get_db_prep_value(call.id, connection)
    with connection.cursor() as cursor:
        if isinstance(guard, ClaimGuard):
            token = ExecutionClaim._meta.get_field("token").get_db_prep_value(
                guard.token, connection
            )
            cursor.execute(
                f"DELETE FROM {_CLAIMS} WHERE call_id = %s AND token = %s AND generation = %s",
                [pk, token, guard.generation],
            )
            if cursor.rowcount != 1:
                raise StaleClaim("This claim no longer holds the call.")
            cursor.execute(
                f"DELETE FROM {_CALLS} WHERE id = %s AND generation = %s AND state = %s",
                [pk, guard.generation, ToolCall.State.RUNNING],
            )
        else:
            cursor.execute(f"DELETE FROM {_CLAIMS} WHERE call_id = %s", [pk])
            cursor.execute(
                f"DELETE FROM {_CALLS} WHERE id = %s AND generation = %s", [pk, guard.generation]
            )
        if cursor.rowcount != 1:
            raise StaleClaim("The call changed or settled meanwhile.")


def _resource(call: _Call) -> str | None:
    spec = tool_spec(call.tool_name)
    args = call.arguments if isinstance(call.arguments, dict) else {}
    if spec.subject == "command":
        return args.get("command") if isinstance(args.get("command"), str) else None
    if spec.is_path_tool:
        return args.get("path") if isinstance(args.get("path"), str) else None
    return None


def _asset(call: _Call, path: Path, kind: str, media_type: str, truncated: bool) -> Asset:
    return Asset(
        id=uuid.uuid4(),
        conversation_id=call.conversation_id,
        tool_call_id=call.id,
        kind=kind,
        path=relative_to_data(path),
        size=path.stat().st_size,
        sha256=sha256_file(path),
        media_type=media_type,
        truncated=truncated,
    )


def _prepare(
    call: _Call,
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
    folder = attempt_dir(call.conversation_id, call.id, call.generation)
    prepared = _Prepared()
    prepared.arguments = bound_tool_input(call.arguments, tool_name=call.tool_name, kind=spec.kind)
    written: list[tuple[Path, str, str]] = []
    if prepared.arguments != call.arguments:
        path = folder / "arguments.json"
        write_exclusive(path, dumps(call.arguments).encode("utf-8"))
        written.append((path, "arguments", "application/json"))
    result_path = folder / "result.json"
    if result is not None:
        write_exclusive(result_path, dumps(result).encode("utf-8"))
        written.append((result_path, "payload", "application/json"))
    for path, kind, media_type in written:
        prepared.assets.append(_asset(call, path, kind, media_type, False))
    for item in files:
        prepared.assets.append(_asset(call, item.path, item.kind, item.media_type, item.truncated))
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
) -> ConversationEvent:
    """Settle one call exactly once; a loser changes nothing and gets ``StaleClaim`` (409).

    ``result`` is the complete result, written as ``result.json`` in the attempt's folder;
    ``text``/``items``/``process`` are what the model projection summarises; ``reason`` the
    message of a terminal outcome.
    """
    call = _load_call(call_id)
    if call is None:
        if ConversationEvent.objects.filter(tool_call_id=call_id).exists():
            raise StaleClaim("The call has already settled.")
        raise NotFound("Tool call not found.")
    _check_guard(call, guard)
    refused = call.permission_refused if permission_refused is None else permission_refused
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
            event = _commit(call, guard, payload, prepared, text, messages)
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
    call: _Call,
    guard: Guard,
    payload: dict[str, Any],
    prepared: _Prepared,
    text: str | None,
    messages: list[Message],
) -> ConversationEvent:
    """The settlement transaction. Lock order: conversation row (sequence), then call row."""
    event = event_append(
        conversation_id=call.conversation_id,
        type=ConversationEvent.Type.TOOL_CALL_RESPONSE,
        payload=payload,
        turn_id=call.turn_id,
        tool_call_id=call.id,
        messages=messages,
    )
    _delete_guarded(call, guard)
    if prepared.assets:
        for asset in prepared.assets:
            asset.event = event
        Asset.objects.bulk_create(prepared.assets)
    status = status_for_state(payload["outcome"])
    update = status_update(call, status, finishedAt=iso(timezone.now()))
    if text is not None:
        update["output"] = bound_tool_output(text)
    activity_fold(
        tool_call_id=call.id,
        conversation_id=call.conversation_id,
        known=(call.activity_rev, call.activity_state),
        update=update,
        messages=messages,
    )
    call_removed(
        conversation_id=call.conversation_id,
        call_id=call.id,
        turn_id=call.turn_id,
        messages=messages,
    )
    if (
        call.turn_origin == Turn.Origin.COMMAND
        and not ToolCall.objects.filter(turn_id=call.turn_id).exists()
    ):
        turn = Turn.objects.filter(pk=call.turn_id, status=Turn.Status.OPEN).first()
        if turn is not None:
            turn_close(turn=turn, reason="command", messages=messages)
    return event


def _response_payload(
    call: _Call,
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
    if prepared.arguments is None:
        payload["argumentsOmitted"] = True
    if extra:
        payload.update(extra)
    return payload
