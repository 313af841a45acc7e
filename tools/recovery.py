"""Recovery: what a crash or an expired claim left behind is moved on (spec lifecycle.md).

Runs at worker start and every lease period; ``python manage.py recover`` runs it once.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from conversations.errors import DomainError
from conversations.models import ConversationEvent, ExecutionClaim, ToolActivity, ToolCall
from conversations.services.activity import activity_apply
from conversations.services.calls import call_moved
from conversations.services.cancel import INDETERMINATE_REASON
from conversations.services.interactions import resolution_apply
from conversations.services.publish import Message, publish_on_commit
from conversations.services.settlement import GenerationGuard, call_settle
from conversations.services.supervision import call_supervise
from conversations.services.transitions import check_move
from conversations.shapes import iso
from projections.fold import status_for_state

from .catalog import tool_spec
from .handlers import INLINE_HANDLERS, run_inline

S = ToolCall.State


@dataclass(frozen=True)
class Action:
    tool_call_id: str
    action: str

    def __str__(self) -> str:
        return f"{self.tool_call_id}: {self.action}"


def _expired_claim(call: ToolCall) -> bool:
    claim = ExecutionClaim.objects.filter(call_id=call.pk).first()
    return claim is None or claim.expires_at <= timezone.now()


def _requeue(call: ToolCall) -> bool:
    check_move(S.RUNNING, S.READY)
    messages: list[Message] = []
    with transaction.atomic():
        # The claim first, then the row: the lock order of settlement and cancel (conversation,
        # claim, call), so a holder settling at this moment waits instead of deadlocking.
        ExecutionClaim.objects.filter(call_id=call.pk, generation=call.generation).delete()
        moved = ToolCall.objects.filter(
            pk=call.pk, state=S.RUNNING, generation=call.generation
        ).update(state=S.READY, attempt=F("attempt") + 1)
        if not moved:
            transaction.set_rollback(True)  # keep the claim of whoever moved the call
            return False
        call_moved(call, messages, "pending")
        publish_on_commit(messages)
    return True


def recover_call(*, call_id: UUID | str, force: bool = False) -> Action | None:
    """Recover one call; ``force`` treats a running call's claim as expired (admin release)."""
    call = ToolCall.objects.filter(pk=call_id).first()
    if call is None:
        return None
    guard = GenerationGuard(call.generation)
    try:
        if call.state == S.RUNNING and (force or _expired_claim(call)):
            spec = tool_spec(call.tool_name)
            if not spec.replay_safe:
                call_settle(
                    call_id=call.pk,
                    outcome="indeterminate",
                    guard=guard,
                    reason=INDETERMINATE_REASON,
                )
                return Action(str(call.pk), "settled indeterminate (claim expired)")
            if call.attempt >= settings.TOOLCORE_MAX_ATTEMPTS:
                reason = f"Gave up after {call.attempt} attempts: the claim expired each time."
                call_settle(call_id=call.pk, outcome="failed", guard=guard, reason=reason)
                return Action(str(call.pk), "settled failed (attempts exhausted)")
            if _requeue(call):
                return Action(str(call.pk), f"back to ready (attempt {call.attempt})")
        elif call.state in (S.AWAITING_APPROVAL, S.AWAITING_INPUT) and call.resolution is not None:
            result = resolution_apply(call_id=call.pk)
            if result:
                return Action(str(call.pk), f"resolution applied again ({result})")
        elif call.state == S.SUPERVISING:
            result = call_supervise(call_id=call.pk)
            if result:
                return Action(str(call.pk), f"supervised ({result})")
        elif (
            call.state == S.READY
            and call.tool_name in INLINE_HANDLERS
            and run_inline(call_id=call.pk, tool_name=call.tool_name)
        ):
            # A handler that needs no process, left ready by a crash: run now.
            return Action(str(call.pk), "handler run (no process needed)")
    except DomainError:
        return None  # someone else moved it meanwhile: nothing to do
    return None


def _finish_orphan_activities() -> list[Action]:
    actions = []
    live = ToolCall.objects.values("id")
    orphans = ToolActivity.objects.filter(is_final=False).exclude(tool_call_id__in=live)
    for activity in orphans.iterator():
        payload = (
            ConversationEvent.objects.filter(tool_call_id=activity.tool_call_id)
            .values_list("payload", flat=True)
            .first()
        )
        outcome = payload["outcome"] if payload else "cancelled"
        messages: list[Message] = []
        with transaction.atomic():
            update = {
                "toolCallId": str(activity.tool_call_id),
                "turnId": str(activity.turn_id),
                "status": status_for_state(outcome),
                "finishedAt": iso(timezone.now()),
            }
            activity_apply(tool_call_id=activity.tool_call_id, update=update, messages=messages)
            publish_on_commit(messages)
        actions.append(
            Action(str(activity.tool_call_id), f"activity finished ({update['status']})")
        )
    return actions


def recover_all() -> list[Action]:
    """One sweep over every unfinished call and every activity left unfinished."""
    actions = []
    pending = ToolCall.objects.exclude(state=S.READY) | ToolCall.objects.filter(
        state=S.READY, tool_name__in=list(INLINE_HANDLERS)
    )
    for call_id in pending.values_list("id", flat=True):
        action = recover_call(call_id=call_id)
        if action is not None:
            actions.append(action)
    actions.extend(_finish_orphan_activities())
    return actions
