"""Servers that die under a client: ``kill -9`` of a daphne running calls in its embedded
worker, and the Redis server of the channel layer restarted while events stream. Black-box, on
real daphne processes with a database of their own (``tests/realtime/daphne_helpers.py``): a
client that resubscribes with the last sequence it holds gets every event exactly once, in
order; every call settles once; ``manage.py check_integrity`` passes on the site's database.

The Redis test always runs its own ``redis-server`` on a free port, with or without the suite's
``REDIS_URL``: restarting a shared server would cut every other run using it (and the suite's
own channel layer), and a server of its own behaves the same in both CI configurations. It is
skipped only where ``redis-server`` is not installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.ports import free_port
from tests.realtime.daphne_helpers import (
    Cursor,
    Daphne,
    Rest,
    append,
    appended,
    site,
    subscribe,
    ws_connect,
)

from .helpers import assert_site_intact

pytestmark = pytest.mark.faults

DURABLE = {"replay", "conversation.event", "head"}


class Follower:
    """A client of one conversation that reconnects and resubscribes after its last sequence
    whenever the socket goes (or cannot be opened), checking every durable frame (``Cursor``)."""

    def __init__(self, token: str, cid: str) -> None:
        self.token, self.cursor = token, Cursor(cid)
        self.sessions = 0
        self.responses: set[str] = set()

    async def follow(
        self, server: Callable[[], Daphne], done: Callable[[], bool], timeout: float
    ) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, (
                f"stuck at {self.cursor.last} after {self.sessions} sessions"
            )
            try:
                ws = await ws_connect(server(), self.token)
            except (OSError, InvalidStatus, ConnectionClosed, TimeoutError):
                await asyncio.sleep(0.2)  # the server is down or restarting
                continue
            self.sessions += 1
            try:
                await subscribe(ws, self.cursor.cid, self.cursor.last)
                while not done():
                    async with asyncio.timeout(max(0.1, deadline - time.monotonic())):
                        self.take(json.loads(await ws.recv()))
            except (ConnectionClosed, OSError):
                pass
            finally:
                await ws.close()

    def take(self, frame: dict) -> None:
        if frame.get("type") not in DURABLE:
            return  # live state of calls: not part of the exactly-once log
        self.cursor.take(frame)
        events = frame["events"] if frame["type"] == "replay" else [frame.get("event")]
        for event in events:
            if event and event.get("type") == "tool_call_response":
                self.responses.add(event["toolCallId"])


def _assistant_calls(rest: Rest, cid: str, turn_id: str, *commands: str) -> list[str]:
    content = [
        {"type": "tool_call", "id": f"c{n}", "name": "bash", "arguments": {"command": command}}
        for n, command in enumerate(commands)
    ]
    body = {"messageId": "calls", "role": "assistant", "turnId": turn_id, "content": content}
    posted = rest.call("POST", f"/conversations/{cid}/messages", body)
    return [call["id"] for call in posted["toolCalls"]]


def _approve(rest: Rest, call_id: str) -> None:
    body = {"requestId": f"allow-{call_id}", "kind": "approval", "decision": "allow"}
    rest.call("POST", f"/tool-calls/{call_id}/resolution", body)


async def test_kill_9_of_a_daphne_running_calls(tmp_path):
    lease = "2"
    with site(tmp_path, TOOLCORE_WORKERS="1", TOOLCORE_CLAIM_LEASE=lease) as made:
        server = made.daphne(TOOLCORE_WS_HEAD_SECONDS="1")
        rest = Rest(server.port, made.token)
        cid = rest.conversation_create()
        turn_id = rest.turn_open(cid)
        calls = _assistant_calls(rest, cid, turn_id, "sleep 60", "sleep 61", "echo before")
        for call_id in calls:
            _approve(rest, call_id)
        states = lambda: {rest.call("GET", f"/tool-calls/{c}")["state"] for c in calls[:2]}  # noqa: E731
        deadline = time.monotonic() + 30
        while states() != {"running"}:
            assert time.monotonic() < deadline, states()
            await asyncio.sleep(0.1)
        follower = Follower(made.token, cid)
        # Subscribed, then the server dies under the client with the commands running.
        ws = await ws_connect(server, made.token)
        await subscribe(ws, cid, 0)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1):
                while True:
                    follower.take(json.loads(await ws.recv()))
        server.kill()
        with contextlib.suppress(ConnectionClosed):
            await ws.recv()
        rest.close()
        await asyncio.to_thread(server.start, server.port)  # the same site, a new process
        rest = Rest(server.port, made.token)
        # Its worker's sweep recovers what the dead one held; the client picks up where it was.
        await follower.follow(lambda: server, lambda: follower.responses >= set(calls), 60)
        outcomes = {
            c: rest.call("GET", f"/tool-calls/{c}")["response"]["payload"]["outcome"] for c in calls
        }
        rest.close()
        assert outcomes[calls[2]] == "completed"
        assert outcomes[calls[0]] == outcomes[calls[1]] == "indeterminate"
        assert follower.cursor.sequences == list(range(1, follower.cursor.last + 1))
        assert_site_intact(made)


@contextlib.contextmanager
def redis_server(port: int, log) -> Iterator[Callable[[], None]]:
    """A ``redis-server`` on ``port`` (no persistence); yields a function that restarts it."""
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1"]
    command += ["--save", "", "--appendonly", "no"]
    state: dict = {}

    def start() -> None:
        state["process"] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30  # bounds a hang: a loaded machine starts it late
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                return
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)

    def restart() -> None:
        state["process"].kill()  # kill -9: its groups and channels are gone with it
        state["process"].wait()
        start()

    start()
    try:
        yield restart
    finally:
        state["process"].kill()
        state["process"].wait()


EVENTS = 400


async def test_redis_restarted_mid_stream(tmp_path):
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    with (
        (tmp_path / "redis.log").open("ab") as log,
        redis_server(port, log) as restart_redis,
        site(tmp_path / "site", REDIS_URL=f"redis://127.0.0.1:{port}/0") as made,
    ):
        server = made.daphne(TOOLCORE_WS_HEAD_SECONDS="1")
        rest = Rest(server.port, made.token)
        cid = rest.conversation_create()
        rest.close()
        follower = Follower(made.token, cid)
        # The user message and EVENTS - 1 assistant messages through daphne's REST API, paced.
        writer = await append(made, server, cid, messages=EVENTS - 1, rest_every=10, pause=0.05)
        following = asyncio.create_task(
            follower.follow(lambda: server, lambda: follower.cursor.last >= EVENTS, 90)
        )
        while follower.cursor.last < EVENTS // 4:
            assert not following.done(), following
            await asyncio.sleep(0.05)
        await asyncio.to_thread(restart_redis)  # mid-stream
        await asyncio.sleep(1)
        await asyncio.to_thread(restart_redis)  # and once more, while it catches up
        assert await appended(writer, timeout=90) == EVENTS
        await following
        assert follower.cursor.sequences == list(range(1, EVENTS + 1))
        print(
            f"redis restarted twice: {follower.sessions} sessions, {follower.cursor.live} "
            f"events live, {follower.cursor.replayed} replayed"
        )
        assert_site_intact(made)
