"""Execution claims: taking, renewing and releasing the right to run a call (fencing).

Taking a claim is a compare-and-set (``ready`` → ``running``, ``generation + 1``, a new token).
Holding one means: the row is ``running`` and its generation and claim token are the holder's.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import transaction

from .. import metrics
from ..errors import StaleClaim
from ..models import Conversation, ExecutionClaim, ToolCall
from ..sql import vendor_sql
from ..sql.interface import ClaimedRow
from . import publish
from ._in_transaction import call_transition, call_transition_publish
from .transitions import check_move

S = ToolCall.State


@dataclass(frozen=True)
class Claim:
    call_id: UUID
    token: UUID
    generation: int
    expires_at: datetime
    # What running the call needs, read by the claim itself, so the holder need not read it
    # again (``claim_acquire_batch``; None from ``claim_acquire``).
    taken: Taken | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Taken:
    """A claimed call as its holder runs it."""

    conversation_id: UUID
    owner_id: int
    turn_id: UUID
    tool_name: str
    arguments: Any
    workspace: str  # the conversation's, below its owner's root
    # The host that went away with the conversation's workspace, when this is the conversation's
    # first call claimed since recovery released it: it settles failed, not run (``host_lost``).
    lost_host: str = ""


def lease() -> timedelta:
    return timedelta(seconds=settings.TOOLCORE_CLAIM_LEASE)


def _claim_locked(call: ToolCall, worker: str, now: datetime) -> Claim | None:
    """Claim a ``ready`` call the caller's transaction holds locked: ``running``,
    ``generation + 1``, a new token and a lease."""
    generation = call.generation + 1
    ready_at = call.updated_at  # before the move: when it became ready
    claim = ExecutionClaim(
        call=call,
        token=uuid.uuid4(),
        worker=worker,
        generation=generation,
        acquired_at=now,
        heartbeat_at=now,
        expires_at=now + lease(),
    )
    # The row is locked by this transaction: no re-read.
    moved = call_transition(
        call, S.RUNNING, claim=claim, locked=True, generation=generation, updated_at=now
    )
    if not moved:
        return None
    _pickups_counted([(call.tool_name, ready_at, now)])
    return Claim(call.pk, claim.token, generation, claim.expires_at)


def _pickups_counted(picked: list[tuple[str, Any, datetime]]) -> None:
    """``toolcore_pickup_seconds`` of claims taken in this transaction, once it committed."""
    if picked:
        transaction.on_commit(partial(metrics.pickups_observed, picked))


def claim_acquire(*, call_id: UUID | str, worker: str) -> Claim | None:
    """Claim one ``ready`` call for ``worker``; None when it is not ready any more. The lease
    runs from the database's now (``conversations/sql``: one clock for every process)."""
    with publish.atomic():
        call = ToolCall.objects.select_for_update().filter(pk=call_id, state=S.READY).first()
        return None if call is None else _claim_locked(call, worker, vendor_sql().clock())


def claim_acquire_batch(
    *,
    tool_names: Sequence[str],
    worker: str,
    limit: int,
    owner_id: Any = None,
    announce: bool = True,
    token_for: Callable[[UUID, int], UUID] | None = None,
    host: str | None = None,
) -> list[Claim]:
    """Claim up to ``limit`` ready calls of ``tool_names`` (of ``owner_id``'s conversations when
    given), oldest first, in one transaction. On PostgreSQL one statement picks the calls
    (``FOR UPDATE SKIP LOCKED``: concurrent workers take different calls instead of racing for
    the same ones), moves them ``running``, inserts their claims and returns what running them
    needs (``Claim.taken``); SQLite's writers are serialised anyway.

    ``announce``: publish each claimed call and fold it ``in_progress`` in the same transaction,
    as ``claim_acquire`` does. A worker passes False and calls :func:`claim_announce` once its
    process started: the claim alone is on the path from ``ready`` to the process.

    ``token_for(call id, generation)``: the claims' tokens, instead of random ones (the host
    port derives them, ``tools/runtime/host/claim_tokens.py``); written in the same
    transaction, so no other transaction ever sees the random ones.

    Leases run from the database's now, not this process's: a worker whose clock is wrong
    neither keeps a claim past its lease nor sees another's run out early.

    ``host``: the claimer's host when workspaces are pinned (docs/deployment.md, "Pinned
    workspaces"): only calls of conversations pinned to it or to none, and those pinned to it
    in the same transaction. A conversation another host pinned meanwhile (or whose row was
    busy) undoes the whole batch, which is tried again (``PIN_TRIES``)."""
    # The SQL moves each call it picks ready → running in the statement, with no Python per
    # row: that move is checked against the table once, for the batch.
    check_move(S.READY, S.RUNNING)
    for tried in range(1, PIN_TRIES + 1):
        try:
            return _claim_batch(
                tool_names=tool_names,
                worker=worker,
                limit=limit,
                owner_id=owner_id,
                announce=announce,
                token_for=token_for,
                host=host,
            )
        except _PinRefused:
            if tried < PIN_TRIES:
                time.sleep(PIN_RETRY_SECONDS * tried)
    return []


# A batch whose pin was refused (a rare race: two hosts' first calls of one conversation, or
# its row busy) is tried this many times in all, after 20 ms, then 40 ms; then the calls wait
# for the next pickup.
PIN_TRIES = 3
PIN_RETRY_SECONDS = 0.02


class _PinRefused(Exception):
    """A claimed call's conversation could not be pinned to the claimer's host."""


def _claim_batch(
    *,
    tool_names: Sequence[str],
    worker: str,
    limit: int,
    owner_id: Any,
    announce: bool,
    token_for: Callable[[UUID, int], UUID] | None,
    host: str | None,
) -> list[Claim]:
    with publish.atomic():
        claimed = vendor_sql().claim_ready(
            tool_names=list(tool_names),
            worker=worker,
            limit=limit,
            owner_id=owner_id,
            lease_seconds=settings.TOOLCORE_CLAIM_LEASE,
            host=host,
        )
        if host is not None:
            _pinned(claimed, host)
        if token_for is not None and claimed:
            claimed = _tokens_replaced(claimed, token_for)
        _pickups_counted(
            [(row.tool_name, row.ready_at, row.expires_at - lease()) for row in claimed]
        )
        claims = [
            Claim(
                row.call_id,
                row.token,
                row.generation,
                row.expires_at,
                Taken(
                    conversation_id=row.conversation_id,
                    owner_id=row.owner_id,
                    turn_id=row.turn_id,
                    tool_name=row.tool_name,
                    arguments=json.loads(row.arguments),
                    workspace=row.workspace,
                    lost_host=row.lost_host if host is not None else "",
                ),
            )
            for row in claimed
        ]
        if announce and claims:
            _announce(claims)
    return claims


def _pinned(claimed: list[ClaimedRow], host: str) -> None:
    """Pin to ``host`` the conversations of ``claimed`` that were pinned to none; called in the
    claim's transaction. ``_PinRefused`` (rolling it back) when one is pinned elsewhere now or
    its row was busy: its calls must not run here."""
    unpinned = {str(row.conversation_id) for row in claimed if row.host != host}
    if not unpinned:
        return  # the hot path: the conversations were this host's already
    refused = unpinned - vendor_sql().conversations_pin(
        conversation_ids=sorted(unpinned), host=host
    )
    # Another worker of this host may have pinned one and committed since the pick: fine.
    if refused and Conversation.objects.filter(pk__in=refused).exclude(host=host).exists():
        raise _PinRefused


def _tokens_replaced(
    claimed: list[ClaimedRow], token_for: Callable[[UUID, int], UUID]
) -> list[ClaimedRow]:
    """The rows of ``claim_ready`` with the tokens ``token_for`` gives, written in one
    statement (the caller's transaction holds the new claims)."""
    rows = [row._replace(token=token_for(row.call_id, row.generation)) for row in claimed]
    ExecutionClaim.objects.bulk_update(
        [ExecutionClaim(call_id=row.call_id, token=row.token) for row in rows], ["token"]
    )
    return rows


def claim_announce(claims: Sequence[Claim]) -> None:
    """Publish claims taken with ``announce=False`` and fold their calls ``in_progress``, in one
    transaction: those still held. A call settled or taken again meanwhile (a cancel, an expired
    lease) is left as its settler left it."""
    with publish.atomic():
        _announce(claims)


def _announce(claims: Sequence[Claim]) -> None:
    # Lock order as everywhere: the calls (oldest first, as claims pick them), then
    # (call_transition_publish) each one's activity.
    held = {c.call_id: c.generation for c in claims}
    calls = (
        ToolCall.objects.select_for_update(of=("self",))
        .select_related("claim")
        .filter(pk__in=list(held), state=S.RUNNING)
        .order_by("created_at", "id")
    )
    for call in calls:
        if call.generation == held[call.pk]:
            call_transition_publish(call, from_state=S.READY)  # the batch's move


def claim_renew(*, call_id: UUID | str, token: UUID | str, generation: int) -> datetime:
    """Extend the lease of a held claim from the database's now; its new end. ``StaleClaim``
    when it is not held any more."""
    expires = vendor_sql().claim_renew(
        call_id=call_id,
        token=token,
        generation=generation,
        lease_seconds=settings.TOOLCORE_CLAIM_LEASE,
    )
    if expires is None:
        raise StaleClaim("This claim no longer holds the call.")
    return expires


def claim_process_record(
    *, call_id: UUID | str, token: UUID | str, generation: int, host: str, pgid: int, start: int
) -> None:
    """Record the process group a held claim started (host, group id, leader start ticks), so a
    sweep on the same host can kill it if the worker dies; ``StaleClaim`` when not held."""
    recorded = ExecutionClaim.objects.filter(
        call_id=call_id, token=token, generation=generation
    ).update(host=host[:255], pgid=pgid, process_start=start)
    if not recorded:
        raise StaleClaim("This claim no longer holds the call.")
