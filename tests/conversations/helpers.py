"""Building blocks for conversation tests, all through the public services."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

from django.utils import timezone

from conversations.models import ExecutionClaim, Turn
from conversations.services.conversations import conversation_create
from conversations.services.messages import message_post

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
