"""Resolving approvals and input requests (docs/subsystems/interactions.md).

A resolution is first recorded on the row (one transaction), then applied (a move or a
settlement). Recovery applies a recorded resolution again if a crash fell between the two. A
resolution that loses a race with a cancel or another settlement is refused (``not_awaiting``)
and leaves no trace: the response never carries a resolution that did not decide its outcome.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from tools.catalog import tool_spec
from tools.models import PermissionRule

from ..errors import (
    NotAwaiting,
    NotFound,
    ResolutionConflict,
    StaleClaim,
    ValidationFailed,
)
from ..fields import dumps
from ..grants import run_commands_require
from ..models import ExecutionClaim, ToolCall
from ..selectors import call_response_payload
from . import publish
from ._in_transaction import call_made_ready, call_transition
from .cancel import APPROVAL_DENIED
from .settlement import ResolutionGuard, call_settle

S = ToolCall.State
_AWAITING = {"approval": S.AWAITING_APPROVAL, "input": S.AWAITING_INPUT}


def _record(
    call_id: Any, request_id: str, resolution: dict[str, Any], resolved_by: str | None
) -> dict[str, Any]:
    return {
        "toolCallId": str(call_id),
        "requestId": request_id,
        "resolution": resolution,
        "resolvedBy": resolved_by,
    }


def _conflict(recorded_request: str | None, recorded: dict[str, Any]) -> ResolutionConflict:
    """The refusal names the recorded resolution in its message: the error object keeps the
    documented keys (``code``, ``message``)."""
    return ResolutionConflict(
        f"The call was already resolved differently: request {dumps(recorded_request)} "
        f"recorded {dumps(recorded)}.",
        recorded_request=recorded_request,
        recorded=recorded,
    )


def _check_input(call: ToolCall, value: Any) -> None:
    questions = (call.interaction or {}).get("request", {}).get("questions", [])
    answers = value.get("answers") if isinstance(value, dict) else None
    if not isinstance(answers, dict):
        raise ValidationFailed("The value needs an object of answers.", field="value.answers")
    by_id = {q["id"]: q for q in questions}
    for qid, answer in answers.items():
        question = by_id.get(qid)
        if question is None:
            raise ValidationFailed(f"No question has the id {qid!r}.", field=f"value.answers.{qid}")
        many = isinstance(answer, list)
        if many and not question.get("multiple"):
            raise ValidationFailed("This question takes one answer.", field=f"value.answers.{qid}")
        if not (isinstance(answer, str) or (many and all(isinstance(a, str) for a in answer))):
            raise ValidationFailed(
                "An answer is a string or a list of strings.", field=f"value.answers.{qid}"
            )
    missing = [qid for qid in by_id if qid not in answers]
    if missing:
        raise ValidationFailed(
            f"Question {missing[0]!r} has no answer.", field=f"value.answers.{missing[0]}"
        )


def _suggested(interaction: Any) -> list[dict[str, Any]]:
    return (interaction or {}).get("request", {}).get("suggestedRules") or []


def _rule_to_save(interaction: Any, rule: int | str | None) -> dict[str, Any] | None:
    """The suggested rule a persisting approval saves: the one ``rule`` names (its index in
    ``suggestedRules`` or its pattern), else the first; None when there is none to save."""
    suggested = _suggested(interaction)
    if rule is None:
        return suggested[0] if suggested else None
    if isinstance(rule, int) and not isinstance(rule, bool):
        return suggested[rule] if 0 <= rule < len(suggested) else None
    return next((s for s in suggested if s.get("pattern") == rule), None)


def _check_approval(call: ToolCall, resolution: dict[str, Any], user: Any) -> None:
    if resolution.get("decision") != "allow":
        return  # refusing never runs anything
    if tool_spec(call.tool_name).risk == "execute":
        run_commands_require(user=user, doing=f"Approving {call.tool_name} (it runs programs)")
    rule = resolution.get("rule")
    if rule is not None and _rule_to_save(call.interaction, rule) is None:
        count = len(_suggested(call.interaction))
        raise ValidationFailed(
            f"rule names none of the request's {count} suggested rule(s): give an index "
            f"(0 to {count - 1}) or one of their patterns.",
            field="rule",
        )


def call_resolve(
    *, call_id: UUID | str, user: Any, request_id: str, resolution: dict[str, Any]
) -> dict[str, Any]:
    """Resolve an approval or an input request, idempotently by ``requestId``.

    The same request and resolution again answers the recorded result (also after the call
    settled); any other second resolution is ``resolution_conflict``; a call not awaiting this
    kind, or one that a cancel or settlement took first, is ``not_awaiting``.
    """
    call = ToolCall.objects.filter(pk=call_id).first()
    if call is None:
        return _resolved_after_settlement(call_id, request_id, resolution)
    earlier = _earlier_approval(call.supervision, request_id, resolution)
    if earlier is not None:
        return earlier
    if call.resolution is not None:
        if call.resolution_request_id == request_id and call.resolution == resolution:
            return _apply_and_answer(call.id, request_id, resolution, _username(call.resolved_by))
        raise _conflict(call.resolution_request_id, call.resolution)
    kind = resolution["kind"]
    if call.state != _AWAITING[kind]:
        raise NotAwaiting(f"The call is {call.state}, not awaiting {kind}.")
    if kind == "approval":
        _check_approval(call, resolution, user)
    else:
        _check_input(call, resolution.get("value"))
    # Recording publishes nothing: the move or the settlement it leads to, applied just below,
    # publishes the call with its resolution, once (a second tool_call.changed of the same
    # awaiting state would only repeat it). A crash in between leaves it to recovery, whose
    # apply publishes.
    stored = ToolCall.objects.filter(
        pk=call.pk, state=call.state, generation=call.generation, resolution__isnull=True
    ).update(resolution=resolution, resolution_request_id=request_id, resolved_by=user)
    if not stored:  # resolved, moved or settled meanwhile: answer from the fresh row
        return call_resolve(
            call_id=call_id, user=user, request_id=request_id, resolution=resolution
        )
    return _apply_and_answer(call.id, request_id, resolution, user.get_username())


def _apply_and_answer(
    call_id: Any, request_id: str, resolution: dict[str, Any], resolved_by: str | None
) -> dict[str, Any]:
    """Apply the recorded resolution and answer it, or ``not_awaiting`` when a cancel or a
    settlement took the call first (the recorded resolution went with the row)."""
    record = _record(call_id, request_id, resolution, resolved_by)
    if resolution_apply(call_id=call_id) is not None:
        return record
    # Not applied here: applied by the same request running meanwhile, or lost to a cancel.
    still = ToolCall.objects.filter(pk=call_id, resolution_request_id=request_id).exists()
    payload = call_response_payload(call_id)
    if still or (payload is not None and payload.get("resolutionRequestId") == request_id):
        return record
    outcome = f" ({payload['outcome']})" if payload is not None else ""
    raise NotAwaiting(f"The call settled{outcome} before this resolution could apply.")


def _earlier_approval(
    supervision: Any, request_id: str, resolution: dict[str, Any]
) -> dict[str, Any] | None:
    """The recorded answer of an approval the call went past (an ``ask_user`` approved before
    it asked), when this is the same request again."""
    approval = supervision.get("approval") if isinstance(supervision, dict) else None
    if (
        isinstance(approval, dict)
        and approval.get("requestId") == request_id
        and approval.get("resolution") == resolution
    ):
        return approval
    return None


def _username(user: Any) -> str | None:
    return None if user is None else user.get_username()


def _resolved_after_settlement(
    call_id: Any, request_id: str, resolution: dict[str, Any]
) -> dict[str, Any]:
    payload = call_response_payload(call_id)
    if payload is None:
        raise NotFound("Tool call not found.")
    earlier = _earlier_approval(payload.get("supervision"), request_id, resolution)
    if earlier is not None:
        return earlier
    recorded = payload.get("resolution")
    if recorded is None:
        raise NotAwaiting(f"The call has settled ({payload['outcome']}).")
    if payload.get("resolutionRequestId") == request_id and recorded == resolution:
        return _record(call_id, request_id, recorded, payload.get("resolvedBy"))
    raise _conflict(payload.get("resolutionRequestId"), recorded)


def resolution_apply(*, call_id: UUID | str) -> str | None:
    """Apply the resolution recorded on an awaiting call: what it led to (``ready``, or the
    outcome it settled), or None when there was nothing to apply or someone else moved or
    settled the call first."""
    call = ToolCall.objects.filter(pk=call_id).first()
    if call is None or call.resolution is None or call.state not in _AWAITING.values():
        return None
    resolution = call.resolution
    guard = ResolutionGuard(call.generation)
    try:
        if resolution["kind"] == "input" and call.state == S.AWAITING_INPUT:
            answers = resolution["value"]["answers"]
            text = "\n".join(
                f"{qid}: {a if isinstance(a, str) else ', '.join(a)}" for qid, a in answers.items()
            )
            call_settle(
                call_id=call.id,
                outcome="completed",
                guard=guard,
                result={"answers": answers},
                text=text,
            )
            return "completed"
        if resolution["kind"] != "approval" or call.state != S.AWAITING_APPROVAL:
            return None
        if resolution["decision"] == "deny":
            call_settle(call_id=call.id, outcome="denied", guard=guard, reason=APPROVAL_DENIED)
            return "denied"
    except StaleClaim:
        return None  # cancelled or settled first
    return _approve(call)


def call_await_input(*, call_id: UUID | str, token: Any, generation: int) -> None:
    """The ``ask_user`` handler's move: ``running → awaiting_input`` with the questions, the
    claim released. An earlier approval's resolution is set aside (its interaction stays in
    ``resolved_interaction``), so the input resolution has the slot. Locks the call, then its
    claim, as every writer does; ``StaleClaim`` when the claim is not held."""
    with publish.atomic():
        call = (
            ToolCall.objects.select_for_update(of=("self",))
            .select_related("resolved_by")
            .filter(pk=call_id, state=S.RUNNING, generation=generation)
            .first()
        )
        released = (
            call is not None
            and ExecutionClaim.objects.filter(
                call_id=call_id, token=token, generation=generation
            ).delete()[0]
        )
        if not released:
            raise StaleClaim("This claim no longer holds the call.")
        questions = call.arguments.get("questions") if isinstance(call.arguments, dict) else None
        interaction = {"kind": "input", "request": {"questions": questions}}
        supervision = call.supervision
        if call.resolution is not None and call.resolution.get("kind") == "approval":
            # The approval stays on record with the decision it completed, so the same
            # approval request again still answers what was recorded.
            supervision = {
                **(supervision or {}),
                "approval": _record(
                    call.id,
                    call.resolution_request_id or "",
                    call.resolution,
                    _username(call.resolved_by),
                ),
            }
        call_transition(
            call,
            S.AWAITING_INPUT,
            interaction=interaction,
            supervision=supervision,
            resolution=None,
            resolution_request_id=None,
            resolved_by=None,
        )


def _approve(call: ToolCall) -> str | None:
    """``awaiting_approval → ready``, saving the chosen suggested rule for this conversation
    when the approval persists; then the call's runner, after commit."""
    interaction, resolution = call.interaction, call.resolution
    with publish.atomic():
        if not call_made_ready(call, interaction=None, resolved_interaction=interaction):
            return None
        # An MCP client's wait for the call withdraws its approval prompt at once.
        publish.publish_turn_changed(call.turn_id, call.pk)
        rule = resolution.get("persist") and _rule_to_save(interaction, resolution.get("rule"))
        if rule:
            PermissionRule.objects.create(
                conversation_id=call.conversation_id,
                tool_name=call.tool_name,
                pattern=rule.get("pattern", ""),
                decision=PermissionRule.Decision.ALLOW,
                source=PermissionRule.Source.APPROVAL,
                created_by_id=call.resolved_by_id,
            )
    return S.READY
