"""What one posted message may hold: a bounded number of tool calls and an event that fits in
one replay page."""

from __future__ import annotations

from typing import Any

from projections.frames import REPLAY_BUDGET_BYTES
from projections.units import size_words

from ..errors import PayloadTooLarge, ValidationFailed
from ..fields import dumps

# Tool calls one message may ask for: each is created and supervised in the posting request.
MAX_TOOL_CALLS = 128
# An event is measured before its sequence and time exist: with the widest sequence (a 64-bit
# integer), a turn id and a wire time in their places, so the measure never falls short.
_WIDEST_SEQUENCE = 2**63 - 1
_ANY_ID = "00000000-0000-0000-0000-000000000000"
_ANY_TIME = "2026-01-01T00:00:00.000Z"


def message_check(*, message_id: str, event_type: str, content: list[dict[str, Any]]) -> None:
    """Refuse a message asking for more than ``MAX_TOOL_CALLS`` calls (422) or whose event, as
    stored and replayed, would pass the replay page budget (413).

    A replay page always holds its first event whole, so one bigger event would make a page
    bigger than the budget.
    """
    calls = sum(1 for block in content if block.get("type") == "tool_call")
    if calls > MAX_TOOL_CALLS:
        raise ValidationFailed(
            f"A message may hold at most {MAX_TOOL_CALLS} tool_call blocks; this one has {calls}.",
            field="content",
        )
    event = {
        "sequence": _WIDEST_SEQUENCE,
        "type": event_type,
        "turnId": _ANY_ID,
        "toolCallId": None,
        "payload": {"messageId": message_id, "content": content},
        "createdAt": _ANY_TIME,
    }
    size = len(dumps(event).encode("utf-8"))
    if size > REPLAY_BUDGET_BYTES:
        raise PayloadTooLarge(
            f"The message's event would take {size_words(size)} ({size:,} bytes of JSON); an "
            f"event may take at most 512 KiB ({REPLAY_BUDGET_BYTES:,} bytes), the budget of one "
            "replay page.",
            field="content",
        )
