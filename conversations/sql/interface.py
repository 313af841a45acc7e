"""What every database's SQL module offers: ``VendorSQL``, and the rows its functions return.

``postgresql.py`` and ``sqlite.py`` each define every member of ``VendorSQL`` as a module
function with the same parameters (``tests/conversations/test_vendor_sql.py`` checks both, and
that neither offers a public function this protocol lacks), the way Django's ``SessionBase``
fixes what every session backend offers. ``vendor_sql()`` returns one of them, typed as this
protocol: a caller reads here what it may call and what it gets back, not in either module.

The rows are ``NamedTuple``s, not dataclasses: each is built straight from the cursor's tuple
(``Row._make(row)``: one tuple, no ``__init__`` and no per-row ``__dict__``) and read by name,
so the order of a ``SELECT`` list lives in one place; a replay's rows stay the cursor's own
tuples (``ReplayRow`` says why). The values built once a settlement (``SettlingCall``,
``SettledRow``, ``FoldWrite``, ``AssetRow``, in ``common.py``) are dataclasses: built by
keyword, never unpacked.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol
from uuid import UUID

from .common import AssetRow, FoldWrite, SettledRow, SettlingCall


class InsertedEvent(NamedTuple):
    """An event ``event_insert`` appended."""

    event_id: int
    sequence: int


# One event of a replay page, as stored (no model instance, no JSON decoding), in this order:
# ``(sequence, type, turn id, call id, payload, created at)``; the ids as the database gives a
# UUID as text (canonical, or bare hex on SQLite), the payload the stored JSON text, the time
# ISO 8601 in UTC to the millisecond (``…T…Z``), formatted by the database. The cursor's own
# exact tuple, the one row type here that is not a NamedTuple: a replay reads up to 100,000 of
# them, and CPython's collector stops tracking an exact tuple of strings and numbers (and
# reuses freed ones) but never a subclass's instance. Built with ``_make``, the rows cost
# ~0.5 µs an event more (pages of 1,000 on SQLite; over half of it in the collector), against
# ~5 µs an event for a whole replay (docs/performance.md).
ReplayRow = tuple[int, str, str | None, str | None, str, str]


class ReplayPage(NamedTuple):
    """The conversation's head and the events read after a sequence, oldest first."""

    last_sequence: int
    events: list[ReplayRow]


class ClaimedRow(NamedTuple):
    """A call ``claim_ready`` claimed: its claim, and what running it needs."""

    call_id: UUID
    token: UUID
    generation: int
    expires_at: datetime  # the lease's end, by the database's clock
    conversation_id: UUID
    turn_id: UUID
    tool_name: str
    arguments: str  # JSON text
    owner_id: int
    workspace: str
    # When it became ready (its row's last change before the claim; naive UTC from SQLite):
    # toolcore_pickup_seconds (conversations/metrics.py).
    ready_at: datetime
    # The conversation's pin as the claim read it (``Conversation.host``, ``lost_host``).
    host: str
    lost_host: str


class VendorSQL(Protocol):
    """The SQL written by hand for one database; every function runs on the default connection
    and, where it writes, inside the caller's transaction."""

    def event_insert(
        self,
        *,
        conversation_id: Any,
        type: str,
        payload_text: str,
        turn_id: Any,
        tool_call_id: Any,
        message_id: str | None,
        now: Any,
    ) -> InsertedEvent | None:
        """Take the conversation's next sequence (locking its row) and insert the event with
        it; None when the conversation does not exist (nothing written)."""
        ...

    def settlement_write(
        self,
        call: SettlingCall,
        *,
        token: Any,
        generation: int,
        state: str,
        payload_text: str,
        now: Any,
        assets: list[AssetRow],
        fold: FoldWrite | None,
    ) -> SettledRow:
        """The settlement transaction's body: delete the call row (only in ``state`` at
        ``generation`` and, when ``token`` is given, while that claim holds it) and its claim,
        append the ``tool_call_response`` with the conversation's next sequence, insert its
        assets, compare-and-set the activity with ``fold``. ``StaleClaim`` when the guard
        refused or the conversation is gone, with nothing written and no sequence taken."""
        ...

    def replay_rows(
        self, *, conversation_id: Any, owner_id: Any, after: int, limit: int
    ) -> ReplayPage | None:
        """The head and up to ``limit`` events after ``after``, oldest first; None when
        ``owner_id`` has no such conversation."""
        ...

    def claim_ready(
        self,
        *,
        tool_names: list[str],
        worker: str,
        limit: int,
        owner_id: Any,
        lease_seconds: float,
        host: str | None = None,
    ) -> list[ClaimedRow]:
        """Claim up to ``limit`` ready calls of ``tool_names`` (of ``owner_id``'s conversations
        when it is not None), oldest first: each moves ``running`` with ``generation + 1`` and
        gets a claim with a new token and a lease of ``lease_seconds`` from the database's now.
        A call another claimer holds is passed over, never claimed twice. With ``host``, only
        calls of conversations pinned to it or to none (``Conversation.host``); pinning the
        latter is :meth:`conversations_pin`'s, in the same transaction."""
        ...

    def conversations_pin(self, *, conversation_ids: list[Any], host: str) -> set[str]:
        """Pin the unpinned conversations of ``conversation_ids`` to ``host`` (``lost_host``
        cleared); the ids (as ``str(UUID)``) pinned. One whose row another transaction holds
        is passed over, not waited for: the claimer holds call rows, and every other writer
        locks the conversation before its calls."""
        ...

    def claim_renew(
        self, *, call_id: Any, token: Any, generation: int, lease_seconds: float
    ) -> datetime | None:
        """Extend a held claim's lease to ``lease_seconds`` from the database's now; its new
        end, or None when the claim (this token and generation, its call ``running``) does not
        hold any more."""
        ...

    def repeatable_read(self) -> None:
        """Make the transaction just begun read one snapshot: every later query of it sees the
        commits its first query saw, and no other. Its first statement."""
        ...

    def notify(self, channel: str, payload: str) -> None:
        """Tell the processes listening on ``channel``, when the current transaction commits
        (at once outside one)."""
        ...

    # Leases and heartbeats are written and judged by the database's clock, the one clock every
    # process of the database shares.

    def now(self, offset: timedelta = timedelta(0)) -> Any:
        """The database's now (plus ``offset``) for a filter or an update: an expression the
        database evaluates, or a value where the database's clock is this process's."""
        ...

    def clock(self) -> datetime:
        """The database's now, read (inside a transaction: as of its current statement)."""
        ...
