"""Publishing to live subscribers, always after commit (spec lifecycle.md, "Appending").

Group names: ``conv.<conversation hex>`` for everything about a conversation and
``turn.<turn hex>`` for the turn barrier. A failure to publish never undoes a commit: durable
events are replayed from the database, ephemeral messages may be dropped by design.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from uuid import UUID

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)

Message = tuple[str, dict[str, Any]]


def conversation_group(conversation_id: UUID | str) -> str:
    return f"conv.{UUID(str(conversation_id)).hex}"


def turn_group(turn_id: UUID | str) -> str:
    return f"turn.{UUID(str(turn_id)).hex}"


async def _send_all(messages: list[Message]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    results = await asyncio.gather(
        *(layer.group_send(group, message) for group, message in messages), return_exceptions=True
    )
    for (group, message), result in zip(messages, results, strict=True):
        if isinstance(result, BaseException):
            logger.warning("publish to %s failed (%s): %r", group, message.get("type"), result)


def send_now(messages: list[Message]) -> None:
    if messages:
        async_to_sync(_send_all)(messages)


def publish_on_commit(messages: list[Message]) -> None:
    """Send ``messages`` once the current transaction commits (at once outside one)."""
    if messages:
        transaction.on_commit(lambda: send_now(list(messages)))
