"""What support staff do to calls, each through one service, each reported with a message
that names the call: approve and deny (``call_resolve``), cancel (``call_cancel``), release an
expired claim and recovery (``recover_call``), the recovery sweep (``recover_all``).

The call page's buttons (``CALL_OPERATIONS``) work on one call; the change lists' actions on a
selection. None of them writes a row itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any
from uuid import uuid4

from django.contrib import admin, messages
from django.http import HttpRequest

from ..errors import DomainError
from ..models import ExecutionClaim, ToolCall, json_text
from ..selectors import call_response
from ..services.cancel import call_cancel
from ..services.interactions import call_resolve
from ..services.recovery import recover_all, recover_call
from .timeline import claim_summary

REPORT_MAX_LINES = 20  # lines of a report shown in one message

ADMIN_REQUEST_PREFIX = "admin-"  # the requestId of an approval made here: admin-<uuid4>


def call_name(call_id: Any) -> str:
    """``Call <id> (<tool>)``: how every message names the call it reports on."""
    tool = ToolCall.objects.filter(pk=call_id).values_list("tool_name", flat=True).first()
    if tool is None:
        tool = (
            call_response(call_id)
            .annotate(tool=json_text("payload__toolName"))
            .values_list("tool", flat=True)
            .first()
        )
    return f"Call {call_id} ({tool})" if tool else f"Call {call_id}"


def call_status(call_id: Any) -> str:
    """``now <state>`` while unfinished, ``settled <outcome>`` after."""
    state = ToolCall.objects.filter(pk=call_id).values_list("state", flat=True).first()
    if state is not None:
        return f"now {state}"
    outcome = (
        call_response(call_id)
        .annotate(outcome=json_text("payload__outcome"))
        .values_list("outcome", flat=True)
        .first()
    )
    return f"settled {outcome}" if outcome else "gone"


def _lines(items: list[str]) -> str:
    shown = items[:REPORT_MAX_LINES]
    if len(items) > REPORT_MAX_LINES:
        shown.append(f"… and {len(items) - REPORT_MAX_LINES} more")
    return "; ".join(shown)


# --- One call: the call page's buttons ---------------------------------------------------------


def _resolve(
    modeladmin: admin.ModelAdmin, request: HttpRequest, call_id: Any, decision: str
) -> None:
    """An approval decided by the staff member: recorded as ``resolvedBy`` like any other, with
    a fresh ``requestId`` (``admin-<uuid4>``) as its idempotency key. Approving a tool that runs
    programs needs ``tools.run_commands``; the service refuses it otherwise (``Forbidden``)."""
    name = call_name(call_id)
    verb = "approved" if decision == "allow" else "denied"
    try:
        call_resolve(
            call_id=call_id,
            user=request.user,
            request_id=f"{ADMIN_REQUEST_PREFIX}{uuid4()}",
            # What POST /tool-calls/{id}/resolution records for an approval without persist.
            resolution={"kind": "approval", "decision": decision, "persist": False},
        )
    except DomainError as exc:
        modeladmin.message_user(request, f"{name}: not {verb}: {exc.message}", messages.ERROR)
        return
    modeladmin.message_user(
        request,
        f"{name}: {verb} by {request.user.get_username()}; {call_status(call_id)}.",
        messages.SUCCESS,
    )


def approve(modeladmin: admin.ModelAdmin, request: HttpRequest, call_id: Any) -> None:
    _resolve(modeladmin, request, call_id, "allow")


def deny(modeladmin: admin.ModelAdmin, request: HttpRequest, call_id: Any) -> None:
    _resolve(modeladmin, request, call_id, "deny")


def cancel(modeladmin: admin.ModelAdmin, request: HttpRequest, call_id: Any) -> None:
    name = call_name(call_id)
    try:
        answer = call_cancel(call_id=call_id)
    except DomainError as exc:
        modeladmin.message_user(request, f"{name}: not cancelled: {exc.message}", messages.ERROR)
        return
    if answer["alreadySettled"]:
        modeladmin.message_user(
            request, f"{name}: already settled {answer['outcome']}.", messages.WARNING
        )
    else:
        modeladmin.message_user(
            request, f"{name}: cancelled; settled {answer['outcome']}.", messages.SUCCESS
        )


def release(modeladmin: admin.ModelAdmin, request: HttpRequest, call_id: Any) -> None:
    release_claims(modeladmin, request, [call_id])


def recover(modeladmin: admin.ModelAdmin, request: HttpRequest, call_id: Any) -> None:
    name = call_name(call_id)
    action = recover_call(call_id=call_id)
    if action is None:
        modeladmin.message_user(
            request, f"{name}: nothing to recover ({call_status(call_id)}).", messages.WARNING
        )
    else:
        modeladmin.message_user(request, f"{name}: {action.action}.", messages.SUCCESS)


CALL_OPERATIONS: dict[str, Callable[[admin.ModelAdmin, HttpRequest, Any], None]] = {
    "approve": approve,
    "deny": deny,
    "cancel": cancel,
    "release": release,
    "recover": recover,
}


# --- Selections: the change lists' actions -----------------------------------------------------


def report_recovery(modeladmin: admin.ModelAdmin, request: HttpRequest, actions: list[Any]) -> None:
    if not actions:
        modeladmin.message_user(request, "Recovery sweep: nothing to do.", messages.INFO)
        return
    lines = _lines([str(action) for action in actions])
    modeladmin.message_user(
        request, f"Recovery sweep: {len(actions)} action(s): {lines}", messages.SUCCESS
    )


def sweep(modeladmin: admin.ModelAdmin, request: HttpRequest) -> None:
    report_recovery(modeladmin, request, recover_all())


def release_claims(modeladmin: admin.ModelAdmin, request: HttpRequest, call_ids: list[Any]) -> None:
    """Recovery for each call whose claim expired. A live claim is left to its worker, which
    still renews it: releasing it would throw away a result that is on its way."""
    done, live, idle = [], [], []
    for call_id in call_ids:
        action = recover_call(call_id=call_id)
        if action is not None:
            done.append(f"{call_name(call_id)}: {action.action}")
            continue
        claim = ExecutionClaim.objects.filter(call_id=call_id).first()
        summary = claim_summary(claim)
        if summary is not None and not summary["expired"]:
            live.append(f"{call_name(call_id)} ({summary['lease_left']} s left, {claim.worker})")
        else:
            idle.append(f"{call_name(call_id)} ({call_status(call_id)})")
    if done:
        modeladmin.message_user(request, "Released: " + _lines(done), messages.SUCCESS)
    if live:
        modeladmin.message_user(
            request,
            "Not released, the claim is live (its worker renews it): " + _lines(live),
            messages.WARNING,
        )
    if idle:
        modeladmin.message_user(
            request,
            "Nothing to release (no expired claim): " + _lines(idle),
            messages.WARNING,
        )


def cancel_and_report(modeladmin: admin.ModelAdmin, request: HttpRequest, call_ids: Any) -> None:
    """``call_cancel`` for each call; one error message per refusal, one summary of outcomes."""
    outcomes: Counter[str] = Counter()
    for call_id in call_ids:
        try:
            answer = call_cancel(call_id=call_id)
        except DomainError as exc:
            modeladmin.message_user(
                request, f"{call_name(call_id)}: not cancelled: {exc.message}", messages.ERROR
            )
            continue
        settled = "already settled " if answer["alreadySettled"] else ""
        outcomes[f"{settled}{answer['outcome']}"] += 1
    if outcomes:
        line = ", ".join(f"{n} {what}" for what, n in sorted(outcomes.items()))
        modeladmin.message_user(request, f"Cancelled: {line}.", messages.SUCCESS)
