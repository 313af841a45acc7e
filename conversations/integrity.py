"""The invariant check: what must hold of the durable state whatever crashed
(docs/reliability.md). ``python manage.py check_integrity`` prints what these find.

Each check is a generator of :class:`Breach` and reads in bounded chunks (``CHUNK`` rows or
names at a time, keyset pagination, aggregates computed by the database), so it runs on a large
database in constant memory. It only reads. The checks are not one snapshot: run on a live
system, a call that moves between two queries may show up as a breach that is gone on the next
run; run it again, or on a quiet system, before acting on one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from django.conf import settings
from django.db.models import Count, Exists, F, Max, Min, OuterRef

from .models import Asset, Conversation, ConversationEvent, ExecutionClaim, ToolCall, Turn
from .orphans import orphan_folders
from .selectors import call_response
from .storage import asset_store

CHUNK = 500
GAPS_SHOWN = 3  # missing or repeated sequences named per broken conversation
RESPONSE = ConversationEvent.Type.TOOL_CALL_RESPONSE
RUNNING = ToolCall.State.RUNNING


@dataclass(frozen=True)
class Breach:
    check: str
    message: str

    def __str__(self) -> str:
        return f"{self.check}: {self.message}"


@dataclass
class Tally:
    """How much one check looked at (for the summary line)."""

    seen: int = 0
    breaches: int = 0


@dataclass
class Report:
    tallies: dict[str, Tally] = field(default_factory=dict)

    @property
    def breaches(self) -> int:
        return sum(t.breaches for t in self.tallies.values())


def _keyset(queryset, *fields: str) -> Iterator[list[tuple]]:
    """``queryset``'s ``fields`` (the first one the primary key) ``CHUNK`` rows at a time, in
    key order, each chunk one query that starts after the last key seen."""
    last = None
    while True:
        page = queryset.order_by("pk")
        if last is not None:
            page = page.filter(pk__gt=last)
        rows = list(page.values_list(*fields)[:CHUNK])
        if not rows:
            return
        yield rows
        last = rows[-1][0]


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def _sequence_faults(conversation_id, last_sequence: int) -> str:
    """What is wrong with one conversation's sequences: the first gaps and repeats (streamed)."""
    faults: list[str] = []
    expected = 1
    sequences = (
        ConversationEvent.objects.filter(conversation_id=conversation_id)
        .order_by("sequence")
        .values_list("sequence", flat=True)
    )
    for sequence in sequences.iterator(chunk_size=2000):
        if sequence < expected:
            faults.append(f"{sequence} repeated")
        elif sequence > expected:
            faults.append(f"{_span(expected, sequence - 1)} missing")
        if len(faults) >= GAPS_SHOWN:
            break
        expected = max(expected, sequence + 1)
    if len(faults) < GAPS_SHOWN and expected <= last_sequence:
        faults.append(f"{_span(expected, last_sequence)} missing (last_sequence = {last_sequence})")
    if len(faults) < GAPS_SHOWN and expected - 1 > last_sequence:
        faults.append(f"events go up to {expected - 1} past last_sequence = {last_sequence}")
    return ", ".join(faults[:GAPS_SHOWN])


def _sequence_counts(conversation_ids: list) -> dict:
    """Per conversation: its events, distinct sequences, lowest and highest (one aggregate)."""
    rows = (
        ConversationEvent.objects.filter(conversation_id__in=conversation_ids)
        .order_by()
        .values("conversation_id")
        .annotate(
            n=Count("id"),
            distinct=Count("sequence", distinct=True),
            lo=Min("sequence"),
            hi=Max("sequence"),
        )
    )
    return {row["conversation_id"]: row for row in rows}


def check_sequences(tally: Tally) -> Iterator[Breach]:
    """Every conversation's events are numbered exactly 1..N, and its ``last_sequence`` is N."""
    for rows in _keyset(Conversation.objects.all(), "pk", "last_sequence"):
        last = dict(rows)
        counts = _sequence_counts(list(last))
        for conversation_id, n in last.items():
            tally.seen += 1
            row = counts.get(conversation_id)
            if row is None:
                clean = n == 0
            else:
                clean = row["n"] == row["distinct"] == n and row["lo"] == 1 and row["hi"] == n
            if not clean:
                faults = _sequence_faults(conversation_id, n)
                yield Breach("sequences", f"conversation {conversation_id}: {faults}")


def check_responses(tally: Tally) -> Iterator[Breach]:
    """At most one ``tool_call_response`` per call, and no settled call still unfinished."""
    twice = (
        ConversationEvent.objects.filter(type=RESPONSE)
        .order_by()
        .values("tool_call_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .values_list("tool_call_id", "n")
    )
    for call_id, n in twice.iterator(chunk_size=CHUNK):
        yield Breach("responses", f"call {call_id}: {n} tool_call_response events")
    settled = call_response(OuterRef("pk"))
    for call_id, state in (
        ToolCall.objects.filter(Exists(settled)).values_list("pk", "state").iterator(CHUNK)
    ):
        yield Breach("responses", f"call {call_id}: settled, yet still unfinished ({state})")
    tally.seen = ConversationEvent.objects.filter(type=RESPONSE).count()


def check_open_calls(tally: Tally) -> Iterator[Breach]:
    """No unfinished call in an ended turn."""
    calls = ToolCall.objects.filter(turn__status=Turn.Status.ENDED).values_list(
        "pk", "state", "turn_id"
    )
    for call_id, state, turn_id in calls.iterator(chunk_size=CHUNK):
        yield Breach("open calls", f"call {call_id}: {state} in ended turn {turn_id}")
    tally.seen = ToolCall.objects.count()


def check_claims(tally: Tally) -> Iterator[Breach]:
    """A claim exists exactly while its call is ``running``, at the call's generation."""
    stray = ExecutionClaim.objects.exclude(call__state=RUNNING).values_list(
        "call_id", "call__state", "worker"
    )
    for call_id, state, worker in stray.iterator(chunk_size=CHUNK):
        yield Breach("claims", f"call {call_id}: claimed by {worker} but {state}, not running")
    unheld = ToolCall.objects.filter(state=RUNNING, claim__isnull=True).values_list("pk")
    for (call_id,) in unheld.iterator(chunk_size=CHUNK):
        yield Breach("claims", f"call {call_id}: running without a claim")
    fenced = (
        ExecutionClaim.objects.filter(call__state=RUNNING)
        .exclude(generation=F("call__generation"))
        .values_list("call_id", "generation", "call__generation")
    )
    for call_id, claimed, generation in fenced.iterator(chunk_size=CHUNK):
        yield Breach(
            "claims", f"call {call_id}: claim of generation {claimed}, call at {generation}"
        )
    tally.seen = ExecutionClaim.objects.count()


def check_assets(tally: Tally, *, hashes: bool = True) -> Iterator[Breach]:
    """Every asset's file is present in the asset store (``DATA_DIR``, or the bucket) with its
    recorded size and SHA-256."""
    store = asset_store()
    for rows in _keyset(Asset.objects.all(), "pk", "path", "size", "sha256"):
        for asset_id, path, size, sha256 in rows:
            tally.seen += 1
            fault = store.fault(path, size, sha256, hashes=hashes)
            if fault is not None:
                yield Breach("assets", f"asset {asset_id} ({path}): {fault}")


def check_orphans(tally: Tally) -> Iterator[Breach]:
    """No attempt folder older than the lease that no settlement links and no unfinished call
    owns (``purge_orphans`` removes exactly those)."""
    cutoff = time.time() - settings.TOOLCORE_CLAIM_LEASE
    for orphan in orphan_folders(older_than=cutoff):
        tally.seen += 1
        yield Breach(
            "orphans",
            f"{orphan}: {orphan.why}; `python manage.py purge_orphans` removes it",
        )


CHECKS: dict[str, Callable[..., Iterator[Breach]]] = {
    "sequences": check_sequences,
    "responses": check_responses,
    "open calls": check_open_calls,
    "claims": check_claims,
    "assets": check_assets,
    "orphans": check_orphans,
}


def integrity_check(*, hashes: bool = True, report: Report | None = None) -> Iterator[Breach]:
    """Every breach of every check, check by check; ``report`` gets the counts as they go.
    ``hashes=False`` checks the assets' sizes only (no file is read)."""
    report = report if report is not None else Report()
    for name, check in CHECKS.items():
        tally = report.tallies[name] = Tally()
        breaches = check(tally, hashes=hashes) if check is check_assets else check(tally)
        for breach in breaches:
            tally.breaches += 1
            yield breach
