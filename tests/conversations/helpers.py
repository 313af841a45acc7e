"""Building blocks for conversation tests, all through the public services.

A conversation (``new_conversation``), its open turn (``open_turn``), an assistant message with
tool calls (``assistant_calls``); a ready call claimed and settled (``settle``), a claim run out
(``expire_claim``); and what a call is now (``state_of``, ``outcome_of``). The helpers of one
kind of test build on these: ``api_helpers`` (the REST API), ``admin_helpers`` (the support
admin), ``host_helpers`` (the host tool port), ``barrier_helpers`` (the turn barrier).
"""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

from django.utils import timezone

from conversations.models import ConversationEvent, ExecutionClaim, ToolCall, Turn
from conversations.services.claims import claim_acquire
from conversations.services.conversations import conversation_create
from conversations.services.messages import message_post
from conversations.services.settlement import ClaimGuard, call_settle

_ids = itertools.count(1)


def new_conversation(owner, **kwargs):
    return conversation_create(owner=owner, **kwargs)


def open_turn(conversation) -> str:
    """The open turn of the conversation, opened with a user message when there is none."""
    existing = Turn.objects.filter(conversation_id=conversation.pk, status="open").first()
    if existing is not None:
        return str(existing.pk)
    posted = message_post(
        conversation_id=conversation.pk,
        message_id=f"u-{next(_ids)}",
        role="user",
        content=[{"type": "text", "text": "hello"}],
    )
    return posted.body["turnId"]


def assistant_calls(
    conversation, turn_id: str, *calls: tuple[str, dict[str, Any]], text: str | None = None
):
    """Post an assistant message with one tool_call block per ``(name, arguments)``."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for name, arguments in calls:
        content.append(
            {"type": "tool_call", "id": f"p-{next(_ids)}", "name": name, "arguments": arguments}
        )
    return message_post(
        conversation_id=conversation.pk,
        message_id=f"a-{next(_ids)}",
        role="assistant",
        turn_id=turn_id,
        content=content,
    )


def expire_claim(call_id):
    """Let the call's claim run out (its worker died): recovery may take the call back."""
    ExecutionClaim.objects.filter(call_id=call_id).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    return call_id


def settle(
    call_id, outcome: str = "completed", *, worker: str = "w", **kwargs
) -> ConversationEvent:
    """Claim a ready call as ``worker`` and settle it under that claim. ``completed`` by default
    with ``text`` (default ``done``) as the result's one text block; any other outcome with a
    ``reason``. ``kwargs`` go to ``call_settle``."""
    claim = claim_acquire(call_id=call_id, worker=worker)
    assert claim is not None
    if outcome == "completed":
        kwargs.setdefault("text", "done")
        kwargs.setdefault("result", {"content": [{"type": "text", "text": kwargs["text"]}]})
    else:
        kwargs.setdefault("reason", f"It ended {outcome}.")
    return call_settle(
        call_id=call_id,
        outcome=outcome,
        guard=ClaimGuard(claim.token, claim.generation),
        **kwargs,
    )


def state_of(call_id) -> str | None:
    """The call's state; None once it is settled (the row is gone)."""
    return ToolCall.objects.filter(pk=call_id).values_list("state", flat=True).first()


def outcome_of(call_id) -> str | None:
    """The outcome of the call's response (one at most: a database fact); None while none."""
    payload = (
        ConversationEvent.objects.filter(tool_call_id=call_id)
        .values_list("payload", flat=True)
        .first()
    )
    return None if payload is None else payload["outcome"]
