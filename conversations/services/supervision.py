"""Supervision: a new call's arguments are checked and the permission port decides."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db import transaction

from tools.catalog import ArgumentsInvalid, tool_spec, validate_arguments
from tools.handlers import run_inline
from tools.permissions import evaluate, suggested_rules

from ..errors import DomainError
from ..models import Conversation, ToolCall
from ..storage import owner_workspace_root
from .calls import call_moved
from .publish import Message, publish_on_commit
from .transitions import call_move

S = ToolCall.State


def _workspace(conversation: Conversation):
    return owner_workspace_root(conversation.owner_id) / conversation.workspace


def call_supervise(*, call_id: UUID | str) -> str | None:
    """Move a ``supervising`` call on: ``ready``, ``awaiting_approval``, or settle it.

    Bad arguments settle ``failed`` (the message names the field); ``deny`` settles ``denied``.
    For a command the user typed, ``ask`` counts as ``allow``. Returns the new state or outcome,
    or None when the call was no longer supervising (someone else moved it).
    """
    from .settlement import GenerationGuard, call_settle

    call = ToolCall.objects.select_related("conversation").filter(pk=call_id).first()
    if call is None or call.state != S.SUPERVISING:
        return None
    spec = tool_spec(call.tool_name)
    guard = GenerationGuard(call.generation)
    try:
        validate_arguments(spec, call.arguments)
    except ArgumentsInvalid as exc:
        return _settle_quietly(
            call_settle,
            call,
            "failed",
            guard,
            reason=exc.message,
            supervision={
                "decision": "failed",
                "reason": exc.message,
                "field": exc.field,
                "rule": None,
            },
        )
    workspace = _workspace(call.conversation)
    decision = evaluate(call.conversation_id, spec, call.arguments, workspace=workspace)
    supervision = decision.as_supervision()
    effective = decision.decision
    if effective == "ask" and call.origin == ToolCall.Origin.USER:
        effective = "allow"
        supervision["effective"] = "allow"
    if effective == "deny":
        return _settle_quietly(
            call_settle, call, "denied", guard, reason=decision.reason, supervision=supervision
        )
    fields: dict[str, Any] = {"supervision": supervision}
    if effective == "ask":
        to_state = S.AWAITING_APPROVAL
        fields["interaction"] = {
            "kind": "approval",
            "request": {
                "reason": decision.reason,
                "suggestedRules": suggested_rules(spec, call.arguments, workspace),
            },
        }
    else:
        to_state = S.READY
    messages: list[Message] = []
    with transaction.atomic():
        if not call_move(
            call_id=call.id,
            from_state=S.SUPERVISING,
            to_state=to_state,
            generation=call.generation,
            **fields,
        ):
            return None
        if to_state == S.AWAITING_APPROVAL:
            call_moved(call, messages, "awaiting_approval", interaction=fields["interaction"])
        else:
            call_moved(call, messages)
        publish_on_commit(messages)
    if to_state == S.READY:
        run_inline(call_id=call.id, tool_name=call.tool_name)
    return to_state


def _settle_quietly(call_settle, call: ToolCall, outcome: str, guard, **kwargs: Any) -> str | None:
    try:
        call_settle(call_id=call.id, outcome=outcome, guard=guard, **kwargs)
    except DomainError:
        return None  # someone else settled or moved it first
    return outcome
