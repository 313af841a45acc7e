"""Recovery: what a crash or an expired claim left behind is moved on
(docs/subsystems/claims_and_recovery.md).

Runs at worker start and every lease period; ``python manage.py recover`` runs it once.

Each row is recovered on its own: an error on one (a path that no longer resolves, a broken
row) is logged with its id and the row is left as it is for the next sweep, except a
``supervising`` call, which has not run and is settled ``failed`` with the error's message.
The sweep goes on with every other row; only the database being unavailable stops it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.db.models import F
from django.utils import timezone

from projections.fold import status_for_state
from projections.units import cut_text
from tools.catalog import tool_spec

from ..errors import DomainError
from ..models import ExecutionClaim, ToolActivity, ToolCall
from ..selectors import call_response_payload
from ..shapes import iso
from ..sql import vendor_sql
from . import publish
from ._in_transaction import call_made_ready
from .activity import activity_fold
from .cancel import INDETERMINATE_REASON
from .interactions import resolution_apply
from .participants import Action, RecoveryParticipant, process_left, recovery_participants
from .runners import call_ready_run, runner_tools
from .settlement import GenerationGuard, call_settle
from .supervision import call_supervise

S = ToolCall.State
logger = logging.getLogger(__name__)


def _expired_claim(call: ToolCall) -> bool:
    """No claim, or one whose lease ran out by the database's clock (never this process's: a
    sweeper whose clock runs ahead must not take live claims)."""
    live = ExecutionClaim.objects.filter(call_id=call.pk, expires_at__gt=vendor_sql().now())
    return not live.exists()


def _requeue(call: ToolCall) -> bool:
    """``running → ready`` with ``attempt + 1``, the claim removed and its holder told to stop
    (the call row, then its claim: the lock order of every writer)."""
    with publish.atomic():
        return call_made_ready(call, revoke=True, attempt=F("attempt") + 1)


def _leave(claim: ExecutionClaim | None, label: str) -> None:
    """Whatever the dead holder started goes on: a worker on its host kills it (the runtime
    records it, ``participants.process_left``)."""
    if claim is not None:
        process_left(
            host=claim.host, pgid=claim.pgid, process_start=claim.process_start, label=label
        )


def _recover_running(call: ToolCall) -> Action | None:
    guard = GenerationGuard(call.generation)
    _leave(ExecutionClaim.objects.filter(call_id=call.pk).first(), f"call {call.pk}")
    if not tool_spec(call.tool_name).replay_safe:
        call_settle(
            call_id=call.pk, outcome="indeterminate", guard=guard, reason=INDETERMINATE_REASON
        )
        return Action(str(call.pk), "settled indeterminate (claim expired)")
    if call.attempt >= settings.TOOLCORE_MAX_ATTEMPTS:
        reason = f"Gave up after {call.attempt} attempts: the claim expired each time."
        call_settle(call_id=call.pk, outcome="failed", guard=guard, reason=reason)
        return Action(str(call.pk), "settled failed (attempts exhausted)")
    next_attempt = call.attempt + 1
    if _requeue(call):
        return Action(str(call.pk), f"back to ready (attempt {next_attempt})")
    return None


def recover_call(*, call_id: UUID | str) -> Action | None:
    """Recover one call: move on what a crash or an expired claim left behind."""
    call = ToolCall.objects.filter(pk=call_id).first()
    if call is None:
        return None
    try:
        if call.state == S.RUNNING and _expired_claim(call):
            return _recover_running(call)
        if call.state in (S.AWAITING_APPROVAL, S.AWAITING_INPUT) and call.resolution is not None:
            result = resolution_apply(call_id=call.pk)
            if result:
                return Action(str(call.pk), f"resolution applied again ({result})")
        elif call.state == S.SUPERVISING:
            result = call_supervise(call_id=call.pk)
            if result:
                return Action(str(call.pk), f"supervised ({result})")
        elif call.state == S.READY and call_ready_run(call_id=call.pk, tool_name=call.tool_name):
            return Action(str(call.pk), "handed to its runner")
    except DomainError:
        return None  # someone else moved it meanwhile: nothing to do
    return None


def _finish_orphan_activity(activity: ToolActivity) -> Action:
    """An activity left unfinished whose call is gone: the outcome of its response, or
    ``cancelled`` when there is none."""
    payload = call_response_payload(activity.tool_call_id)
    status = status_for_state(payload["outcome"] if payload else "cancelled")
    update = {
        "toolCallId": str(activity.tool_call_id),
        "turnId": str(activity.turn_id),
        "status": status,
        "finishedAt": iso(timezone.now()),
    }
    with publish.atomic():
        activity_fold(tool_call_id=activity.tool_call_id, update=update)
    return Action(str(activity.tool_call_id), f"activity finished ({status})")


def _error_words(exc: Exception) -> str:
    detail = str(exc).strip()
    return cut_text(f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__, 300)


def _fail_unsupervised(call_id: Any, exc: Exception) -> Action | None:
    """A ``supervising`` call whose recovery raised: it has not run, so ``failed`` is surely
    true of it; settled so, with the error's message. None when it moved on meanwhile (or
    cannot be settled either: it is then left for the next sweep)."""
    call = ToolCall.objects.filter(pk=call_id, state=S.SUPERVISING).first()
    if call is None:
        return None
    reason = f"The call could not be supervised ({_error_words(exc)})."
    supervision = {"decision": "failed", "reason": reason, "field": None, "rule": None}
    try:
        call_settle(
            call_id=call.pk,
            outcome="failed",
            guard=GenerationGuard(call.generation),
            reason=reason,
            supervision=supervision,
        )
    except (OperationalError, InterfaceError):
        raise
    except Exception:  # noqa: BLE001 - logged; the row waits for the next sweep
        logger.exception("recovery could not settle call %s failed", call_id)
        return None
    return Action(str(call.pk), "settled failed (supervision raised)")


def _on_its_own(
    row: str,
    recover: Callable[[], Action | None],
    *,
    call_id: Any = None,
    on_error: Callable[[Exception], Action | None] | None = None,
) -> Action | None:
    """Recover one row (``row`` names it) so that nothing it raises stops the sweep: the
    error is logged with its id and the row is settled by ``on_error`` or left as it is for
    the next sweep. The database being unavailable is no row's fault: that stops the sweep
    (the next one tries again)."""
    try:
        return recover()
    except (OperationalError, InterfaceError):
        raise
    except Exception as exc:  # noqa: BLE001 - one row's error must not stop the others
        logger.exception(
            "recovery of %s failed", row, extra={"tool_call_id": call_id} if call_id else None
        )
        settled = on_error(exc) if on_error is not None else None
        return settled or Action(
            str(call_id or row), f"left for the next sweep ({_error_words(exc)})"
        )


def _lose_stale(participant: RecoveryParticipant) -> list[Action | None]:
    """The participant's rows whose watcher stopped, each made ``lost`` on its own."""
    return [
        _on_its_own(f"{participant.noun} {row_id}", functools.partial(participant.lose, row_id))
        for row_id in participant.stale()
    ]


def recover_all() -> list[Action]:
    """One sweep over every unfinished call, every activity left unfinished, and every row of
    the runtime whose watcher stopped (its recovery participants: async runs, then launches),
    each row on its own (``_on_its_own``)."""
    found: list[Action | None] = []
    pending = ToolCall.objects.exclude(state=S.READY) | ToolCall.objects.filter(
        state=S.READY, tool_name__in=list(runner_tools())
    )
    for call_id in pending.values_list("id", flat=True):
        found.append(
            _on_its_own(
                f"call {call_id}",
                functools.partial(recover_call, call_id=call_id),
                call_id=call_id,
                on_error=functools.partial(_fail_unsupervised, call_id),
            )
        )
    live = ToolCall.objects.values("id")
    orphans = ToolActivity.objects.filter(is_final=False).exclude(tool_call_id__in=live)
    for activity in orphans.iterator():
        found.append(
            _on_its_own(
                f"activity of call {activity.tool_call_id}",
                functools.partial(_finish_orphan_activity, activity),
                call_id=activity.tool_call_id,
            )
        )
    for participant in recovery_participants():
        found.extend(_lose_stale(participant))
    return [action for action in found if action is not None]
