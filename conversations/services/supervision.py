"""Supervision: a new call's arguments are checked and the permission port decides
(docs/subsystems/supervision.md)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from tools.catalog import ArgumentsInvalid, tool_spec, validate_arguments
from tools.permissions import evaluate, suggested_rules
from tools.workspaces import PathRefused, conversation_workspace

from ..errors import DomainError
from ..models import ToolCall
from . import publish
from .calls import call_moved
from .runners import READY, announce, call_ready_run
from .settlement import GenerationGuard, call_settle
from .transitions import call_move

S = ToolCall.State


def call_supervise(*, call_id: UUID | str) -> str | None:
    """Move a ``supervising`` call on, in one transaction of its own; a call made ``ready``
    goes to its tool's runner after the commit. Recovery's way, for a call left ``supervising``
    (a new call is supervised in the transaction that created it: ``calls_supervise``).

    Returns the new state or outcome, or None when the call was no longer supervising.
    """
    with publish.atomic():
        call = ToolCall.objects.select_related("conversation").filter(pk=call_id).first()
        if call is None or call.state != S.SUPERVISING:
            return None
        state = _supervise(call)
    if state == S.READY:
        call_ready_run(call_id=call.id, tool_name=call.tool_name)
    return state


def calls_supervise(*, calls: list[ToolCall]) -> list[ToolCall]:
    """Supervise new calls in the caller's transaction (the one that created them, with the
    conversation locked): if it rolls back, so does their supervision, and a retry does it all
    again. The calls made ``ready``, for the caller to hand to ``calls_ready_run`` after its
    commit."""
    return [call for call in calls if _supervise(call) == S.READY]


def calls_ready_run(*, calls: list[ToolCall]) -> None:
    """After the commit that made ``calls`` ready: each to its tool's runner, if it has one."""
    for call in calls:
        call_ready_run(call_id=call.id, tool_name=call.tool_name)


def _supervise(call: ToolCall) -> str | None:
    """Inside the caller's transaction: move the ``supervising`` ``call`` to ``ready`` or
    ``awaiting_approval``, or settle it.

    Bad arguments settle ``failed`` (the message names the field), and so does a path that
    cannot be resolved or a refused workspace (the message names the path); ``deny`` settles
    ``denied``.
    For a command the user typed, ``ask`` counts as ``allow``. Returns the new state or outcome,
    or None when someone else moved the call first. Hands nothing to a runner: the caller does,
    after its commit.
    """
    spec = tool_spec(call.tool_name)
    try:
        validate_arguments(spec, call.arguments)
    except ArgumentsInvalid as exc:
        return _fail(call, exc.message, exc.field)
    workspace = conversation_workspace(call.conversation)
    try:
        decision = evaluate(call.conversation_id, spec, call.arguments, workspace=workspace)
        suggested = suggested_rules(spec, call.arguments, workspace)
    except PathRefused as exc:  # a loop, a vanished link, a refused workspace: this call only
        return _fail(call, exc.message, exc.field)
    supervision = decision.as_supervision()
    effective = decision.decision
    if effective == "ask" and call.origin == ToolCall.Origin.USER:
        effective = "allow"
        supervision["effective"] = "allow"
    if effective == "deny":
        return _settle(call, "denied", reason=decision.reason, supervision=supervision)
    fields: dict[str, Any] = {"supervision": supervision}
    if effective == "ask":
        to_state = S.AWAITING_APPROVAL
        fields["interaction"] = {
            "kind": "approval",
            "request": {
                "reason": decision.reason,
                "suggestedRules": suggested,
            },
        }
    else:
        to_state = S.READY
    moved = call_move(
        call_id=call.id,
        from_state=S.SUPERVISING,
        to_state=to_state,
        generation=call.generation,
        **fields,
    )
    if not moved:
        return None
    if to_state == S.AWAITING_APPROVAL:
        call_moved(call, "awaiting_approval", interaction=fields["interaction"])
    else:
        call_moved(call)
        announce(READY, call.tool_name)
    return to_state


def _fail(call: ToolCall, reason: str, field: str | None) -> str | None:
    """Settle ``failed`` before anything ran: bad arguments, or a path that cannot be used."""
    supervision = {"decision": "failed", "reason": reason, "field": field, "rule": None}
    return _settle(call, "failed", reason=reason, supervision=supervision)


def _settle(call: ToolCall, outcome: str, **kwargs: Any) -> str | None:
    try:
        call_settle(
            call_id=call.id, outcome=outcome, guard=GenerationGuard(call.generation), **kwargs
        )
    except DomainError:
        return None  # someone else settled or moved it first
    return outcome
