"""The queue: async-run notices the client has not acknowledged (docs/subsystems/async_runs.md)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from tools.models import AsyncRun

from ..selectors import queue_notices
from . import publish
from .publish import conversation_group, later


def queue_ack(*, conversation_id: UUID | str, up_to: int) -> dict[str, Any]:
    """Mark notices with ``sequence ≤ up_to`` delivered; idempotent."""
    with publish.atomic():
        changed = AsyncRun.objects.filter(
            conversation_id=conversation_id,
            acknowledged=False,
            notice_sequence__isnull=False,
            notice_sequence__lte=up_to,
        ).update(acknowledged=True)
        if changed:
            publish_queue_changed(conversation_id)
    return {"acknowledged": changed, "queue": queue_notices(conversation_id)}


def publish_queue_changed(conversation_id: UUID | str) -> None:
    """``queue.changed`` with the queue as it is in this transaction, after commit."""
    later(
        conversation_group(conversation_id),
        {
            "type": "queue.changed",
            "conversationId": str(conversation_id),
            "queue": queue_notices(conversation_id),
        },
    )
