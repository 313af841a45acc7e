"""Cancelling one call (spec lifecycle.md, "Cancel")."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from ..errors import InvalidTransition, NotFound, StaleClaim
from ..models import ConversationEvent, ToolCall
from .settlement import GenerationGuard, call_settle

INDETERMINATE_REASON = "Stopped; the external effect could not be confirmed."


def cancel_outcome(call: ToolCall, *, stopped_before_effect: bool = False) -> str:
    """``indeterminate`` for a running call (unless its handler confirmed it stopped before any
    effect), ``denied`` where the user refused permission, else ``cancelled``."""
    if call.state == ToolCall.State.RUNNING and not stopped_before_effect:
        return "indeterminate"
    if call.permission_refused:
        return "denied"
    return "cancelled"


def _recorded_outcome(call_id: UUID | str) -> str | None:
    payload = (
        ConversationEvent.objects.filter(tool_call_id=call_id)
        .values_list("payload", flat=True)
        .first()
    )
    return None if payload is None else payload["outcome"]


def call_cancel(
    *, call_id: UUID | str, close_command_turn: bool = True, attempts: int = 3
) -> dict[str, Any]:
    """Settle one unfinished call by the Cancel rules; a settled call answers its outcome.

    Answers ``{outcome, alreadySettled}``. Races with a claim, a move or another settlement are
    retried on a fresh read of the row. ``close_command_turn=False`` keeps a command's turn
    open (turn cancel leaves turns open; turn end closes with its own reason).
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
        if outcome == "denied":
            reason = "Approval denied."
        try:
            call_settle(
                call_id=call.id,
                outcome=outcome,
                guard=GenerationGuard(call.generation),
                reason=reason,
                close_command_turn=close_command_turn,
            )
        except (StaleClaim, InvalidTransition):
            continue
        return {"outcome": outcome, "alreadySettled": False}
    outcome = _recorded_outcome(call_id)
    if outcome is not None:
        return {"outcome": outcome, "alreadySettled": True}
    raise StaleClaim("The call kept changing while it was being cancelled; try again.")
