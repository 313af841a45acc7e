"""The call state machine (docs/subsystems/lifecycle.md, "Call states"): the table of moves
and settlements. Any other transition is refused and changes nothing.

The table is checked by whatever changes a call's state: ``_in_transaction.call_transition``
(every move), ``claims.claim_acquire_batch`` (its SQL's move, once for the batch) and
``settlement.call_settle`` (``settled_outcome``)."""

from __future__ import annotations

from ..errors import InvalidTransition
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

# A call whose permission the user refused reads denied when it fails or is cancelled.
REFUSED_READS_DENIED = frozenset({"failed", "cancelled"})


def check_move(from_state: str, to_state: str) -> None:
    """Nothing when the table allows ``from_state → to_state``; ``InvalidTransition`` else."""
    if (from_state, to_state) not in MOVES:
        raise InvalidTransition(f"A call cannot go from {from_state} to {to_state}.")


def settled_outcome(from_state: str, outcome: str, *, permission_refused: bool) -> str:
    """The outcome a settlement records for ``outcome`` asked from ``from_state``: ``denied``
    for a refused call that fails or is cancelled (from any state), else ``outcome`` itself.
    ``InvalidTransition`` when the call cannot settle so from that state."""
    allowed = SETTLEMENTS.get(outcome)
    if allowed is None:
        raise InvalidTransition(f"Unknown outcome {outcome!r}.")
    if permission_refused and outcome in REFUSED_READS_DENIED | {"denied"}:
        return "denied"
    if from_state not in allowed:
        raise InvalidTransition(f"A call cannot settle {outcome} from {from_state}.")
    return outcome
