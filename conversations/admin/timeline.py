"""Read-only selectors for the call timeline panel (``includes/call_timeline.html``).

An unfinished call is read from its ``ToolCall`` row (``call_timeline``); a settled call, whose
row is gone, from its ``tool_call_response`` event (``response_timeline``). Both give the same
dict: the turn's events, the claim, interaction and resolution, assets, and the projections.
Nothing here writes.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from django.db.models.fields.json import KT
from django.utils import timezone

from ..models import Asset, ConversationEvent, ExecutionClaim, ToolActivity, ToolCall
from ..shapes import activity_state
from .common import asset_absolute_path, asset_verify_url, change_url, changelist_url, pretty

TURN_EVENTS_MAX = 50  # events of a turn listed in a timeline; the rest via the changelist


def claim_summary(claim: ExecutionClaim | None) -> dict[str, Any] | None:
    if claim is None:
        return None
    left = (claim.expires_at - timezone.now()).total_seconds()
    return {
        "worker": claim.worker,
        "generation": claim.generation,
        "acquired_at": claim.acquired_at,
        "heartbeat_at": claim.heartbeat_at,
        "expires_at": claim.expires_at,
        "lease_left": max(0, int(left)),
        "expired": left <= 0,
        "url": change_url(claim),
    }


def asset_rows(assets: Any) -> list[dict[str, Any]]:
    return [
        {
            "asset": asset,
            "path": asset_absolute_path(asset),
            "url": change_url(asset),
            "verify_url": asset_verify_url(asset),
        }
        for asset in assets
    ]


def turn_events(turn_id: Any) -> tuple[list[dict[str, Any]], bool]:
    """The first ``TURN_EVENTS_MAX`` events of a turn (payloads not loaded) and whether more exist."""
    rows = list(
        ConversationEvent.objects.filter(turn_id=turn_id)
        .defer("payload")
        .annotate(outcome=KT("payload__outcome"))
        .order_by("sequence")[: TURN_EVENTS_MAX + 1]
    )
    listed = [{"event": event, "url": change_url(event)} for event in rows[:TURN_EVENTS_MAX]]
    return listed, len(rows) > TURN_EVENTS_MAX


def wire_state(call_id: Any) -> str | None:
    activity = ToolActivity.objects.filter(tool_call_id=call_id).first()
    return None if activity is None else pretty(activity_state(activity))


def _pretty_or_none(value: Any) -> str | None:
    return None if value is None else pretty(value)


def _message_event(conversation_id: Any, sequence: Any) -> ConversationEvent | None:
    if not isinstance(sequence, int):
        return None
    return ConversationEvent.objects.filter(
        conversation_id=conversation_id, sequence=sequence
    ).first()


def _call_block(event: ConversationEvent | None, index: Any) -> str | None:
    content = (event.payload or {}).get("content") if event is not None else None
    if not isinstance(content, list) or not isinstance(index, int) or not 0 <= index < len(content):
        return None
    return pretty(content[index])


def _timeline_base(
    *, turn_id: Any, assistant: ConversationEvent | None, index: Any, assets: Any
) -> dict[str, Any]:
    events, more = turn_events(turn_id) if turn_id else ([], False)
    return {
        "assistant_event": assistant,
        "assistant_url": change_url(assistant) if assistant else None,
        # Listed on its own only when it is not among the turn's events shown.
        "assistant_apart": assistant is not None
        and all(row["event"].pk != assistant.pk for row in events),
        "assistant_block": _call_block(assistant, index),
        "events": events,
        "events_more": more,
        "events_url": changelist_url(ConversationEvent, turn__id__exact=turn_id)
        if turn_id
        else None,
        "assets": asset_rows(assets),
    }


def call_timeline(call: ToolCall) -> dict[str, Any]:
    """An unfinished call: events, claim, interaction and resolution, assets, wire projection."""
    timeline = _timeline_base(
        turn_id=call.turn_id,
        assistant=call.assistant_event,
        index=call.content_index,
        assets=Asset.objects.filter(tool_call_id=call.pk).order_by("created_at"),
    )
    claim = ExecutionClaim.objects.filter(call_id=call.pk).first()
    timeline.update(
        call_id=call.pk,
        settled=False,
        claim=claim_summary(claim),
        # An empty interaction shows as none, as in ``response_timeline``.
        interaction=_pretty_or_none(call.interaction or call.resolved_interaction or None),
        resolution=_pretty_or_none(call.resolution),
        resolution_request_id=call.resolution_request_id,
        resolved_by=call.resolved_by,
        model=None,
        transcript=None,
        wire=wire_state(call.pk),
    )
    return timeline


def _model_projection(payload: dict[str, Any]) -> list[str]:
    """What the model was given: text blocks as text, any other block as JSON."""
    model = []
    for block in payload.get("modelContent") or []:
        is_text = isinstance(block, dict) and block.get("type") == "text"
        model.append(block.get("text", "") if is_text else pretty(block))
    return model


def _transcript_projection(payload: dict[str, Any]) -> dict[str, Any]:
    """What the user's transcript shows: the argument and result previews."""
    transcript = payload.get("userProjection") or {}
    return {
        "args": transcript.get("argsPreview") or [],
        "result": transcript.get("resultPreview") or [],
        "overflow": transcript.get("previewOverflow"),
    }


def response_timeline(event: ConversationEvent) -> dict[str, Any]:
    """A settled call, from its ``tool_call_response``: the same panel, with its projections."""
    payload = event.payload if isinstance(event.payload, dict) else {}
    assistant = _message_event(event.conversation_id, payload.get("assistantSequence"))
    assets = Asset.objects.filter(Q(event_id=event.pk) | Q(tool_call_id=event.tool_call_id))
    timeline = _timeline_base(
        turn_id=event.turn_id,
        assistant=assistant,
        index=payload.get("contentIndex"),
        assets=assets.order_by("created_at"),
    )
    timeline.update(
        call_id=event.tool_call_id,
        settled=True,
        outcome=payload.get("outcome"),
        attempts=payload.get("attempts"),
        claim=None,
        interaction=_pretty_or_none(payload.get("interaction") or None),
        resolution=_pretty_or_none(payload.get("resolution")),
        resolution_request_id=payload.get("resolutionRequestId"),
        resolved_by=payload.get("resolvedBy"),
        model=_model_projection(payload),
        transcript=_transcript_projection(payload),
        wire=wire_state(event.tool_call_id),
    )
    return timeline
