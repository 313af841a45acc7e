"""``/ws/conversations/``: durable events exactly once, and ephemeral updates (docs/realtime.md).
The workbench's ``/ws/workbench/`` is the runtime's (``tools/runtime/launches/consumer.py``), on
the same base (``realtime/base.py``).

Exactly once, in order, without a gap, whatever the channel layer drops or reorders: a
subscription joins its group *before* it reads the database, so nothing committed afterwards is
missed; it remembers the last sequence it sent (``sent``) and drops anything at or below it; an
event beyond ``sent + 1`` means something was lost on the way, and the missing range is read
from the database and sent as ``replay`` frames. An idle subscription checks the head every
``TOOLCORE_WS_HEAD_SECONDS`` (30 s) and tells the client with a ``head`` frame, so even a lost
*last* event is noticed.

Channels hands a consumer one message at a time, so a subscription's database read and the live
messages that arrive meanwhile never interleave: they wait in the channel layer. A background
ticker (the head, flushing a slow socket) takes the same lock. Credentials are re-checked for
every socket of the process at once (``ws_auth.CredentialWatch``). A socket that does not take
what it is sent is spared as ``delivery.py`` says (backpressure).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any
from uuid import UUID

from django.conf import settings
from pydantic import TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from .. import selectors
from ..api.outages import OUTAGES, RETRY_AFTER_SECONDS, outage_noted, unavailable_frame
from ..api.schemas.conversations import ApprovalIn, InputIn, ResolutionIn
from ..bodies import field_of, strict_loads
from ..detached import socket_database
from ..errors import DomainError, NotFound, ValidationFailed
from ..models import Conversation
from ..services.interactions import call_resolve
from ..services.publish import conversation_group, live_layer_alias, unpack
from ..snapshots import snapshot_read
from .base import (
    CLOSE_TOO_BIG,
    CLOSE_UNAUTHENTICATED,
    ReleasedConsumer,
    frame_text,
    group_discard,
    too_big,
)
from .delivery import (
    DURABLE_HIGH_BYTES,
    EPHEMERAL_HIGH_BYTES,
    Held,
    Subscription,
    merge_live,
    merge_tool_updated,
    replay_frames,
    replay_read_limit,
)
from .ws_auth import credential_watch

logger = logging.getLogger(__name__)

PROTOCOL_VERSION = 1
MAX_SUBSCRIPTIONS = 100  # conversations one socket follows at once
DRAIN_WAIT_SECONDS = 0.1  # how long a replay waits for a slow socket before it yields
BUSY_TICK_SECONDS = 0.02  # the ticker's period while something waits for the socket to drain

_RESOLUTION = TypeAdapter(ResolutionIn)


class ConversationConsumer(ReleasedConsumer):
    """``/ws/conversations/`` (docs/realtime.md)."""

    endpoint = "conversations"

    @property
    def channel_layer_alias(self) -> str:  # type: ignore[override]
        """The live layer (Redis pub/sub) when configured: its conversation groups are there."""
        return live_layer_alias()

    async def connect(self) -> None:
        self.subs: dict[str, Subscription] = {}
        self.held = Held()
        self.lock = asyncio.Lock()
        self.wake = asyncio.Event()
        self.ticker: asyncio.Task | None = None
        self.user = self.scope.get("user")
        await self.accept()
        if self.user is None or not self.user.is_authenticated:
            await self.refuse()
            return
        await self.send(frame_text({"type": "hello", "protocolVersion": PROTOCOL_VERSION}))
        credential_watch().add(self, self.scope.get("auth", {}), self.user.pk, self._revoked)
        self.ticker = asyncio.create_task(self._tick())

    async def _revoked(self) -> None:
        await self.close(code=CLOSE_UNAUTHENTICATED)

    async def release(self) -> None:
        await super().release()
        ticker, self.ticker = getattr(self, "ticker", None), None
        if ticker is not None:
            ticker.cancel()
        for cid in list(getattr(self, "subs", {})):
            await self._leave(cid)

    # --- client frames ---------------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        raw = text_data if text_data is not None else bytes_data
        if raw is None:
            return
        if too_big(raw):
            await self.close(code=CLOSE_TOO_BIG)
            return
        try:
            frame = strict_loads(raw)
        except ValidationFailed as exc:
            await self._error(exc.code, exc.message, field=exc.field)
            return
        except ValueError:
            await self._error("malformed_json", "The frame is not valid JSON.")
            return
        if not isinstance(frame, dict):
            await self._error("validation_error", "A frame is a JSON object.", field="type")
            return
        kind = frame.get("type")
        handler = (
            {
                "subscribe": self._subscribe,
                "unsubscribe": self._unsubscribe,
                "resolve": self._resolve,
            }.get(kind)
            if isinstance(kind, str)
            else None
        )
        if handler is None:
            if kind is None:
                await self._error("validation_error", "type: field required.", field="type")
            else:
                await self._error(
                    "unknown_type",
                    "Unknown frame type; expected subscribe, unsubscribe or resolve.",
                    field="type",
                )
            return
        async with self.lock:
            try:
                await handler(frame)
            except OUTAGES as exc:
                await self._unavailable(kind, frame, exc)

    async def _unavailable(self, kind: str, frame: dict[str, Any], exc: BaseException) -> None:
        """The database or the channel layer failed while a frame was handled: nothing was
        written (a resolution is one transaction), a subscription half made is dropped, and the
        client is told it may send the frame again (an ``error`` frame, code ``unavailable``)."""
        logger.warning("websocket %s frame put off: %s", kind, exc)
        echo: dict[str, Any] = {}
        if kind in ("subscribe", "unsubscribe"):
            cid = self._conversation_id(frame)
            if cid:
                await self._leave(cid)
            echo["conversationId"] = frame.get("conversationId")
        else:
            echo["toolCallId"] = frame.get("toolCallId")
            echo["requestId"] = frame.get("requestId")
        echo = {k: v for k, v in echo.items() if isinstance(v, str)}
        await self.send(frame_text(unavailable_frame(exc, **echo)))

    async def _error(self, code: str, message: str, **extra: Any) -> None:
        frame: dict[str, Any] = {"type": "error", "code": code, "message": message}
        frame.update({k: v for k, v in extra.items() if v is not None})
        await self.send(frame_text(frame))

    def _conversation_id(self, frame: dict[str, Any]) -> str | None:
        value = frame.get("conversationId")
        if not isinstance(value, str):
            return None
        try:
            return str(UUID(value))
        except ValueError:
            return ""

    async def _subscribe(self, frame: dict[str, Any]) -> None:
        cid = self._conversation_id(frame)
        after = frame.get("after")
        if cid is None:
            await self._error(
                "validation_error", "conversationId: a string is required.", field="conversationId"
            )
            return
        if after is not None and (
            isinstance(after, bool) or not isinstance(after, int) or after < 0
        ):
            await self._error(
                "validation_error",
                "after: a sequence (an integer ≥ 0) or null.",
                field="after",
                conversationId=frame.get("conversationId"),
            )
            return
        if not cid:
            await self._not_found(frame.get("conversationId"))
            return
        if cid not in self.subs and len(self.subs) >= MAX_SUBSCRIPTIONS:
            await self._error(
                "too_many_subscriptions",
                f"A socket follows at most {MAX_SUBSCRIPTIONS} conversations; unsubscribe first.",
                conversationId=cid,
            )
            return
        # Join first, read second: whatever commits from now on reaches this consumer.
        await self.channel_layer.group_add(conversation_group(cid), self.channel_name)
        sub = Subscription(cid)
        self.subs[cid] = sub
        self.wake.set()  # the ticker's next head check includes this subscription
        try:
            start = await self._start(cid, after)
        except NotFound:
            await self._leave(cid)
            await self._not_found(cid)
            return
        if start is not None:  # a snapshot: the client holds everything up to its sequence
            reason, snapshot = start
            sub.sent = snapshot["lastSequence"]
            await self._send_about(
                sub,
                {"type": "snapshot", "conversationId": cid, "reason": reason, "snapshot": snapshot},
            )
            return
        sub.sent = after
        await self._fill(sub)

    async def _not_found(self, cid: Any) -> None:
        await self._error(
            "not_found",
            "Conversation not found.",
            conversationId=cid if isinstance(cid, str) else None,
        )

    @socket_database
    def _start(self, cid: str, after: int | None) -> tuple[str, dict[str, Any]] | None:
        """A snapshot (with its reason) when the client cannot replay from ``after``: none
        (``initial``), beyond the head (``cursor_ahead``), or older than what was kept
        (``gap_expired``); else None (replay from ``after``). Owner-scoped: ``NotFound``."""
        reason = None
        if after is None:
            reason = "initial"
        else:
            last, events = selectors.replay_read(self.user, cid, after=after, limit=1)
            if after > last:
                reason = "cursor_ahead"
            elif events and events[0][0] != after + 1:
                reason = "gap_expired"
        if reason is None:
            return None
        envelope = len(
            frame_text(
                {"type": "snapshot", "conversationId": cid, "reason": reason, "snapshot": None}
            )
        ) - len("null")
        return reason, snapshot_read(self.user, cid, envelope_bytes=envelope)

    async def _unsubscribe(self, frame: dict[str, Any]) -> None:
        cid = self._conversation_id(frame)
        if cid is None:
            await self._error(
                "validation_error", "conversationId: a string is required.", field="conversationId"
            )
            return
        if cid:
            await self._leave(cid)

    async def _leave(self, cid: str) -> None:
        if self.subs.pop(cid, None) is not None:
            await group_discard(self.channel_layer, conversation_group(cid), self.channel_name)

    async def _resolve(self, frame: dict[str, Any]) -> None:
        """The REST resolution (``POST /tool-calls/{id}/resolution``) over the socket: the same
        body and rules; the answer is a ``resolved`` frame with the REST answer's fields."""
        call_id = frame.get("toolCallId")
        request_id = frame.get("requestId")
        echo = {
            "toolCallId": call_id if isinstance(call_id, str) else None,
            "requestId": request_id if isinstance(request_id, str) else None,
        }
        if not isinstance(call_id, str):
            await self._error(
                "validation_error",
                "toolCallId: a string is required.",
                field="toolCallId",
                **echo,
            )
            return
        body = {k: v for k, v in frame.items() if k not in ("type", "toolCallId")}
        try:
            payload = _RESOLUTION.validate_python(body)
        except PydanticValidationError as exc:
            first = exc.errors()[0]
            where = field_of({**first, "loc": ("body", *first.get("loc", ()))})
            await self._error(
                "validation_error",
                f"{where}: {first.get('msg', 'invalid value')}",
                field=where,
                **echo,
            )
            return
        try:
            answer = await self._resolve_db(call_id, payload)
        except DomainError as exc:
            await self._error(exc.code, exc.message, field=exc.field, **echo)
            return
        await self.send(frame_text({"type": "resolved", **echo, **answer}))

    @socket_database
    def _resolve_db(self, call_id: str, payload: ApprovalIn | InputIn) -> dict[str, Any]:
        call, _ = selectors.call_for(self.user, call_id)
        return call_resolve(
            call_id=call.pk if call is not None else call_id,
            user=self.user,
            request_id=payload.requestId,
            resolution=payload.to_resolution(),
        )

    # --- durable events --------------------------------------------------------------------

    def _backlog(self) -> int:
        """Bytes sent to this socket that it has not taken yet (0 when the server cannot say)."""
        probe = self.scope.get("extensions", {}).get("toolcore.backlog")
        if probe is None:
            return 0
        try:
            return probe() or 0
        except Exception:  # noqa: BLE001 - the transport is gone: the socket is closing
            return 0

    async def _send_about(self, sub: Subscription, frame: dict[str, Any] | str) -> None:
        await self.send(frame if isinstance(frame, str) else frame_text(frame))
        sub.last_frame = time.monotonic()

    async def _drained(self, limit: int) -> bool:
        """Whether the socket's backlog is at most ``limit`` now or within a short wait."""
        if self._backlog() <= limit:
            return True
        deadline = time.monotonic() + DRAIN_WAIT_SECONDS
        while time.monotonic() < deadline:
            await asyncio.sleep(0.002)
            if self._backlog() <= limit:
                return True
        return False

    async def _fill(self, sub: Subscription) -> None:
        """Send ``replay`` frames from ``sub.sent`` up to the head, read from the database. A
        socket that does not drain leaves the rest for the ticker (``sub.behind``): no frame
        is sent while the backlog is above ``DURABLE_HIGH_BYTES``, not even within one read."""
        while True:
            if not await self._drained(DURABLE_HIGH_BYTES):
                sub.behind = True
                self.wake.set()
                return
            try:
                last, events = await self._read(
                    sub.conversation_id, sub.sent, replay_read_limit(sub.event_chars)
                )
            except NotFound:
                await self._gone(sub)
                return
            if not events:
                sub.behind = False
                return
            sub.event_chars = sum(len(text) for _, text in events) // len(events)
            for frame, to in replay_frames(sub.conversation_id, sub.sent, events):
                if self.subs.get(sub.conversation_id) is not sub:
                    return  # unsubscribed meanwhile
                if not await self._drained(DURABLE_HIGH_BYTES):
                    sub.behind = True  # the rest is read again once the socket drains
                    self.wake.set()
                    return
                await self._send_about(sub, frame)
                sub.sent = to
            if sub.sent >= last:
                sub.behind = False
                return

    @socket_database
    def _read(self, cid: str, after: int, limit: int) -> tuple[int, list[tuple[int, str]]]:
        return selectors.replay_read(self.user, cid, after=after, limit=limit)

    async def _gone(self, sub: Subscription) -> None:
        """The conversation was deleted (or changed owner) while followed."""
        await self._leave(sub.conversation_id)
        await self._not_found(sub.conversation_id)

    async def _event(self, message: dict[str, Any]) -> None:
        cid = message.get("conversationId")
        sub = self.subs.get(cid)
        if sub is None:
            return
        sequence = message["event"]["sequence"]
        if sequence <= sub.sent:
            return  # already sent (replayed, or a duplicate)
        if sub.behind:
            return  # the ticker reads it from the database once the socket drains
        if sequence == sub.sent + 1:
            if self._backlog() <= DURABLE_HIGH_BYTES:
                text = frame_text(
                    {"type": "conversation.event", "conversationId": cid, "event": message["event"]}
                )
                await self._send_about(sub, text)
                sub.sent = sequence
                sub.event_chars = len(text)  # what the next read may expect
            else:
                sub.behind = True  # a slow socket: the database has it when it drains
                self.wake.set()
            return
        await self._fill(sub)  # a gap: something was lost or reordered on the way

    # --- ephemeral updates -----------------------------------------------------------------

    async def _ephemeral(self, message: dict[str, Any]) -> None:
        cid = message.get("conversationId")
        sub = self.subs.get(cid)
        if sub is None:
            return
        kind = message["type"]
        frame = {k: v for k, v in message.items()}
        if not self.held and self._backlog() <= EPHEMERAL_HIGH_BYTES:
            await self._send_about(sub, frame)
            return
        if kind == "tool.updated":
            key = ("tool", cid, message["update"].get("toolCallId"))
            self.held.put(key, frame, merge_tool_updated)
        elif kind == "conversation.live":
            key = (
                "live",
                cid,
                message.get("turnId"),
                message.get("kind"),
                message.get("providerCallId"),
            )
            self.held.put(key, frame, merge_live)
        elif kind == "tool_call.changed":
            call = message.get("call") or {}
            self.held.put(("call", cid, call.get("id") or message.get("removed")), frame)
        else:  # queue.changed: the latest stands
            self.held.put((kind, cid), frame)
        self.wake.set()

    async def _flush_held(self) -> None:
        if not self.held or self._backlog() > EPHEMERAL_HIGH_BYTES:
            return
        for frame in self.held.take():
            sub = self.subs.get(frame.get("conversationId"))
            if sub is not None:
                await self._send_about(sub, frame)

    # --- channel-layer messages --------------------------------------------------------------

    async def dispatch(self, message: dict[str, Any]) -> None:
        kind = message.get("type", "")
        if kind.startswith("websocket."):
            await super().dispatch(message)
            return
        async with self.lock:
            for item in unpack(message):
                try:
                    await self._route(item)
                except OUTAGES as exc:
                    outage_noted(exc, "websocket")
                    # A gap could not be filled from the database now: the ticker tries again.
                    logger.warning("websocket event put off: %s", exc)
                    sub = self.subs.get(item.get("conversationId"))
                    if sub is not None:
                        sub.behind = True
                        self.wake.set()

    async def _route(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "conversation.event":
            await self._event(message)
        elif kind in ("tool.updated", "tool_call.changed", "conversation.live", "queue.changed"):
            await self._ephemeral(message)
        # Anything else (a newer server's message during an upgrade) is not for this client.

    # --- the ticker: head frames, a slow socket ----------------------------------------------

    async def _tick(self) -> None:
        head_every = settings.TOOLCORE_WS_HEAD_SECONDS
        try:
            while True:
                busy = bool(self.held) or any(s.behind for s in self.subs.values())
                if busy:
                    await asyncio.sleep(BUSY_TICK_SECONDS)
                else:
                    self.wake.clear()
                    now = time.monotonic()
                    due = [s.last_frame + head_every for s in self.subs.values()]
                    wait = max(0.0, min(due) - now) if due else None  # None: until woken
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.wake.wait(), wait)
                async with self.lock:
                    try:
                        await self._duties(head_every)
                        outage = False
                    except OUTAGES as exc:
                        outage_noted(exc, "websocket")
                        logger.warning("websocket duties put off: %s", exc)
                        outage = True
                if outage:  # not a busy loop against a database that is away
                    await asyncio.sleep(RETRY_AFTER_SECONDS)
        except asyncio.CancelledError:
            pass
        except Exception:  # noqa: BLE001 - a dead ticker must not go unnoticed
            logger.exception("websocket ticker failed; closing the socket")
            await self.close(code=1011)

    async def _duties(self, head_every: float) -> None:
        now = time.monotonic()
        for sub in list(self.subs.values()):
            if sub.behind and self._backlog() <= DURABLE_HIGH_BYTES:
                await self._fill(sub)
        await self._flush_held()
        idle = [s for s in self.subs.values() if not s.behind and now - s.last_frame >= head_every]
        if idle:
            heads = await self._heads([s.conversation_id for s in idle])
            for sub in idle:
                head = heads.get(sub.conversation_id)
                if head is None:
                    await self._gone(sub)
                    continue
                if head > sub.sent:
                    await self._fill(sub)  # the last event was lost on the way
                if not sub.behind:
                    await self._send_about(
                        sub,
                        {
                            "type": "head",
                            "conversationId": sub.conversation_id,
                            "sequence": sub.sent,
                        },
                    )

    @socket_database
    def _heads(self, cids: list[str]) -> dict[str, int]:
        rows = Conversation.objects.filter(pk__in=cids, owner_id=self.user.pk).values_list(
            "pk", "last_sequence"
        )
        return {str(pk): last for pk, last in rows}
