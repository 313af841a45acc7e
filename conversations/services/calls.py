"""The ids of unfinished calls, and what every move of one publishes (a call is created and
moved by ``_in_transaction``; what its settlement publishes is ``settlement``'s)."""

from __future__ import annotations

import uuid
from uuid import UUID

from ..models import ToolCall
from ..shapes import call_wire
from .publish import conversation_group, later

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
