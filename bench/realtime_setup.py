"""What the realtime benches share: Django on the bench database with its user and token, the
daphne processes on it, the conversations they subscribe to, the websocket clients, and the
units of the table.

Nothing is imported from bench/_setup.py until a bench runs (``Bench``): it sets the benches'
environment, which ``bench/realtime.py`` does once its command line is parsed.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any

from realtime_peers import Daphne

KIB = 1024


def rate(value: float) -> str:
    return f"{value:,.0f}/s"


def micros(value: float) -> str:
    return f"{value * 1e6:.0f} µs"


def kib(value: float) -> str:
    return f"{value / KIB:.1f} KiB"


class Bench:
    """Django on a throw-away database (bench/_setup.py), the bench user and its token, and the
    environment of the daphne processes (same database, no embedded tool workers)."""

    def __init__(self, folder: Path, quick: bool) -> None:
        from _setup import django_on_bench_database

        self.folder = folder
        self.quick = quick
        self.connection = django_on_bench_database()
        from django.contrib.auth import get_user_model  # once Django is set up

        from conversations.api.auth import token_create

        self.vendor = self.connection.vendor
        self.user = get_user_model().objects.create(username="bench")
        _, self.token = token_create(user=self.user, name="bench")
        self.redis_url = os.environ.get("REDIS_URL", "").strip()

    def daphne(self, app: str, *, redis: bool = False) -> Daphne:
        from _setup import process_env

        env = process_env(
            self.connection,
            TOOLCORE_WORKERS="0",  # the realtime path only: no tool worker in the process
            ALLOWED_HOSTS="127.0.0.1,localhost",
        )
        if redis:
            env["REDIS_URL"] = self.redis_url
        else:
            env.pop("REDIS_URL", None)
        log = self.folder / f"daphne-{uuid.uuid4().hex[:8]}.log"
        return Daphne(app, env, log)

    def layers(self) -> list[tuple[str, bool]]:
        return [("in-memory", False)] + ([("Redis", True)] if self.redis_url else [])

    def close(self) -> None:
        from _setup import drop_bench_database
        from django.db import connections

        connections.close_all()
        if self.vendor == "postgresql":
            self.connection.close_pool()
        drop_bench_database(self.connection)


def stopped(daphne: Daphne) -> None:
    """Stop daphne; its stderr must hold no traceback."""
    errors = daphne.stop()
    if "Traceback" in errors:
        raise RuntimeError(f"daphne logged an error:\n{errors[-4000:]}")


def open_conversation(bench: Bench, title: str) -> tuple[Any, str]:
    """A conversation of the bench user with an open turn; the turn's id."""
    from _setup import conversation_with_turn

    return conversation_with_turn(bench.user, title)


# --- websocket clients -------------------------------------------------------------------------


async def ws_open(url: str, token: str | None = None) -> Any:
    from websockets.asyncio.client import connect

    headers = {"Authorization": f"Bearer {token}"} if token else None
    return await connect(
        url,
        additional_headers=headers,
        compression=None,  # daphne does not compress; neither does any server here
        max_size=None,
        open_timeout=60,
        ping_interval=None,
    )


async def subscribed(url: str, token: str | None, cid: str) -> Any:
    """A socket subscribed to ``cid``: on ``/ws/conversations/`` with ``after: null`` (its
    ``snapshot`` frame read), on ``/ws/bare/`` its ``subscribed`` frame read."""
    ws = await ws_open(url, token)
    await ws.send(json.dumps({"type": "subscribe", "conversationId": cid, "after": None}))
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), 60))
        if frame["type"] in ("snapshot", "subscribed"):
            return ws
        if frame["type"] != "hello":
            raise RuntimeError(f"unexpected frame {frame}")


# Sockets open and close at most this many at once: with Redis, a burst of ~100 subscriptions or
# disconnections exhausts the channel layer's connection pool (redis-py's default of 100
# connections, which then refuses instead of waiting) and some of them fail.
AT_ONCE = 25


async def open_many(url: str, token: str | None, cids: list[str]) -> list:
    sockets: list[Any] = []
    for start in range(0, len(cids), AT_ONCE):
        batch = cids[start : start + AT_ONCE]
        sockets += await asyncio.gather(*(subscribed(url, token, cid) for cid in batch))
    return sockets


async def close_all(sockets: list[Any]) -> None:
    for start in range(0, len(sockets), AT_ONCE):
        batch = sockets[start : start + AT_ONCE]
        await asyncio.gather(*(ws.close() for ws in batch), return_exceptions=True)
