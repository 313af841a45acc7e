"""Resolving approvals and input requests (spec lifecycle.md, "Interactions").

A resolution is first recorded on the row (one transaction), then applied (a move or a
settlement). Recovery applies a recorded resolution again if a crash fell between the two.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db import transaction

from tools.catalog import tool_spec
from tools.handlers import run_inline
from tools.models import PermissionRule

from ..errors import (
    Forbidden,
    NotAwaiting,
    NotFound,
    ResolutionConflict,
    StaleClaim,
    ValidationFailed,
)
from ..fields import dumps
from ..models import ConversationEvent, ExecutionClaim, ToolCall
from .calls import call_moved
from .publish import Message, publish_on_commit
from .settlement import GenerationGuard, call_settle
from .transitions import call_move

S = ToolCall.State
APPROVAL_DENIED = "Approval denied."
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
    spec's keys (``code``, ``message``)."""
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


def call_resolve(
    *, call_id: UUID | str, user: Any, request_id: str, resolution: dict[str, Any]
) -> dict[str, Any]:
    """Resolve an approval or an input request, idempotently by ``requestId``.

    The same request and resolution again answers the recorded result (also after the call
    settled); any other second resolution is ``resolution_conflict``; a call not awaiting this
    kind is ``not_awaiting``.
    """
    call = ToolCall.objects.filter(pk=call_id).first()
    if call is None:
        return _resolved_after_settlement(call_id, request_id, resolution)
    earlier = _earlier_approval(call.supervision, request_id, resolution)
    if earlier is not None:
        return earlier
    if call.resolution is not None:
        if call.resolution_request_id == request_id and call.resolution == resolution:
            resolution_apply(call_id=call.id)
            return _record(call.id, request_id, resolution, _username(call.resolved_by))
        raise _conflict(call.resolution_request_id, call.resolution)
    kind = resolution["kind"]
    if call.state != _AWAITING[kind]:
        raise NotAwaiting(f"The call is {call.state}, not awaiting {kind}.")
    # Approving runs a command: that needs the permission. Refusing never does.
    approving = kind == "approval" and resolution.get("decision") == "allow"
    executes = tool_spec(call.tool_name).risk == "execute"
    if approving and executes and not user.has_perm("tools.run_commands"):
        raise Forbidden("Approving a command needs the permission tools.run_commands.")
    if kind == "input":
        _check_input(call, resolution.get("value"))
    stored = ToolCall.objects.filter(
        pk=call.pk, state=call.state, generation=call.generation, resolution__isnull=True
    ).update(resolution=resolution, resolution_request_id=request_id, resolved_by=user)
    if not stored:
        return call_resolve(
            call_id=call_id, user=user, request_id=request_id, resolution=resolution
        )
    resolution_apply(call_id=call.id)
    return _record(call.id, request_id, resolution, user.get_username())


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
    payload = (
        ConversationEvent.objects.filter(tool_call_id=call_id)
        .values_list("payload", flat=True)
        .first()
    )
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
    """Apply the resolution recorded on an awaiting call; nothing when already applied."""
    call = ToolCall.objects.select_related("resolved_by").filter(pk=call_id).first()
    if call is None or call.resolution is None or call.state not in _AWAITING.values():
        return None
    resolution = call.resolution
    guard = GenerationGuard(call.generation)
    common = {
        "resolution": resolution,
        "resolution_request_id": call.resolution_request_id,
        "resolved_by": call.resolved_by,
    }
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
            **common,
        )
        return "completed"
    if resolution["kind"] != "approval" or call.state != S.AWAITING_APPROVAL:
        return None
    if resolution["decision"] == "deny":
        ToolCall.objects.filter(pk=call.pk).update(permission_refused=True)
        call_settle(
            call_id=call.id,
            outcome="denied",
            guard=guard,
            reason=APPROVAL_DENIED,
            permission_refused=True,
            **common,
        )
        return "denied"
    return _approve(call)


def call_await_input(*, call_id: UUID | str, token: Any, generation: int) -> None:
    """The ``ask_user`` handler's move (tools.md): ``running → awaiting_input`` with the
    questions, the claim released. An earlier approval's resolution is set aside (its
    interaction stays in ``resolved_interaction``), so the input resolution has the slot.
    Locks claim then call, as settlement does; ``StaleClaim`` when the claim is not held."""
    messages: list[Message] = []
    with transaction.atomic():
        released = ExecutionClaim.objects.filter(
            call_id=call_id, token=token, generation=generation
        ).delete()[0]
        call = (
            ToolCall.objects.select_for_update(of=("self",))
            .select_related("resolved_by")
            .filter(pk=call_id, state=S.RUNNING, generation=generation)
            .first()
        )
        if not released or call is None:
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
        call_move(
            call_id=call.id,
            from_state=S.RUNNING,
            to_state=S.AWAITING_INPUT,
            generation=generation,
            interaction=interaction,
            supervision=supervision,
            resolution=None,
            resolution_request_id=None,
            resolved_by=None,
        )
        call_moved(call, messages, "awaiting_input", interaction=interaction)
        publish_on_commit(messages)


def _approve(call: ToolCall) -> str | None:
    messages: list[Message] = []
    with transaction.atomic():
        moved = call_move(
            call_id=call.id,
            from_state=S.AWAITING_APPROVAL,
            to_state=S.READY,
            generation=call.generation,
            interaction=None,
            resolved_interaction=call.interaction,
        )
        if not moved:
            return None
        if call.resolution.get("persist"):
            suggested = (call.interaction or {}).get("request", {}).get("suggestedRules") or []
            if suggested:
                PermissionRule.objects.create(
                    conversation_id=call.conversation_id,
                    tool_name=call.tool_name,
                    pattern=suggested[0].get("pattern", ""),
                    decision=PermissionRule.Decision.ALLOW,
                    source=PermissionRule.Source.APPROVAL,
                    created_by=call.resolved_by,
                )
        call_moved(call, messages, "pending", interaction=None)
        publish_on_commit(messages)
    run_inline(call_id=call.id, tool_name=call.tool_name)
    return S.READY
