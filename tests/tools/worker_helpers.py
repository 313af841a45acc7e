"""Running real workers in tests: a worker's event loop on a thread of its own."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from django.db import connections

from conversations.models import ConversationEvent
from tools.runtime.worker import Worker


@contextlib.contextmanager
def running_worker(**kwargs: Any) -> Iterator[Worker]:
    """A ``Worker(**kwargs)`` running until the block ends (then stopped and joined)."""
    worker = Worker(**kwargs)
    started = threading.Event()
    state: dict[str, Any] = {}

    async def main() -> None:
        state["loop"] = asyncio.get_running_loop()
        state["stop"] = asyncio.Event()
        started.set()
        await worker.run(state["stop"])

    thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    thread.start()
    started.wait(5)
    try:
        yield worker
    finally:
        state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(15)
        assert not thread.is_alive(), "the worker did not stop"
        connections.close_all()


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, every: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns something truthy (and return that)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"not within {timeout} s")


def response_of(call_id: Any) -> dict[str, Any] | None:
    event = ConversationEvent.objects.filter(tool_call_id=call_id).first()
    return None if event is None else event.payload
