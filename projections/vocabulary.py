"""The vocabularies every layer shares, each written once: a call's states and outcomes, and the
statuses and kinds of ``tool.updated`` (docs/realtime.md, "Two state vocabularies").

Django-free, the lowest layer, so everything may import it. The core's model choices
(``conversations/models.py``), the API's ``Literal`` types (``conversations/api/schemas/``
``common.py`` and ``cards.py``, ``tools/runtime/host/schemas.py``), the admin's filters and the fold
(``projections/fold.py``) are derived from these tuples; the browser's copies
(``static/toolcore/cards.js``, ``static/toolcore/fold.js``) are checked against them by
``tests/projections/test_vocabulary.py``. The order is the one the API document, the admin and
the docs list them in: lifecycle order.
"""

from __future__ import annotations

# A call's states while it is unfinished (while its row exists).
CALL_STATES = ("supervising", "awaiting_approval", "ready", "running", "awaiting_input")
# How a call settled: its response's outcome.
OUTCOMES = ("completed", "failed", "denied", "cancelled", "indeterminate")
# The outcomes a host settles its running call with (the state machine's from ``running``): a
# refusal is the server's to decide.
HOST_OUTCOMES = tuple(outcome for outcome in OUTCOMES if outcome != "denied")

# ``tool.updated`` statuses: those of a call still going, then the final ones, which never change.
UNFINISHED_TOOL_STATUSES = ("pending", "awaiting_approval", "in_progress", "awaiting_input")
FINAL_TOOL_STATUSES = ("completed", "failed", "declined", "cancelled", "indeterminate")
TOOL_STATUSES = UNFINISHED_TOOL_STATUSES + FINAL_TOOL_STATUSES
# What a host reports through the host tool port: final statuses come only from settling.
HOST_TOOL_STATUSES = ("pending", "in_progress")

# ``tool.updated`` kinds: what sort of work a card shows (docs/projections.md).
TOOL_KINDS = (
    "read",
    "edit",
    "delete",
    "move",
    "search",
    "execute",
    "think",
    "fetch",
    "switch_mode",
    "other",
)
