"""Blocking file work run off the event loop, stopped when the call is cancelled."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


async def in_thread(work: Callable[[threading.Event], T]) -> T:
    """Run ``work(stop)`` in a thread; when the awaiting task is cancelled (the call was
    cancelled or its claim lost), ``stop`` is set so a long walk ends at its next check instead
    of running on unseen: a thread cannot be killed, only asked."""
    stop = threading.Event()
    try:
        return await asyncio.to_thread(work, stop)
    except asyncio.CancelledError:
        stop.set()
        raise
