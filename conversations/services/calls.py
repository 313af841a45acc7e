"""Creating unfinished calls, and what every change of one publishes."""

from __future__ import annotations

import uuid
from typing import Any
from uuid import UUID

from tools.catalog import tool_spec

from ..models import ToolCall
from ..shapes import call_wire
from .activity import activity_create, activity_fold, status_update
from .publish import conversation_group, later, publish_turn_changed

# Call ids are derived from what created the call, so a repeated request recomputes the
# answer it got the first time (idempotent message and command posting).
_CALL_NAMESPACE = uuid.UUID("6f6c6f63-6f72-4500-8000-746f6f6c6361")


def model_call_id(conversation_id: UUID | str, message_id: str, content_index: int) -> uuid.UUID:
    return uuid.uuid5(_CALL_NAMESPACE, f"{conversation_id}/message/{message_id}/{content_index}")


def command_call_id(conversation_id: UUID | str, input_id: str) -> uuid.UUID:
    return uuid.uuid5(_CALL_NAMESPACE, f"{conversation_id}/command/{input_id}")


def publish_call_changed(call: ToolCall) -> None:
    """``tool_call.changed`` with the unfinished call as it is now, after commit. Its
    arguments are bounded (a call's whole arguments may reach 1 MiB, and every move sends the
    call again): ``GET /tool-calls/{id}`` answers them whole."""
    later(
        conversation_group(call.conversation_id),
        {
            "type": "tool_call.changed",
            "conversationId": str(call.conversation_id),
            "call": call_wire(call, bounded=True),
        },
    )


def publish_call_removed(*, conversation_id: Any, call_id: Any, turn_id: Any) -> None:
    """``tool_call.changed {removed}`` once the call settled, and a wake-up of its turn's
    barrier, after commit."""
    later(
        conversation_group(conversation_id),
        {
            "type": "tool_call.changed",
            "conversationId": str(conversation_id),
            "removed": str(call_id),
        },
    )
    publish_turn_changed(turn_id)


def call_moved(
    call: ToolCall,
    status: str | None = None,
    *,
    fresh: bool = False,
    worker: str | None = None,
    **update: Any,
) -> None:
    """After a move of ``call`` (in the same transaction): re-read it (unless the caller holds
    it ``fresh``, as written), publish ``tool_call.changed``, and fold ``status`` (with
    ``update``'s fields) into its activity; ``worker``: the claim's, kept on the activity."""
    if not fresh:
        call.refresh_from_db()
    publish_call_changed(call)
    if status is not None:
        activity_fold(
            tool_call_id=call.pk, update=status_update(call, status, **update), worker=worker
        )


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
    after_sequence: int | None = None,
) -> ToolCall:
    """A new unfinished call in ``supervising``, with its first activity state.

    Called with the conversation locked, in the transaction that created its message or turn;
    ``after_sequence``: the conversation's last sequence, when the caller knows it.
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
        call=call,
        title=title,
        kind=tool_spec(tool_name).kind,
        ordinal=ordinal,
        after_sequence=after_sequence,
    )
    publish_call_changed(call)
    return call
