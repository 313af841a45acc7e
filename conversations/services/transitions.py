"""The call state machine (spec lifecycle.md, "Call states"). Any other transition is refused."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from ..errors import InvalidTransition, NotFound
from ..models import ToolCall

S = ToolCall.State

# Unfinished → unfinished.
MOVES: frozenset[tuple[str, str]] = frozenset(
    {
        (S.SUPERVISING, S.READY),
        (S.SUPERVISING, S.AWAITING_APPROVAL),
        (S.AWAITING_APPROVAL, S.READY),
        (S.READY, S.RUNNING),
        (S.RUNNING, S.AWAITING_INPUT),
        (S.RUNNING, S.READY),  # recovery only, for a replay-safe tool whose claim expired
    }
)

# Unfinished → settled outcome.
SETTLEMENTS: dict[str, frozenset[str]] = {
    "completed": frozenset({S.RUNNING, S.AWAITING_INPUT}),
    "failed": frozenset({S.SUPERVISING, S.RUNNING, S.AWAITING_INPUT}),
    "denied": frozenset({S.SUPERVISING, S.AWAITING_APPROVAL}),
    "cancelled": frozenset(
        {S.SUPERVISING, S.READY, S.AWAITING_APPROVAL, S.RUNNING, S.AWAITING_INPUT}
    ),
    "indeterminate": frozenset({S.RUNNING}),
}


def check_move(from_state: str, to_state: str) -> None:
    if (from_state, to_state) not in MOVES:
        raise InvalidTransition(f"A call cannot go from {from_state} to {to_state}.")


def check_settlement(from_state: str, outcome: str, *, permission_refused: bool = False) -> None:
    allowed = SETTLEMENTS.get(outcome)
    if allowed is None:
        raise InvalidTransition(f"Unknown outcome {outcome!r}.")
    # A call that fails after the user refused its permission reads denied, from any state.
    if outcome == "denied" and permission_refused:
        return
    if from_state not in allowed:
        raise InvalidTransition(f"A call cannot settle {outcome} from {from_state}.")


def call_move(
    *, call_id: UUID | str, from_state: str, to_state: str, generation: int, **fields: Any
) -> int:
    """Compare-and-set one unfinished call from ``from_state`` at ``generation`` to ``to_state``.

    Returns the number of rows changed (0 when someone else moved or settled the call first).
    """
    check_move(from_state, to_state)
    return ToolCall.objects.filter(pk=call_id, state=from_state, generation=generation).update(
        state=to_state, **fields
    )


def refuse_lost_move(call_id: UUID | str, to_state: str) -> None:
    """Explain a compare-and-set that changed nothing."""
    current = ToolCall.objects.filter(pk=call_id).values_list("state", flat=True).first()
    if current is None:
        raise InvalidTransition("The call has already settled.")
    raise InvalidTransition(f"A call cannot go from {current} to {to_state}.")


def require_call(call_id: UUID | str) -> ToolCall:
    try:
        return ToolCall.objects.get(pk=call_id)
    except (ToolCall.DoesNotExist, ValueError) as exc:
        raise NotFound("Tool call not found.") from exc
