"""Live output: the text of a running command as coalesced ``tool.updated`` updates
(docs/execution.md): at most one a call every 100 ms, each at most 16 KiB of JSON."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from projections.json_cost import json_cost, json_size
from projections.tool_output import append_tool_output

LIVE_INTERVAL_SECONDS = 0.1
LIVE_UPDATE_MAX_BYTES = 16 * 1024
_DELTA_MAX_COST = LIVE_UPDATE_MAX_BYTES - json_size({"outputDelta": ""})


class LiveOutput:
    """The live ``tool.updated`` output of one call: fed text, it yields coalesced updates.

    It keeps the bounded output of everything fed (``append_tool_output``, linear) and gives an
    update at most once per ``interval``: ``{"outputDelta": text}`` when the text fed since the
    last update fits whole in ``LIVE_UPDATE_MAX_BYTES`` of JSON with its key, else ``{"output":
    <the bounded output>}``, which replaces the output (≤ 16 KiB of JSON by construction).
    Applying every update in order with ``projections.fold.apply_tool_update`` gives
    ``bound_tool_output`` of all the text. Memory is bounded: each text is folded into the
    bounded output when fed (folding larger batches measured slower: the copies leave the CPU
    cache), and pending delta text is dropped, never queued, once it no longer fits a delta.
    The text must be clean (``on_output`` gives it so).
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        interval: float = LIVE_INTERVAL_SECONDS,
    ) -> None:
        self._clock, self.interval = clock, interval
        self.output: dict[str, Any] | None = None
        self._pending: list[str] = []
        self._pending_cost = 0
        self._replace = False
        self._dirty = False
        self._last: float | None = None
        self._closed = False
        self._wake: asyncio.Event | None = None

    def feed(self, text: str) -> None:
        if not text:
            return
        self.output = append_tool_output(self.output, text)
        self._dirty = True
        if not self._replace:
            # Every code point costs at least 1: a long text is too long without costing it.
            if len(text) <= _DELTA_MAX_COST:
                self._pending_cost += json_cost(text)
            if len(text) <= _DELTA_MAX_COST and self._pending_cost <= _DELTA_MAX_COST:
                self._pending.append(text)
            else:
                self._pending.clear()
                self._replace = True
        if self._wake is not None:
            self._wake.set()

    def due_in(self) -> float | None:
        """Seconds until the pending update may go (0: now); None when nothing is pending."""
        if not self._dirty:
            return None
        if self._last is None:
            return 0.0
        return max(0.0, self._last + self.interval - self._clock())

    def take(self) -> dict[str, Any] | None:
        """The pending update if it is due, else None."""
        return self._update() if self.due_in() == 0.0 else None

    def flush(self) -> dict[str, Any] | None:
        """The pending update now, due or not (None when nothing is pending)."""
        return self._update() if self._dirty else None

    def _update(self) -> dict[str, Any]:
        if self._replace:
            update: dict[str, Any] = {"output": self.output}
        else:
            update = {"outputDelta": "".join(self._pending)}
        self._pending, self._pending_cost = [], 0
        self._replace = self._dirty = False
        self._last = self._clock()
        return update

    async def pump(self, send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        """Send each update once due, until :meth:`close`; then the last one, once due too.

        A slow ``send`` only merges more text into the next update.
        """
        if self._wake is None:
            self._wake = asyncio.Event()
        while True:
            delay = self.due_in()
            if delay is None:
                if self._closed:
                    return
                self._wake.clear()
                await self._wake.wait()
            elif delay > 0:
                await asyncio.sleep(delay)
            else:
                await send(self._update())

    def close(self) -> None:
        """No more text: :meth:`pump` sends what is pending and returns."""
        self._closed = True
        if self._wake is not None:
            self._wake.set()
