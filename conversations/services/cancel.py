"""The Cancel rules: cancelling one call, a turn's open calls, and ending a turn
(docs/subsystems/lifecycle.md, "Cancel" and "Ending a turn")."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from ..errors import InvalidTransition, NotFound, StaleClaim
from ..models import ToolCall, Turn
from ..selectors import call_response_payload
from . import publish
from .events import conversation_lock
from .settlement import INDETERMINATE_REASON, GenerationGuard, call_settle
from .turns import turn_close

APPROVAL_DENIED = "Approval denied."


def cancel_outcome(call: ToolCall, *, stopped_before_effect: bool = False) -> str:
    """``indeterminate`` for a running call (unless its handler confirmed it stopped before any
    effect), else ``cancelled`` (which settlement records as ``denied`` for a refused call)."""
    if call.state == ToolCall.State.RUNNING and not stopped_before_effect:
        return "indeterminate"
    return "cancelled"


def _recorded_outcome(call_id: UUID | str) -> str | None:
    payload = call_response_payload(call_id)
    return None if payload is None else payload["outcome"]


def call_cancel(*, call_id: UUID | str, attempts: int = 3) -> dict[str, Any]:
    """Settle one unfinished call by the Cancel rules; a settled call answers its outcome.

    Answers ``{outcome, alreadySettled}``. Races with a claim, a move or another settlement are
    retried on a fresh read of the row. A command's turn ends with its call (settlement).
    """
    for _ in range(attempts):
        call = ToolCall.objects.filter(pk=call_id).first()
        if call is None:
            outcome = _recorded_outcome(call_id)
            if outcome is None:
                raise NotFound("Tool call not found.")
            return {"outcome": outcome, "alreadySettled": True}
        outcome = cancel_outcome(call)
        reason = INDETERMINATE_REASON if outcome == "indeterminate" else None
        if call.permission_refused:
            reason = APPROVAL_DENIED
        try:
            event = call_settle(
                call_id=call.id,
                outcome=outcome,
                guard=GenerationGuard(call.generation),
                reason=reason,
            )
        except (StaleClaim, InvalidTransition):
            continue
        return {"outcome": event.payload["outcome"], "alreadySettled": False}
    outcome = _recorded_outcome(call_id)
    if outcome is not None:
        return {"outcome": outcome, "alreadySettled": True}
    raise StaleClaim("The call kept changing while it was being cancelled; try again.")


def _turn_require(conversation_id: UUID | str, turn_id: UUID | str) -> Turn:
    try:
        return Turn.objects.get(pk=turn_id, conversation_id=conversation_id)
    except (Turn.DoesNotExist, ValueError) as exc:
        raise NotFound("Turn not found.") from exc


def turn_cancel(*, conversation_id: UUID | str, turn_id: UUID | str) -> dict[str, Any]:
    """Settle every open call of the turn by the Cancel rules. The turn stays open, except a
    command's turn, which ends with its call (``reason: command``)."""
    turn = _turn_require(conversation_id, turn_id)
    results = []
    for call_id in (
        ToolCall.objects.filter(turn_id=turn.pk).order_by("created_at").values_list("id", flat=True)
    ):
        answer = call_cancel(call_id=call_id)
        results.append({"toolCallId": str(call_id), "outcome": answer["outcome"]})
    return {"turnId": str(turn.id), "results": results}


def turn_end(
    *, conversation_id: UUID | str, turn_id: UUID | str, reason: str = "completed"
) -> dict[str, Any]:
    """Settle what is open (Cancel rules), then append one ``turn_ended``; again: nothing."""
    turn = _turn_require(conversation_id, turn_id)
    while turn.status == Turn.Status.OPEN:
        turn_cancel(conversation_id=conversation_id, turn_id=turn_id)
        with publish.atomic():
            conversation_lock(conversation_id)
            if ToolCall.objects.filter(turn_id=turn.pk).exists():
                continue  # a call appeared meanwhile: cancel it too
            turn_close(conversation_id=conversation_id, turn_id=turn.pk, reason=reason)
        turn.refresh_from_db(fields=["status"])
    return {"turnId": str(turn.id), "status": "ended"}
