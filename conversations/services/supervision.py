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
from ._in_transaction import call_made_ready, call_transition
from .settlement import GenerationGuard, call_settle

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
        return _supervise(call)


def calls_supervise(*, calls: list[ToolCall]) -> None:
    """Supervise new calls in the caller's transaction (the one that created them, with the
    conversation locked, inside its ``publish.atomic()``): if it rolls back, so does their
    supervision, and a retry does it all again. The calls made ``ready`` go to their tools'
    runners after its commit (``call_made_ready``)."""
    for call in calls:
        _supervise(call)


def _supervise(call: ToolCall) -> str | None:
    """Inside the caller's transaction: move the ``supervising`` ``call`` to ``ready`` or
    ``awaiting_approval``, or settle it.

    A tool the conversation cannot use settles ``failed`` (``ToolSpec.refused_for``: an MCP
    server disabled or serving another owner); bad arguments settle ``failed`` (the message
    names the field), and so does a path that cannot be resolved or a refused workspace (the
    message names the path); ``deny`` settles ``denied``.
    For a command the user typed, ``ask`` counts as ``allow``. Returns the new state or outcome,
    or None when someone else moved the call first. A call made ready goes to its runner after
    the caller's commit (``call_made_ready``).
    """
    spec = tool_spec(call.tool_name)
    # A tool this conversation cannot use (an MCP server disabled, another owner's, a tool it
    # does not list): nothing to check the arguments against, nothing to decide.
    refusal = spec.refused_for(call.conversation.owner_id)
    if refusal is not None:
        return _fail(call, refusal, None)
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
    if effective == "ask":
        interaction = {
            "kind": "approval",
            "request": {"reason": decision.reason, "suggestedRules": suggested},
        }
        moved = call_transition(
            call, S.AWAITING_APPROVAL, supervision=supervision, interaction=interaction
        )
        return S.AWAITING_APPROVAL if moved else None
    return S.READY if call_made_ready(call, supervision=supervision) else None


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
