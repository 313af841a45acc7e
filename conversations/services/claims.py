"""Execution claims: taking, renewing and releasing the right to run a call (fencing).

Taking a claim is a compare-and-set (``ready`` → ``running``, ``generation + 1``, a new token).
Holding one means: the row is ``running`` and its generation and claim token are the holder's.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.utils import timezone

from ..errors import StaleClaim
from ..models import ExecutionClaim, ToolCall
from ..sql import vendor_sql
from . import publish
from .calls import call_moved

S = ToolCall.State


@dataclass(frozen=True)
class Claim:
    call_id: UUID
    token: UUID
    generation: int
    expires_at: datetime
    # The call as claimed (with its conversation), so the holder need not read it again.
    call: ToolCall | None = field(default=None, compare=False, repr=False)


def lease() -> timedelta:
    return timedelta(seconds=settings.TOOLCORE_CLAIM_LEASE)


def _claim_locked(call: ToolCall, worker: str, now: datetime) -> Claim | None:
    """Claim a ``ready`` call the caller's transaction holds locked: ``running``,
    ``generation + 1``, a new token and a lease."""
    generation = call.generation + 1
    changed = ToolCall.objects.filter(pk=call.pk, state=S.READY, generation=call.generation).update(
        state=S.RUNNING, generation=generation, updated_at=now
    )
    if not changed:
        return None
    claim = ExecutionClaim.objects.create(
        call=call,
        token=uuid.uuid4(),
        worker=worker,
        generation=generation,
        acquired_at=now,
        heartbeat_at=now,
        expires_at=now + lease(),
    )
    # The row as just written (no re-read): it is locked by this transaction.
    call.state, call.generation, call.updated_at = S.RUNNING, generation, now
    call.claim = claim
    call_moved(call, "in_progress", fresh=True)
    return Claim(call.pk, claim.token, generation, claim.expires_at, call)


def claim_acquire(*, call_id: UUID | str, worker: str) -> Claim | None:
    """Claim one ``ready`` call for ``worker``; None when it is not ready any more."""
    with publish.atomic():
        call = ToolCall.objects.select_for_update().filter(pk=call_id, state=S.READY).first()
        return None if call is None else _claim_locked(call, worker, timezone.now())


def claim_acquire_batch(
    *, tool_names: Sequence[str], worker: str, limit: int, owner_id: Any = None
) -> list[Claim]:
    """Claim up to ``limit`` ready calls of ``tool_names`` (of ``owner_id``'s conversations when
    given), oldest first, in one transaction. On PostgreSQL one statement picks the calls
    (``FOR UPDATE SKIP LOCKED``: concurrent workers take different calls instead of racing for
    the same ones), moves them ``running`` and inserts their claims; SQLite's writers are
    serialised anyway. Each claimed call is published and folded ``in_progress`` as one claim
    by ``claim_acquire`` is."""
    now = timezone.now()
    expires = now + lease()
    with publish.atomic():
        claimed = vendor_sql().claim_ready(
            tool_names=list(tool_names),
            worker=worker,
            limit=limit,
            owner_id=owner_id,
            now=now,
            expires=expires,
        )
        if not claimed:
            return []
        calls = ToolCall.objects.select_related("conversation").in_bulk([c[0] for c in claimed])
        claims = []
        for call_id, token, generation in claimed:
            call = calls[call_id]
            call.claim = ExecutionClaim(
                call=call,
                token=token,
                worker=worker,
                generation=generation,
                acquired_at=now,
                heartbeat_at=now,
                expires_at=expires,
            )
            call_moved(call, "in_progress", fresh=True)
            claims.append(Claim(call.pk, token, generation, expires, call))
    return claims


def claim_renew(*, call_id: UUID | str, token: UUID | str, generation: int) -> datetime:
    """Extend the lease of a held claim; ``StaleClaim`` when it is not held any more."""
    now = timezone.now()
    expires = now + lease()
    renewed = ExecutionClaim.objects.filter(
        call_id=call_id, token=token, generation=generation, call__state=S.RUNNING
    ).update(heartbeat_at=now, expires_at=expires)
    if not renewed:
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
