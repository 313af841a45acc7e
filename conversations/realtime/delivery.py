"""What a conversation socket sends from the database and holds back for a slow socket: the
state of one subscription, how many events to read at once, ``replay`` frames cut to the replay
budget, and the ephemeral frames held while the socket does not drain, merged per call.

Backpressure: daphne buffers what a socket has not taken yet without limit, and says nothing
through ASGI. ``config.asgi`` puts the size of that buffer in
``scope["extensions"]["toolcore.backlog"]``; with it a slow socket never costs more than about
``DURABLE_HIGH_BYTES`` plus one frame: durable events stop being sent (they are read again from
the database once the socket drains), ephemeral ones are held, merged per call (never beyond
16 KiB of deltas) and dropped beyond ``HELD_MAX_BYTES``.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from projections.fold import merge_tool_updates
from projections.frames import REPLAY_BUDGET_BYTES, REPLAY_MAX_EVENTS
from projections.json_cost import json_cost
from projections.tool_output import TOOL_OUTPUT_MAX_BYTES

from .. import metrics
from .base import frame_text

# Backpressure (bytes the server holds for a socket that has not taken them yet).
DURABLE_HIGH_BYTES = 1024 * 1024  # above: durable frames wait (re-read from the database later)
EPHEMERAL_HIGH_BYTES = 256 * 1024  # above: ephemeral frames are held and merged
HELD_MAX_BYTES = 256 * 1024  # held ephemeral frames beyond this are dropped, oldest first
REPLAY_READ_EVENTS = 1000  # events read from the database at once (ten replay frames at most)
# ... and about this many bytes of them, going by the size of the events read (or sent live)
# last: a socket that drains slowly must not have its whole backlog re-read for each megabyte
# it takes, nor a few hundred large events read at once.
REPLAY_READ_BYTES = 2 * DURABLE_HIGH_BYTES
REPLAY_FIRST_READ_EVENTS = 10  # before any event was seen (an event may be 512 KiB)


@dataclass
class Subscription:
    conversation_id: str
    sent: int = 0  # the last sequence the client has (from a snapshot, replay or live frame)
    behind: bool = False  # events were held back for a slow socket: read them again
    event_chars: int = 0  # the mean length of the events read or sent last (0: none yet)
    last_frame: float = field(default_factory=time.monotonic)


class Held:
    """Ephemeral frames held for a slow socket: one per key, merged, oldest first."""

    def __init__(self) -> None:
        self.items: OrderedDict[tuple, tuple[dict[str, Any], int]] = OrderedDict()
        self.bytes = 0
        self.dropped = 0

    def __bool__(self) -> bool:
        return bool(self.items)

    def put(self, key: tuple, frame: dict[str, Any], merge: Any = None) -> None:
        held = self.items.pop(key, None)
        if held is not None:
            self.bytes -= held[1]
            merged = merge(held[0], frame) if merge is not None else frame
            if merged is None:  # cannot merge: the older one is dropped (a gap in ``rev``)
                self.dropped += 1
                metrics.live_dropped("slow_socket")
                merged = frame
            frame = merged
        size = len(frame_text(frame).encode("utf-8"))
        self.items[key] = (frame, size)
        self.bytes += size
        while self.bytes > HELD_MAX_BYTES and len(self.items) > 1:
            _, (_, old_size) = self.items.popitem(last=False)
            self.bytes -= old_size
            self.dropped += 1
            metrics.live_dropped("slow_socket")

    def take(self) -> list[dict[str, Any]]:
        frames = [frame for frame, _ in self.items.values()]
        self.items.clear()
        self.bytes = 0
        return frames


def merge_tool_updated(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
    update = merge_tool_updates(old["update"], new["update"])
    if update is None:
        return None
    return {**new, "update": update, "revFrom": old.get("revFrom", old["update"].get("rev"))}


def merge_live(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any] | None:
    joined = old["delta"] + new["delta"]
    if json_cost(joined) > TOOL_OUTPUT_MAX_BYTES:
        return None
    return {**new, "delta": joined}


def replay_read_limit(event_chars: int) -> int:
    """How many events to read at once: about ``REPLAY_READ_BYTES`` of events as long as the
    ones seen last, ``REPLAY_FIRST_READ_EVENTS`` before any was seen."""
    if event_chars <= 0:
        return REPLAY_FIRST_READ_EVENTS
    return max(1, min(REPLAY_READ_EVENTS, REPLAY_READ_BYTES // event_chars))


def replay_frames(cid: str, after: int, events: list[tuple[int, str]]) -> Iterator[tuple[str, int]]:
    """``replay`` frames of encoded events (consecutive from ``after + 1``) within the replay
    budget (100 events, 512 KiB of event JSON; the first always goes in), with each frame's
    ``to``; each made when asked for, so frames a slow socket does not get are never built."""
    start = 0
    head = f'{{"type":"replay","conversationId":"{cid}","from":'
    while start < len(events):
        used = 0
        stop = start
        while stop < len(events) and stop - start < REPLAY_MAX_EVENTS:
            size = len(events[stop][1].encode("utf-8"))
            if stop > start and used + size > REPLAY_BUDGET_BYTES:
                break
            used += size
            stop += 1
        frm = events[start - 1][0] if start else after
        to = events[stop - 1][0]
        body = ",".join(text for _, text in events[start:stop])
        yield f'{head}{frm},"to":{to},"events":[{body}]}}', to
        start = stop
