"""End to end: real daphne processes (``daphne_helpers``), the ``websockets`` client, REST.

Black-box and without the suite's database (no ``django_db``): each test makes a site of its own
(a fresh SQLite file, or a fresh PostgreSQL database when the suite runs on PostgreSQL), writes
through ``manage.py``, the REST API or a process of its own (``appender``), and reads through
``/ws/conversations/`` as a client on another machine would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import secrets
import sys
import time
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from .daphne_helpers import (
    INHERITED,
    ROOT,
    Browser,
    Cursor,
    Rest,
    append,
    appended,
    receive,
    redis_url,
    site,
    subscribe,
    uses_postgresql,
    ws_connect,
)

pytestmark = pytest.mark.e2e

EVENTS = 5000


@pytest.fixture
def e2e(tmp_path):
    with site(tmp_path) as made:
        yield made
    errors = made.errors()
    assert not errors, "daphne logged errors:\n" + "\n".join(errors)


async def test_a_client_reconnecting_at_random_gets_every_sequence_once_in_order(e2e):
    # The head tick finds what the appender wrote without publishing (SQLite: the in-memory
    # layer does not cross processes) when no published event follows it.
    server = e2e.daphne(TOOLCORE_WS_HEAD_SECONDS="1")
    rest = Rest(server.port, e2e.token)
    cid = rest.conversation_create()
    seed = secrets.randbits(32)
    chance = random.Random(seed)
    cursor = Cursor(cid)
    # A user message, then assistant messages: of every twenty, sixteen straight into the
    # database by the appender, four through daphne's REST API (published by daphne, so the
    # first of them reveals a gap, the others can go out live).
    writer = await append(e2e, server, cid, messages=EVENTS - 1, rest_every=20, rest_run=4)
    sessions = 0
    progress = (time.monotonic(), 0)
    while cursor.last < EVENTS:
        if cursor.last > progress[1]:
            progress = (time.monotonic(), cursor.last)
        stalled = time.monotonic() - progress[0]
        # A hang bound: no progress for this long on a loaded machine is stuck, not slow.
        assert stalled < 30, f"seed {seed}: stuck at {cursor.last} after {sessions} sessions"
        sessions += 1
        ws = await ws_connect(server, e2e.token)
        await subscribe(ws, cid, cursor.last)  # the first time: after 0
        # Gone after a random number of frames (0: before the server answered) or a random
        # time, whichever comes first, maybe while frames are on the way.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(chance.uniform(0, 0.3)):
                for _ in range(chance.randint(0, 12)):
                    cursor.take(json.loads(await ws.recv()))
                    if cursor.last == EVENTS:
                        break
        if chance.random() < 0.5:
            await ws.close()
        else:  # no closing handshake: the connection just drops
            ws.transport.abort()
            await ws.wait_closed()
    assert await appended(writer) == EVENTS

    # Subscribed at the end: nothing more, then a head at the last sequence.
    ws = await ws_connect(server, e2e.token)
    await subscribe(ws, cid, cursor.last)
    cursor.take(await receive(ws, timeout=5))
    await ws.close()
    assert cursor.sequences == list(range(1, EVENTS + 1)), seed
    assert cursor.live and cursor.replayed, (cursor.live, cursor.replayed)
    print(f"seed {seed}: {sessions} sessions, {cursor.live} live, {cursor.replayed} replayed")


LIVE_EVENTS = 500


@pytest.fixture
def postgresql_and_redis():
    if not (uses_postgresql() and redis_url()):
        pytest.skip(
            "two daphne processes share events through one PostgreSQL database and Redis; "
            "the in-memory channel layer does not cross processes (set DATABASE_URL and REDIS_URL)"
        )


async def test_two_daphnes_a_client_on_one_sees_what_the_other_appends_live(
    postgresql_and_redis, e2e
):
    watched, written = e2e.daphne(), e2e.daphne()
    cid = Rest(written.port, e2e.token).conversation_create()
    cursor = Cursor(cid)
    ws = await ws_connect(watched, e2e.token)
    await subscribe(ws, cid, 0)
    writer = await append(e2e, written, cid, messages=LIVE_EVENTS - 1)  # all through REST
    while cursor.last < LIVE_EVENTS:
        cursor.take(await receive(ws))
    assert await appended(writer) == LIVE_EVENTS
    await ws.close()
    assert cursor.sequences == list(range(1, LIVE_EVENTS + 1))
    # Every one live: the reader kept up, so nothing needed reading again.
    assert (cursor.live, cursor.replayed) == (LIVE_EVENTS, 0)


MiB = 1024 * 1024
BIG_TEXT_BYTES = 256 * 1024
BIG_MESSAGES = 192  # 48 MiB of events for a socket that does not read
WARM_MESSAGES = 16
# What a socket that does not read may cost daphne. The consumer sends no durable frame while
# the transport holds more than DURABLE_HIGH_BYTES (1 MiB), so that plus one frame (a replay page
# holds at most 512 KiB of events) waits in daphne; once the client reads, a replay reads about
# REPLAY_READ_BYTES (2 MiB) of events at a time. Serving the appends costs memory too: each
# 256 KiB post is parsed, checked and encoded a few times over, in threads of their own
# (measured: +8-11 MiB while the socket does not read, +11-16 MiB while it reads). Half of what
# was appended, 24 MiB, leaves room for that and is far below what a server without this
# backpressure holds (measured: +50 MiB with the limit lifted; +47-49 MiB while reading when a
# replay sent all it read at once). Kernel socket buffers (several MiB on loopback) are not the
# process's memory.
RSS_GROWTH_MAX = 24 * MiB


async def test_a_socket_that_does_not_read_costs_daphne_little_then_gets_everything(e2e):
    # glibc gives blocks of 128 KiB and more back to the system when they are freed: the RSS
    # then says what the process holds, not what the allocator kept of what it freed.
    server = e2e.daphne(MALLOC_MMAP_THRESHOLD_=str(128 * 1024))
    rest = Rest(server.port, e2e.token)
    cid = rest.conversation_create()
    turn_id = rest.turn_open(cid)
    # Warm up: the process serves events of this size to a reader that keeps up.
    reader = await ws_connect(server, e2e.token, max_size=4 * MiB)
    await subscribe(reader, cid, 0)
    warm = await append(
        e2e, server, cid, turn=turn_id, messages=WARM_MESSAGES, text_bytes=BIG_TEXT_BYTES
    )
    warmed = await appended(warm)
    warm_cursor = Cursor(cid)
    while warm_cursor.last < warmed:
        warm_cursor.take(await receive(reader))
    await reader.close()

    before = server.rss_bytes()
    # max_queue=1: the client stops reading from its socket at once; no pings to answer.
    stalled = await ws_connect(
        server, e2e.token, max_queue=1, max_size=4 * MiB, ping_interval=None, compression=None
    )
    # At the head: what it costs to replay a history is not what this test measures.
    await subscribe(stalled, cid, warmed)
    writer = await append(
        e2e, server, cid, turn=turn_id, messages=BIG_MESSAGES, text_bytes=BIG_TEXT_BYTES
    )
    samples = [before]
    while writer.returncode is None:
        samples.append(server.rss_bytes())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.05):
                await writer.wait()
    head = await appended(writer)
    for _ in range(20):  # and for a second after, while the consumer sees the last ones
        await asyncio.sleep(0.05)
        samples.append(server.rss_bytes())
    stalled_growth = max(samples) - before

    # It reads now: everything, once, in order, read again from the database.
    cursor = Cursor(cid)
    cursor.last = warmed
    while cursor.last < head:
        cursor.take(await receive(stalled))
        samples.append(server.rss_bytes())
    await stalled.close()
    reading_growth = max(samples) - before
    print(
        f"RSS {before / MiB:.1f} MiB; {BIG_MESSAGES * BIG_TEXT_BYTES / MiB:.0f} MiB appended "
        f"for a socket that did not read: at most +{stalled_growth / MiB:.1f} MiB; "
        f"while it read them: +{reading_growth / MiB:.1f} MiB"
    )
    assert stalled_growth <= RSS_GROWTH_MAX, stalled_growth / MiB
    assert reading_growth <= RSS_GROWTH_MAX, reading_growth / MiB
    assert cursor.sequences == list(range(warmed + 1, head + 1))
    assert cursor.replayed > 0


async def test_clients_closing_during_a_replay_leave_no_error_behind(e2e):
    # Regression: a frame sent after the client's close frame arrived, while the close reply
    # waited behind unsent frames, raised in daphne; the consumer died there without its
    # disconnect handler (its ticker and groups left behind) and daphne logged the error.
    server = e2e.daphne()
    cid = Rest(server.port, e2e.token).conversation_create()
    writer = await append(e2e, server, cid, messages=40, text_bytes=BIG_TEXT_BYTES)
    await appended(writer)
    for n in range(8):
        ws = await ws_connect(server, e2e.token, max_size=None)
        await subscribe(ws, cid, 0)
        await asyncio.sleep(0.02 * n)
        closer = asyncio.create_task(ws.close())
        with contextlib.suppress(ConnectionClosed):
            while True:  # what was sent before the close reply
                await ws.recv()
        await closer
    # Room for a late error line: a slow machine can only make "no error" easier to pass.
    await asyncio.sleep(0.5)
    assert server.alive()
    assert not server.errors()


# The sockets below are checked every second (TOOLCORE_WS_AUTH_CHECK_SECONDS=1); by default
# every 10 s. A close within 8 s is that check at work with room for a loaded machine.
CLOSED_WITHIN = 8


async def closed_code(ws) -> int:
    """The code the server closes ``ws`` with (frames before it are not expected)."""
    with pytest.raises(ConnectionClosed) as closed:
        frame = await receive(ws)
        raise AssertionError(f"a frame instead of the close: {frame}")
    assert closed.value.rcvd is not None, closed.value
    return closed.value.rcvd.code


async def test_missing_bad_or_revoked_credentials_close_the_socket_4401(e2e):
    server = e2e.daphne(TOOLCORE_WS_AUTH_CHECK_SECONDS="1")
    for token in (None, "tc_not-a-token"):
        assert await closed_code(await ws_connect(server, token, hello=False)) == 4401

    cid = Rest(server.port, e2e.token).conversation_create()
    token_id, token = await asyncio.to_thread(e2e.token_create)
    ws = await ws_connect(server, token)
    await subscribe(ws, cid, 0)  # an empty conversation: nothing comes until the close
    await asyncio.to_thread(e2e.token_revoke, token_id)  # by another process
    revoked = time.monotonic()
    assert await closed_code(ws) == 4401
    assert time.monotonic() - revoked < CLOSED_WITHIN  # checked every second
    assert await closed_code(await ws_connect(server, token, hello=False)) == 4401
    other = await ws_connect(server, e2e.token)  # the user's other token still works
    await other.close()


async def test_a_session_cookie_counts_on_a_same_origin_handshake_only(e2e):
    server = e2e.daphne(TOOLCORE_WS_AUTH_CHECK_SECONDS="1")
    rest = Rest(server.port, e2e.token)
    cid = rest.conversation_create()
    rest.turn_open(cid)
    browser = Browser(server)
    session = await asyncio.to_thread(browser.login, e2e.username, e2e.password)
    cookie = {"Cookie": f"sessionid={session}"}
    same = f"http://127.0.0.1:{server.port}"  # the origin of a page this server served
    allowed = f"http://localhost:{server.port}"  # one of ALLOWED_HOSTS, yet another origin

    # Same origin: the session says who it is (the owner's conversation replays).
    ws = await ws_connect(server, origin=same, additional_headers=cookie)
    await subscribe(ws, cid, 0)
    Cursor(cid).take(await receive(ws))
    # Another origin with the cookie: refused at the handshake, as any page a user visits
    # could open it.
    with pytest.raises(InvalidStatus) as refused:
        await ws_connect(server, origin=allowed, additional_headers=cookie, hello=False)
    assert refused.value.response.status_code == 403
    # A bearer header is judged alone, whatever the origin (a page cannot set it) ...
    bearer = await ws_connect(server, e2e.token, origin=allowed)
    await bearer.close()
    # ... but an origin outside ALLOWED_HOSTS is refused whatever it sends.
    with pytest.raises(InvalidStatus) as refused:
        await ws_connect(server, e2e.token, origin="http://elsewhere.example", hello=False)
    assert refused.value.response.status_code == 403

    # Logging out ends the session's socket too.
    await asyncio.to_thread(browser.logout)
    logged_out = time.monotonic()
    assert await closed_code(ws) == 4401
    assert time.monotonic() - logged_out < CLOSED_WITHIN


class Printer:
    """A client script run as a process of its own: each line it prints, as JSON."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls, script: Path, *args: str, **env: str) -> Printer:
        inherited = {k: os.environ[k] for k in INHERITED if k in os.environ}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-u",  # print() reaches the pipe at once
            str(script),
            *args,
            cwd=ROOT,
            env=inherited | env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(process)

    async def printed(self, timeout: float = 15) -> dict:
        async with asyncio.timeout(timeout):
            line = await self.process.stdout.readline()
        if not line:
            await self.process.wait()
            raise AssertionError((await self.process.stderr.read()).decode(errors="replace"))
        return json.loads(line)

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.terminate()
        await self.process.wait()


def readme_client(folder: Path, url: str) -> Path:
    """The client of the README's "Watching a conversation live", pointed at ``url``."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### Watching a conversation live") :]
    code = section[section.index("```python\n") + len("```python\n") :]
    code = code[: code.index("```")]
    default = 'URL = "ws://127.0.0.1:8000/ws/conversations/"'
    assert default in code, code
    script = folder / "watch.py"
    script.write_text(code.replace(default, f"URL = {url!r}"))
    return script


async def test_the_readme_client_prints_the_replayed_events_then_live_ones(e2e, tmp_path):
    server = e2e.daphne()
    rest = Rest(server.port, e2e.token)
    cid = rest.conversation_create()
    turn_id = rest.turn_open(cid)
    for n in range(3):
        rest.say(cid, turn_id, f"said-{n}", f"hello {n}")
    client = await Printer.start(readme_client(tmp_path, server.ws_url), e2e.token, cid)
    try:
        assert await client.printed() == {"type": "hello", "protocolVersion": 1}
        cursor = Cursor(cid)
        frames = []
        while cursor.last < 4:
            frames.append(await client.printed())
            cursor.take(frames[-1])
        assert (cursor.sequences, cursor.replayed) == ([1, 2, 3, 4], 4)
        said = [e["payload"]["content"][0]["text"] for f in frames for e in f["events"]]
        assert said == ["go", "hello 0", "hello 1", "hello 2"]
        await asyncio.to_thread(rest.say, cid, turn_id, "said-live", "and live")
        live = await client.printed()
        cursor.take(live)
        assert live["event"]["payload"]["content"][0]["text"] == "and live"
    finally:
        await client.stop()


async def test_the_example_client_resumes_after_the_server_restarts(e2e):
    server = e2e.daphne()
    rest = Rest(server.port, e2e.token)
    cid = rest.conversation_create()
    turn_id = rest.turn_open(cid)
    rest.say(cid, turn_id, "before", "before")
    client = await Printer.start(
        ROOT / "docs/examples/watch.py",
        cid,  # the token and the URL from the environment
        TOOLCORE_TOKEN=e2e.token,
        TOOLCORE_WS_URL=server.ws_url,
        WEBSOCKETS_BACKOFF_INITIAL_DELAY="0.5",  # reconnect quickly (the default waits ~5 s)
        WEBSOCKETS_BACKOFF_MIN_DELAY="0.5",
    )
    try:
        cursor = Cursor(cid)
        assert await client.printed() == {"type": "hello", "protocolVersion": 1}
        while cursor.last < 2:
            cursor.take(await client.printed())
        await asyncio.to_thread(server.restart)
        rest = Rest(server.port, e2e.token)
        for n in range(3):
            await asyncio.to_thread(rest.say, cid, turn_id, f"after-{n}", f"after {n}")
        while cursor.last < 5:  # from 3 on, once each: it resubscribed after 2
            frame = await client.printed()
            if frame["type"] != "hello":
                cursor.take(frame)
        assert cursor.sequences == [1, 2, 3, 4, 5]
    finally:
        await client.stop()


async def test_frames_up_to_1_mib_are_read_and_a_larger_one_closes_1009(e2e):
    server = e2e.daphne()
    ws = await ws_connect(server, e2e.token, max_size=None)
    exactly = '{"type":"dance","pad":"' + "x" * (1024 * 1024 - 25) + '"}'
    assert len(exactly.encode()) == 1024 * 1024
    await ws.send(exactly)
    assert (await receive(ws))["code"] == "unknown_type"  # read, refused, still open
    await ws.send("x" * (2 * 1024 * 1024))  # autobahn closes as soon as the header says so
    assert await closed_code(ws) == 1009


async def test_each_move_of_a_call_is_announced_once_on_the_socket(e2e):
    """A bash call posted and approved through REST: its subscriber gets one
    ``tool_call.changed`` per state, ``supervising``, ``awaiting_approval``, ``ready`` (no
    worker runs it), and no repeat of ``awaiting_approval`` when the approval is recorded."""
    server = e2e.daphne()
    rest = Rest(server.port, e2e.token)
    cid = await asyncio.to_thread(rest.conversation_create)
    turn_id = await asyncio.to_thread(rest.turn_open, cid)
    ws = await ws_connect(server, e2e.token)
    await subscribe(ws, cid, None)
    assert (await receive(ws))["type"] == "snapshot"
    block = {"type": "tool_call", "id": "p1", "name": "bash", "arguments": {"command": "true"}}
    body = {"messageId": "a-1", "role": "assistant", "turnId": turn_id, "content": [block]}
    posted = await asyncio.to_thread(rest.call, "POST", f"/conversations/{cid}/messages", body)
    (call,) = posted["toolCalls"]
    approval = {"requestId": "r1", "kind": "approval", "decision": "allow"}
    path = f"/tool-calls/{call['id']}/resolution"
    await asyncio.to_thread(rest.call, "POST", path, approval)
    states = []
    with contextlib.suppress(TimeoutError):
        while True:  # until one second passes without a frame
            frame = await receive(ws, timeout=1)
            if frame["type"] == "tool_call.changed" and "call" in frame:
                assert frame["call"]["id"] == call["id"]
                states.append(frame["call"]["state"])
    assert states == ["supervising", "awaiting_approval", "ready"]
    await ws.close()
    rest.close()
