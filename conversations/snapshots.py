"""Placeholder until the snapshot reads land (replaced by the REST work)."""

from __future__ import annotations

from typing import Any

from . import selectors


def snapshot_read(user: Any, conversation_id: Any, *, envelope_bytes: int = 0) -> dict[str, Any]:
    conversation = selectors.conversation_for(user, conversation_id)
    return {
        "conversation": {"id": str(conversation.pk)},
        "lastSequence": conversation.last_sequence,
    }
