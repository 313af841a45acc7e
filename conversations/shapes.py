"""Wire shapes of model rows: camelCase dicts, ISO times with milliseconds, string ids."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from projections.tool_input import bound_tool_input
from tools.catalog import tool_spec
from tools.models import AsyncRun

from .models import Asset, Conversation, ConversationEvent, ToolActivity, ToolCall, Turn


def iso(dt: datetime | None) -> str | None:
    """``2026-11-29T18:00:00.000Z``: UTC with milliseconds (docs/architecture.md, "Conventions")."""
    if dt is None:
        return None
    dt = dt.astimezone(UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def sid(value: Any) -> str | None:
    return None if value is None else str(value)


def conversation_wire(conversation: Conversation) -> dict[str, Any]:
    return {
        "id": str(conversation.id),
        "title": conversation.title,
        "workspace": conversation.workspace,
        "lastSequence": conversation.last_sequence,
        "createdAt": iso(conversation.created_at),
    }


def event_wire(event: ConversationEvent) -> dict[str, Any]:
    return {
        "sequence": event.sequence,
        "type": event.type,
        "turnId": sid(event.turn_id),
        "toolCallId": sid(event.tool_call_id),
        "payload": event.payload,
        "createdAt": iso(event.created_at),
    }


def settled_call_wire(event: ConversationEvent) -> dict[str, Any]:
    """A settled call as clients see it: ``{id, outcome, response: event}`` (docs/subsystems/api.md)."""
    return {
        "id": str(event.tool_call_id),
        "outcome": event.payload["outcome"],
        "response": event_wire(event),
    }


def claim_wire(call: ToolCall) -> dict[str, Any] | None:
    claim = getattr(call, "claim", None) if call.state == ToolCall.State.RUNNING else None
    if claim is None:
        return None
    return {
        "worker": claim.worker,
        "generation": claim.generation,
        "acquiredAt": iso(claim.acquired_at),
        "heartbeatAt": iso(claim.heartbeat_at),
        "expiresAt": iso(claim.expires_at),
    }


def call_wire(call: ToolCall, *, bounded: bool = False) -> dict[str, Any]:
    """An unfinished call as clients see it: whole (``GET /tool-calls/{id}``) or ``bounded``
    (``tool_call.changed``, a snapshot's ``calls``), where ``arguments`` is the bounded input
    (≤ 4 KiB of JSON, edit bodies and patches dropped), or null with ``argumentsOmitted: true``
    when nothing fits."""
    wire = {
        "id": str(call.id),
        "conversationId": str(call.conversation_id),
        "turnId": str(call.turn_id),
        "state": call.state,
        "toolName": call.tool_name,
        "providerCallId": call.provider_call_id,
        "contentIndex": call.content_index,
        "origin": call.origin,
        "arguments": call.arguments,
        "interaction": call.interaction,
        "supervision": call.supervision,
        "resolution": call.resolution,
        "claim": claim_wire(call),
        "attempt": call.attempt,
        "generation": call.generation,
        "createdAt": iso(call.created_at),
        "updatedAt": iso(call.updated_at),
    }
    if bounded:
        kind = tool_spec(call.tool_name).kind
        wire["arguments"] = bound_tool_input(call.arguments, tool_name=call.tool_name, kind=kind)
        if wire["arguments"] is None:
            wire["argumentsOmitted"] = True
    return wire


def turn_wire(turn: Turn) -> dict[str, Any]:
    """A turn's small shape (a snapshot's ``openTurn``): ``{id, ordinal, origin, createdAt}``."""
    return {
        "id": str(turn.id),
        "ordinal": turn.ordinal,
        "origin": turn.origin,
        "createdAt": iso(turn.created_at),
    }


def async_run_wire(run: AsyncRun) -> dict[str, Any]:
    """An async run as clients see it (``GET /async-runs/{id}``, a snapshot's ``asyncRuns``)."""
    return {
        "id": str(run.id),
        "conversationId": str(run.conversation_id),
        "toolCallId": str(run.tool_call_id),
        "command": run.command,
        "cwd": run.cwd,
        "status": run.status,
        "exitCode": run.exit_code,
        "signal": run.signal or None,
        "pid": run.pid,
        "startedAt": iso(run.started_at),
        "finishedAt": iso(run.finished_at),
        "noticeSequence": run.notice_sequence,
        "acknowledged": run.acknowledged,
    }


def asset_wire(asset: Asset, absolute_path: str) -> dict[str, Any]:
    return {
        "id": str(asset.id),
        "kind": asset.kind,
        "size": asset.size,
        "sha256": asset.sha256,
        "path": absolute_path,
        "truncated": asset.truncated,
    }


def activity_state(activity: ToolActivity) -> dict[str, Any]:
    """The whole folded state of one call, with its ``rev``."""
    return {**activity.state_json, **activity.payload_json, "rev": activity.rev}
