"""Settlement: the one function that turns an unfinished call into its response event
(docs/subsystems/settlement.md).

Whatever settles a call (handler, host, cancel, recovery, a resolution, end of turn), it goes
through ``call_settle``: guard, prepare outside the transaction, then one transaction that
appends ``tool_call_response``, links the asset rows, deletes the row and its claim and writes
the final activity; publications follow the commit. The transaction's SQL differs by database
(``conversations.sql``); the flow here does not.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any
from uuid import UUID

from django.db import IntegrityError, transaction
from django.utils import timezone

from projections.model import model_content
from projections.tool_input import bound_tool_input
from projections.transcript import output_tail, project_transcript
from tools.catalog import ToolSpec, tool_spec

from .. import metrics
from ..errors import NotFound, StaleClaim
from ..fields import dumps
from ..models import ConversationEvent, ToolCall, Turn
from ..selectors import call_response
from ..sql import vendor_sql
from ..sql.common import AssetRow, SettlingCall, maybe_uuid, settling_call_load
from ..storage import (
    CAPTURE_MEDIA_TYPE,
    FileExistsDifferent,
    StorageUnavailable,
    asset_store,
    attempt_relative,
    capture_snapshot,
    data_dir,
    relative_to_data,
    sha256_file,
    write_exclusive,
)
from . import publish
from .activity import activity_fold, settled_fold
from .events import event_inserted
from .exits import command_exit_record
from .runners import REVOKED, announce
from .transitions import settled_outcome
from .turns import turn_close

logger = logging.getLogger(__name__)

_AWAITING = frozenset({ToolCall.State.AWAITING_APPROVAL, ToolCall.State.AWAITING_INPUT})
INDETERMINATE_REASON = "Stopped; the external effect could not be confirmed."
# Where an indeterminate settlement fixes what the stopped attempt captured, in its folder.
STOPPED_CAPTURE = "stopped"


@dataclass(frozen=True)
class ClaimGuard:
    """A handler or host settling: holds the claim ``token`` of ``generation`` (fencing)."""

    token: UUID | str
    generation: int


@dataclass(frozen=True)
class GenerationGuard:
    """Cancel, end of turn, recovery, supervision: compare-and-set on the generation (and the
    state) read."""

    generation: int


@dataclass(frozen=True)
class ResolutionGuard(GenerationGuard):
    """The recorded resolution being applied (a deny, an input): a compare-and-set like
    ``GenerationGuard``; the response carries the resolution, which decided its outcome."""


Guard = ClaimGuard | GenerationGuard


@dataclass(frozen=True)
class AttemptFile:
    """A file the attempt wrote (capture, report, image), registered as an asset on settling."""

    path: Path
    kind: str
    media_type: str = "text/plain; charset=utf-8"
    truncated: bool = False
    # The asset's id when the caller names it beforehand (so its complete result can cite it).
    asset_id: UUID | None = None


@dataclass
class _Prepared:
    assets: list[AssetRow] = field(default_factory=list)
    model: list[dict[str, Any]] = field(default_factory=list)
    transcript: dict[str, Any] = field(default_factory=dict)
    arguments: Any = None


def _guard_check(call: SettlingCall, guard: Guard) -> None:
    """The guard on the row as read, before preparing: fail early, write nothing. The write
    checks it again with the row locked."""
    if isinstance(guard, ClaimGuard):
        token = call.claim_token if call.state == ToolCall.State.RUNNING else None
        if token is None or call.generation != guard.generation or token != maybe_uuid(guard.token):
            raise StaleClaim("This claim no longer holds the call.")
    elif call.generation != guard.generation:
        raise StaleClaim("The call changed since it was read.")


def asset_row(
    path: Path,
    kind: str,
    media_type: str,
    truncated: bool = False,
    data: bytes | None = None,
    relative: str | None = None,
    asset_id: UUID | None = None,
) -> AssetRow:
    """An asset row for a file of the attempt; ``data`` when the caller holds its bytes (no
    re-read), else the file is stat'ed and hashed (streamed). ``relative``: its path under
    ``DATA_DIR`` when the caller knows it."""
    return AssetRow(
        id=asset_id or uuid.uuid4(),
        kind=kind,
        path=relative if relative is not None else relative_to_data(path),
        size=len(data) if data is not None else path.stat().st_size,
        sha256=hashlib.sha256(data).hexdigest() if data is not None else sha256_file(path),
        media_type=media_type,
        truncated=truncated,
    )


def _unstored_outcome(
    spec: ToolSpec, outcome: str, reason: str | None, exc: OSError
) -> tuple[str, str | None]:
    """The outcome and reason of a settlement whose files could not be stored. A result that
    was to be ``completed`` is lost: ``failed`` for a replay-safe tool (it had no effect),
    ``indeterminate`` for any other (it ran; what it did is not on record). Other outcomes
    keep their reason: only their files are missing."""
    if outcome != "completed":
        return outcome, reason
    unavailable = isinstance(exc, StorageUnavailable)  # its message says what the store said
    cause = exc.strerror or (str(exc) if unavailable else "") or type(exc).__name__
    where = "the asset storage" if unavailable else "DATA_DIR"
    if spec.replay_safe:
        return "failed", f"The result could not be stored in {where}: {cause}."
    return "indeterminate", (
        f"The result could not be stored in {where} ({cause}): the call ran, but what it did "
        "is not on record."
    )


def _prepare_unstored(
    call: SettlingCall,
    *,
    spec: ToolSpec,
    outcome: str,
    reason: str | None,
    files: Sequence[AttemptFile],
) -> _Prepared:
    """``_prepare`` writing nothing: the files already on disk (a capture) are linked while
    they can be read, else none."""
    bare = {"result": None, "text": None, "items": None, "process": None, "store": False}
    try:
        prepared = _prepare(call, spec=spec, outcome=outcome, reason=reason, files=files, **bare)
        asset_store().upload(prepared.assets)
        return prepared
    except OSError:  # a capture file cannot be read (or stored) either
        return _prepare(call, spec=spec, outcome=outcome, reason=reason, files=(), **bare)


def _stopped_capture(folder: Path) -> list[AttemptFile]:
    """What a stopped attempt captured (cancelled while running, or its worker died), as fixed
    copies: its process may still write for a while (a cancel kills it after the settlement;
    a dead worker's group is killed by the next sweep on its host), and an asset's digest must
    hold forever."""
    return [
        AttemptFile(path, kind, CAPTURE_MEDIA_TYPE, truncated)
        for path, kind, truncated in capture_snapshot(folder, STOPPED_CAPTURE)
    ]


def _captured_reason(reason: str | None, assets: Sequence[AssetRow]) -> str:
    """An indeterminate outcome's reason, saying how much output its process captured before
    the stop and where it is (its ``output`` asset), when it captured any."""
    reason = reason or INDETERMINATE_REASON
    output = next((a for a in assets if a.kind == "output"), None)
    if output is None:
        return reason
    if output.size == 0:
        return f"{reason} No output was captured before the stop."
    amount = "1 byte of output was" if output.size == 1 else f"{output.size:,} bytes of output were"
    return f"{reason} {amount} captured before the stop: {data_dir() / output.path}"


def _prepare(
    call: SettlingCall,
    *,
    spec: ToolSpec,
    outcome: str,
    result: Any,
    text: str | None,
    items: Sequence[str] | None,
    process: dict[str, Any] | None,
    reason: str | None,
    files: Sequence[AttemptFile],
    store: bool = True,
    item_count: int | None = None,
    note: str | None = None,
    page: dict[str, Any] | None = None,
) -> _Prepared:
    """Write and hash the attempt's files; compute the model and transcript projections.
    ``store=False``: write nothing (the arguments are kept bounded only). ``spec``: the call's
    catalog entry."""
    relative = attempt_relative(call.conversation_id, call.id, call.generation)
    folder = data_dir() / relative
    prepared = _Prepared()
    prepared.arguments = bound_tool_input(call.arguments, tool_name=call.tool_name, kind=spec.kind)
    written: list[tuple[str, str, bytes]] = []
    if store and prepared.arguments != call.arguments:
        written.append(("arguments.json", "arguments", dumps(call.arguments).encode()))
    result_path = folder / "result.json"
    if result is not None:
        written.append(("result.json", "payload", dumps(result).encode()))
    for name, kind, data in written:
        path = folder / name
        write_exclusive(path, data)
        prepared.assets.append(
            asset_row(path, kind, "application/json", data=data, relative=f"{relative}/{name}")
        )
    if store and outcome == "indeterminate" and not files:
        files = _stopped_capture(folder)
    for item in files:
        prepared.assets.append(
            asset_row(item.path, item.kind, item.media_type, item.truncated, asset_id=item.asset_id)
        )
    if outcome == "indeterminate":
        reason = _captured_reason(reason, prepared.assets)
    output_path = folder / "output.txt"
    # Labelled by their path in the attempt folder (``images/1.png``), named absolute.
    artifacts = [
        {
            "label": a.path.removeprefix(f"{relative}/"),
            "kind": a.kind,
            "size": a.size,
            "path": str(data_dir() / a.path),
        }
        for a in prepared.assets
        if a.kind in {"report", "image"}
    ]
    prepared.model = model_content(
        tool_name=call.tool_name,
        profile=spec.profile,
        outcome=outcome,
        reason=reason,
        # The ``Resource:`` line: a core tool's subject as written (the command of ``bash``,
        # the path of a path tool); a host tool's is not the server's to name.
        resource=spec.subject_of(call.arguments) if spec.core else None,
        text=text,
        items=items,
        item_count=item_count,
        note=note,
        process=process,
        path=str(output_path if process is not None else result_path),
        artifacts=artifacts,
        page=page,
    )
    args = call.arguments if isinstance(call.arguments, dict) else {}
    lines = None
    if process is not None and call.tool_name == "bash" and output_path.exists():
        # The card shows the output's last lines, read from its end (it may be 16 MiB).
        preview_text, lines = output_tail(output_path)
    elif text is None and items is None and outcome != "completed":
        preview_text = prepared.model[0]["text"]
    else:
        preview_text = text
    prepared.transcript = project_transcript(
        tool_name=call.tool_name,
        arguments=args,
        result_text=preview_text,
        result_items=items,
        result_lines=lines,
        result_count=item_count,
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
    item_count: int | None = None,
    note: str | None = None,
    process: dict[str, Any] | None = None,
    reason: str | None = None,
    files: Sequence[AttemptFile] = (),
    supervision: dict[str, Any] | None = None,
    async_run_id: UUID | None = None,
    started_at: datetime | None = None,
    page: dict[str, Any] | None = None,
) -> ConversationEvent:
    """Settle one call exactly once; a loser changes nothing and gets ``StaleClaim`` (409).

    ``result`` is the complete result, written as ``result.json`` in the attempt's folder;
    ``text``/``items``/``process`` are what the model projection summarises (``item_count``
    and ``note``: an item listing's count when ``items`` holds only the ones its projections
    can show, and the tool's closing note; the item tools write ``result.json`` themselves and
    pass it in ``files``); ``reason`` the
    message of a terminal outcome; ``supervision`` the decision of a call settled while it is
    supervised (everything else settlement reads from the row); ``async_run_id`` the background
    run a ``bash`` call became; ``started_at`` when the run began, for a claim its worker had
    not announced yet (a run that ended sooner): folded with the end, as ``startedAt``;
    ``page`` a log page the model sees through ``project_log_page`` (``async_bash_logs``). A
    command's turn ends with its call.
    """
    call = settling_call_load(call_id)
    if call is None:
        if call_response(call_id).exists():
            raise StaleClaim("The call has already settled.")
        raise NotFound("Tool call not found.")
    _guard_check(call, guard)
    outcome = settled_outcome(call.state, outcome, permission_refused=call.permission_refused)
    spec = tool_spec(call.tool_name)
    try:
        prepared = _prepare(
            call,
            spec=spec,
            outcome=outcome,
            result=result,
            text=text,
            items=items,
            item_count=item_count,
            note=note,
            process=process,
            reason=reason,
            files=files,
            page=page,
        )
        # The files become the asset store's before the transaction commits their rows (a
        # no-op for DATA_DIR, where they already are); a crash between the two leaves objects
        # no row owns, which ``purge_orphans`` removes.
        asset_store().upload(prepared.assets)
    except FileExistsDifferent as exc:
        raise StaleClaim("Another settlement of this attempt wrote its result first.") from exc
    except OSError as exc:
        # DATA_DIR or the asset store refused the attempt's files (a full disk, most often):
        # settle now, without them and saying why, rather than leave the call to its lease and a vaguer recovery.
        outcome, reason = _unstored_outcome(spec, outcome, reason, exc)
        logger.warning(
            "settling without the attempt's files: %s",
            exc,
            extra={"conversation_id": call.conversation_id, "tool_call_id": call.id},
        )
        prepared = _prepare_unstored(call, spec=spec, outcome=outcome, reason=reason, files=files)
    payload = _response_payload(
        call, guard=guard, outcome=outcome, prepared=prepared, supervision=supervision
    )
    if async_run_id is not None:
        payload["asyncRunId"] = str(async_run_id)  # a bash call promoted to the background
    try:
        with publish.atomic():
            event = _commit(call, guard, payload, prepared, text, started_at, process)
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
    started_at: datetime | None = None,
    process: dict[str, Any] | None = None,
) -> ConversationEvent:
    """The settlement transaction's work, inside it. ``process``: how a command that ran to
    its end ended, recorded with the response (``command_exit_record``)."""
    now = timezone.now()
    update, plan = settled_fold(
        call, payload["outcome"], finished_at=now, started_at=started_at, text=text
    )
    held = isinstance(guard, ClaimGuard)
    row = vendor_sql().settlement_write(
        call,
        token=guard.token if held else None,
        generation=guard.generation,
        state=ToolCall.State.RUNNING if held else call.state,
        payload_text=dumps(payload),
        now=now,
        assets=prepared.assets,
        fold=plan,
    )
    event = event_inserted(
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
    if process is not None:
        command_exit_record(
            tool_call_id=call.id,
            conversation_id=call.conversation_id,
            exit_code=process.get("exit_code"),
            signal=process.get("signal"),
            timed_out=bool(process.get("timed_out")),
            timeout_seconds=process.get("timeout_seconds"),
        )
    if plan is not None and row.activity_written:  # the write carried the fold: publish it
        publish.publish_tool_updated(call.conversation_id, plan.rev + 1, update)
    else:  # not read, or moved meanwhile: folded again, with the row locked
        activity_fold(tool_call_id=call.id, update=update)
    publish_call_removed(
        conversation_id=call.conversation_id, call_id=call.id, turn_id=call.turn_id
    )
    if call.state == ToolCall.State.RUNNING and not held:
        announce(REVOKED, call.id)  # its holder stops the run (kills its process)
    if call.turn_origin == Turn.Origin.COMMAND:
        # A command's turn is its one call: it ends when the call settles, whatever settled it.
        turn_close(conversation_id=call.conversation_id, turn_id=call.turn_id, reason="command")
    elif (
        call.turn_origin == Turn.Origin.MCP
        and not ToolCall.objects.filter(turn_id=call.turn_id).exists()
    ):
        # An MCP turn ends with its last unfinished call. The event's append locked the
        # conversation, so no MCP call joins the turn meanwhile (``mcp_call_post`` locks it too).
        turn_close(conversation_id=call.conversation_id, turn_id=call.turn_id, reason="completed")
    # Counted once it committed: a settlement rolled back (with an outer transaction) never ran.
    transaction.on_commit(
        partial(
            metrics.settlement_counted,
            outcome=payload["outcome"],
            tool_name=call.tool_name,
            created_at=call.created_at,
        )
    )
    return event


def publish_call_removed(*, conversation_id: Any, call_id: Any, turn_id: Any) -> None:
    """``tool_call.changed {removed}`` once the call settled, and a wake-up of its turn's
    barrier, after commit."""
    publish.later(
        publish.conversation_group(conversation_id),
        {
            "type": "tool_call.changed",
            "conversationId": str(conversation_id),
            "removed": str(call_id),
        },
    )
    publish.publish_turn_changed(turn_id, call_id)


def _response_payload(
    call: SettlingCall,
    *,
    guard: Guard,
    outcome: str,
    prepared: _Prepared,
    supervision: dict[str, Any] | None,
) -> dict[str, Any]:
    # A resolution recorded on an awaiting call and not being applied lost its race (to a
    # cancel, say): it decided nothing, so the response does not carry it.
    decided = call.state not in _AWAITING or isinstance(guard, ResolutionGuard)
    resolution = call.resolution if decided else None
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
        "resolution": resolution,
        "resolutionRequestId": call.resolution_request_id if resolution is not None else None,
        "resolvedBy": call.resolved_by_name if resolution is not None else None,
        "assetIds": [str(a.id) for a in prepared.assets],
        "attempts": call.attempt,
    }
    if call.turn_origin == Turn.Origin.COMMAND:
        payload["includeInContext"] = call.include_in_context
    return payload
