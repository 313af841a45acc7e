"""The turn barrier: wait until a turn has no unfinished call, without pinning resources.

The waiter joins the turn's group on the channel layer and sleeps on it; settlement publishes
``turn.changed`` after commit. Each check runs in a pool thread that returns its database
connection at once, and a periodic re-check covers a lost notification. No thread and no
connection is held while waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import connections

from .selectors import turn_results
from .services.publish import turn_group

RECHECK_SECONDS = 2.0


def _check_detached(conversation_id: Any, turn_id: Any) -> dict[str, Any]:
    try:
        return turn_results(conversation_id, turn_id)
    finally:
        connections.close_all()


async def turn_results_wait(*, conversation_id: Any, turn_id: Any, wait: float) -> dict[str, Any]:
    """The turn's results once it has no unfinished call, or its pending calls after ``wait`` s."""
    check = sync_to_async(_check_detached, thread_sensitive=False)
    answer = await check(conversation_id, turn_id)
    if answer["settled"] or wait <= 0:
        return answer
    layer = get_channel_layer()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    if layer is None:  # no layer configured: poll
        while not answer["settled"] and loop.time() < deadline:
            await asyncio.sleep(min(RECHECK_SECONDS, max(0.0, deadline - loop.time())))
            answer = await check(conversation_id, turn_id)
        return answer
    channel = await layer.new_channel()
    group = turn_group(turn_id)
    await layer.group_add(group, channel)
    try:
        # Joined before this re-check, so a settlement after it cannot go unnoticed.
        answer = await check(conversation_id, turn_id)
        while not answer["settled"]:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    layer.receive(channel), timeout=min(remaining, RECHECK_SECONDS)
                )
            answer = await check(conversation_id, turn_id)
    finally:
        await layer.group_discard(group, channel)
    return answer
