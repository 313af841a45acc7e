"""Creating unfinished calls, and the ephemeral messages every change of one publishes."""

from __future__ import annotations

import uuid
from typing import Any
from uuid import UUID

from tools.catalog import tool_spec

from ..models import ToolCall
from ..shapes import call_wire
from .activity import activity_apply, activity_create, status_update
from .publish import Message, conversation_group, turn_group

# Call ids are derived from what created the call, so a repeated request recomputes the
# answer it got the first time (idempotent message and command posting).
_CALL_NAMESPACE = uuid.UUID("6f6c6f63-6f72-4500-8000-746f6f6c6361")


def model_call_id(conversation_id: UUID | str, message_id: str, content_index: int) -> uuid.UUID:
    return uuid.uuid5(_CALL_NAMESPACE, f"{conversation_id}/message/{message_id}/{content_index}")


def command_call_id(conversation_id: UUID | str, input_id: str) -> uuid.UUID:
    return uuid.uuid5(_CALL_NAMESPACE, f"{conversation_id}/command/{input_id}")


def call_changed(call: ToolCall, messages: list[Message]) -> None:
    messages.append(
        (
            conversation_group(call.conversation_id),
            {
                "type": "tool_call.changed",
                "conversationId": str(call.conversation_id),
                "call": call_wire(call),
            },
        )
    )


def call_moved(
    call: ToolCall, messages: list[Message], status: str | None = None, **update: Any
) -> None:
    """After a move of ``call`` (in the same transaction): re-read it, publish
    ``tool_call.changed``, and fold ``status`` (with ``update``'s fields) into its activity."""
    call.refresh_from_db()
    call_changed(call, messages)
    if status is not None:
        activity_apply(
            tool_call_id=call.pk, update=status_update(call, status, **update), messages=messages
        )


def call_removed(
    *, conversation_id: Any, call_id: Any, turn_id: Any, messages: list[Message]
) -> None:
    messages.append(
        (
            conversation_group(conversation_id),
            {
                "type": "tool_call.changed",
                "conversationId": str(conversation_id),
                "removed": str(call_id),
            },
        )
    )
    turn_changed(turn_id, messages)


def turn_changed(turn_id: Any, messages: list[Message]) -> None:
    """Wake turn-barrier waiters of ``turn_id``; they re-read the database."""
    messages.append((turn_group(turn_id), {"type": "turn.changed", "turnId": str(turn_id)}))


def call_create(
    *,
    call_id: uuid.UUID,
    conversation_id: Any,
    turn_id: Any,
    tool_name: str,
    arguments: Any,
    origin: str,
    assistant_event_id: int | None = None,
    provider_call_id: str = "",
    content_index: int | None = None,
    title: str | None = None,
    ordinal: int | None = None,
    messages: list[Message],
) -> ToolCall:
    """A new unfinished call in ``supervising``, with its first activity state.

    Called with the conversation locked, in the transaction that created its message or turn.
    """
    call = ToolCall.objects.create(
        id=call_id,
        conversation_id=conversation_id,
        turn_id=turn_id,
        assistant_event_id=assistant_event_id,
        provider_call_id=provider_call_id,
        content_index=content_index,
        origin=origin,
        tool_name=tool_name,
        arguments=arguments,
        state=ToolCall.State.SUPERVISING,
    )
    activity_create(
        call=call, title=title, kind=tool_spec(tool_name).kind, messages=messages, ordinal=ordinal
    )
    call_changed(call, messages)
    return call
