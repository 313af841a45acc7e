"""Log pages of another host's disk, asked over the channel layer (docs/decisions.md,
"Log pages of a pinned host: asked over the channel layer").

With pinned workspaces a run's captures are on the disk of the host that ran it. A worker
there answers on its own channel (``new_channel``, written in its ``WorkerHeartbeat.channel``);
a web process of another host sends the page's question to the live worker of the run's host
with the freshest heartbeat and waits ``PAGE_ASK_SECONDS`` for the answer on a channel of its
own. One question, one answer, to one worker: no answer is ever left unread in a layer's
buffers. A host with no worker alive, or none that answers in time, is a 503 ``unavailable``.

Both sides receive on a layer instance of their own (``_own_layer``), never the process's
shared one: a Redis layer lets one event loop only receive on it, and the shared instance is
daphne's, whose consumers receive on it from daphne's loop. The embedded worker (its own loop
in daphne's process) answering on the shared instance made every socket of that daphne fail
its ``receive`` ("Two event loops are trying to receive() on one channel layer at once!").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync
from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import (
    BaseChannelLayer,
    InMemoryChannelLayer,
    channel_layers,
    get_channel_layer,
)
from django.conf import settings

from conversations.errors import DomainError, HostUnavailable
from conversations.sql import vendor_sql
from tools.models import WorkerHeartbeat

logger = logging.getLogger(__name__)

PAGE_ASK_SECONDS = 5.0
ASK = "host.page"
ANSWER = "host.page.answer"


def _channel_of(host: str) -> str | None:
    """The channel of the live worker of ``host`` with the freshest heartbeat, if any."""
    live = vendor_sql().now(-timedelta(seconds=settings.TOOLCORE_CLAIM_LEASE))
    return (
        WorkerHeartbeat.objects.filter(host=host, heartbeat_at__gte=live, stopped_at__isnull=True)
        .exclude(channel="")
        .order_by("-heartbeat_at")
        .values_list("channel", flat=True)
        .first()
    )


def page_asked(host: str, asked: dict[str, Any]) -> dict[str, Any]:
    """The page ``asked`` (``logs.page_read``'s question) read by a worker of ``host``;
    its ``DomainError`` raised here again; ``HostUnavailable`` when no worker answers."""
    channel = _channel_of(host)
    if channel is None:
        raise HostUnavailable(f"No worker of host {host!r}, which holds this log, is running.")
    answer = async_to_sync(_ask)(channel, asked)
    if answer is None:
        raise HostUnavailable(
            f"The workers of host {host!r}, which holds this log, did not answer."
        )
    if "error" in answer:
        error = DomainError(answer["error"]["message"], field=answer["error"].get("field"))
        error.status, error.code = answer["error"]["status"], answer["error"]["code"]
        raise error
    return answer["page"]


def _own_layer() -> BaseChannelLayer | None:
    """A layer instance for one event loop's receives: a new one of the default layer's
    configuration; the shared in-memory layer itself (it is this process's only way to reach
    itself, and its queues are per channel)."""
    layer = get_channel_layer()
    if layer is None or isinstance(layer, InMemoryChannelLayer):
        return layer
    return channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)


async def _closed(layer: BaseChannelLayer) -> None:
    """Give back a layer instance's connections (a Redis layer's pools)."""
    close = getattr(layer, "close_pools", None)
    if close is not None and layer is not get_channel_layer():
        try:
            await close()
        except Exception:  # noqa: BLE001 - a pool that cannot close is dropped all the same
            logger.debug("closing a layer's pools failed", exc_info=True)


async def _ask(channel: str, asked: dict[str, Any]) -> dict[str, Any] | None:
    layer = _own_layer()  # this thread's loop is asyncio's for this one question
    try:
        reply = await layer.new_channel()
        await layer.send(channel, {"type": ASK, "reply": reply, "asked": asked})
        try:
            async with asyncio.timeout(PAGE_ASK_SECONDS):
                return await layer.receive(reply)
        except TimeoutError:
            return None
    finally:
        await _closed(layer)


async def pages_channel() -> tuple[BaseChannelLayer, str] | None:
    """A layer instance of this worker's loop and a channel on it to answer on; None without a
    channel layer, or when the layer is away at the worker's start (its host's pages then
    answer 503; its calls run all the same)."""
    layer = _own_layer()
    if layer is None:
        return None
    try:
        return layer, await layer.new_channel()
    except Exception:  # noqa: BLE001 - Redis away: the worker runs calls without it
        logger.warning("no channel for other hosts' log pages", exc_info=True)
        await _closed(layer)
        return None


async def answer_pages(
    layer: BaseChannelLayer, channel: str, read: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    """Answer the questions sent to ``channel`` of ``layer`` (``pages_channel``'s) with
    ``read`` (on a thread: it reads files), until cancelled; a layer that drops is read again
    a second later."""
    try:
        await _answer(layer, channel, read)
    finally:
        await _closed(layer)


async def _answer(
    layer: BaseChannelLayer, channel: str, read: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    while True:
        try:
            message = await layer.receive(channel)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - Redis away for a moment: the asker waits or 503s
            logger.warning("log page questions lost; listening again", exc_info=True)
            await asyncio.sleep(1)
            continue
        if message.get("type") != ASK:
            continue
        try:
            answer: dict[str, Any] = {"page": await asyncio.to_thread(read, message["asked"])}
        except DomainError as exc:
            answer = {"error": {**exc.body()["error"], "status": exc.status}}
        except Exception:  # noqa: BLE001 - this worker's fault: the asker answers 503
            logger.exception("log page for another host failed")
            continue
        try:
            await layer.send(message["reply"], {"type": ANSWER, **answer})
        except Exception:  # noqa: BLE001 - the asker gave up, or Redis is away: it answers 503
            logger.warning("log page answer not sent", exc_info=True)
