"""A failing channel layer costs the turn barrier its early wake-up, nothing else: waiters fall
back to the periodic re-check, answer 200 by their ``wait`` and never see the failure.

The layers here are real ``RedisChannelLayer``s, pointed at a port where nothing listens, at a
server that accepts connections and never answers, or (on the Redis run) at a proxy in front of
the real Redis that stops forwarding or drops its connections mid-wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import HttpCommunicator
from django.conf import settings
from django.test import override_settings

from config.asgi import application
from conversations.barrier import RECHECK_SECONDS
from tests.ports import free_port
from tests.waits import until

from .barrier_helpers import (
    LATE_SECONDS,
    BarrierTurn,
    barrier_get,
    barrier_turn,
    group_size,
    settle_in_thread,
)

pytestmark = pytest.mark.django_db(transaction=True)

needs_redis = pytest.mark.skipif(
    not settings.REDIS_URL, reason="needs the real Redis (set REDIS_URL; the team run does)"
)

DEADLINE_WAIT = 3.0  # the waiters nobody settles for
PER_TURN = 5


def _layer_at(url: str, backend: str = "tests.conversations.barrier_helpers.CountingRedisLayer"):
    return override_settings(
        CHANNEL_LAYERS={"default": {"BACKEND": backend, "CONFIG": {"hosts": [url]}}}
    )


@contextlib.contextmanager
def _closed_port() -> Iterator[str]:
    yield f"redis://127.0.0.1:{free_port()}/12"


@contextlib.contextmanager
def _silent_server() -> Iterator[str]:
    """Accepts connections (the kernel does, from the backlog) and never answers a byte."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(512)
        yield f"redis://127.0.0.1:{server.getsockname()[1]}/12"


def _assert_deadline_answers(answers, turn: BarrierTurn, wait: float) -> None:
    for answer in answers:
        assert answer.status == 200, answer.body
        assert answer.body == {
            "settled": False,
            "pending": [{"toolCallId": str(turn.call_ids[0]), "state": "ready"}],
        }
        assert wait - 0.05 <= answer.elapsed <= wait + LATE_SECONDS, answer.elapsed


def _assert_settled_answers(answers, settled_at: float, text: str) -> None:
    for answer in answers:
        assert answer.status == 200, answer.body
        assert answer.body["settled"] is True
        assert [r["modelContent"][0]["text"] for r in answer.body["results"]] == [text]
        # No notification can come through this layer: the periodic re-check found it.
        assert settled_at <= answer.finished_at <= settled_at + RECHECK_SECONDS + LATE_SECONDS


def _layer_failures(caplog) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "conversations.barrier" and "failed" in r.getMessage()
    ]


@pytest.mark.parametrize("server", [_closed_port, _silent_server], ids=["unreachable", "silent"])
async def test_a_failing_layer_leaves_waiters_to_the_recheck(user, caplog, server):
    caplog.set_level(logging.DEBUG, logger="conversations.barrier")
    idle = await sync_to_async(barrier_turn)(user)  # nobody settles it: answers at the deadline
    busy = await sync_to_async(barrier_turn)(user)  # settled mid-wait
    with server() as url:
        override = _layer_at(url)
        override.enable()
        try:
            layer = get_channel_layer()
            waiters = [
                asyncio.create_task(barrier_get(idle, wait=DEADLINE_WAIT)) for _ in range(PER_TURN)
            ] + [asyncio.create_task(barrier_get(busy, wait=30)) for _ in range(PER_TURN)]

            async def all_hold_the_layer() -> bool:
                return layer.channels_made == 2 * PER_TURN

            await until(all_hold_the_layer, what="the waiters never reached the layer")
        finally:
            override.disable()  # the settlement below publishes through the configured layer
        loop = asyncio.get_running_loop()
        # Room for a failing layer to end a wait early: a slow machine can only make this
        # check easier to pass. Only the waiters of the busy turn (wait 30 s) are checked
        # here: the idle ones' 3 s may be over after a slow start; that they did not answer
        # early is the lower bound on their elapsed time below.
        await asyncio.sleep(0.3)
        assert not any(w.done() for w in waiters[PER_TURN:])
        settled_at = loop.time()
        await sync_to_async(settle_in_thread, thread_sensitive=False)(busy.call_ids[0], "done")
        answers = await asyncio.wait_for(asyncio.gather(*waiters), timeout=40)

    _assert_deadline_answers(answers[:PER_TURN], idle, DEADLINE_WAIT)
    _assert_settled_answers(answers[PER_TURN:], settled_at, "done")
    assert _layer_failures(caplog), "the layer never failed: this test tested nothing"


class _RedisProxy:
    """A TCP proxy in front of the real Redis that can stop forwarding (Redis seems to hang:
    every read times out) or drop every connection and refuse new ones."""

    def __init__(self) -> None:
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> str:
        target = urlsplit(settings.REDIS_URL)
        self.target = (target.hostname or "127.0.0.1", target.port or 6379)
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"redis://127.0.0.1:{port}{target.path or '/12'}"

    async def _serve(self, reader, writer) -> None:
        self.writers.append(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self.writers.append(up_writer)
        await asyncio.gather(
            self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
        )

    async def _pipe(self, source, sink) -> None:
        with contextlib.suppress(OSError):
            while data := await source.read(65536):
                await self.flowing.wait()  # frozen: the bytes wait here
                sink.write(data)
                await sink.drain()
        sink.transport.abort()

    def freeze(self) -> None:
        self.flowing.clear()

    def drop(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.transport.abort()

    async def close(self) -> None:
        self.drop()
        self.flowing.set()
        assert self.server is not None
        await self.server.wait_closed()


@needs_redis
@pytest.mark.parametrize("fault", ["freeze", "drop"])
async def test_redis_failing_mid_wait_leaves_waiters_to_the_recheck(user, caplog, fault):
    caplog.set_level(logging.DEBUG, logger="conversations.barrier")
    idle = await sync_to_async(barrier_turn)(user)
    busy = await sync_to_async(barrier_turn)(user)
    proxy = _RedisProxy()
    url = await proxy.start()
    loop = asyncio.get_running_loop()
    try:
        override = _layer_at(url)
        override.enable()
        try:
            layer = get_channel_layer()
            started = loop.time()
            waiters = [
                asyncio.create_task(barrier_get(idle, wait=DEADLINE_WAIT + 2))
                for _ in range(PER_TURN)
            ] + [asyncio.create_task(barrier_get(busy, wait=30)) for _ in range(PER_TURN)]

            async def all_joined() -> bool:
                return (
                    await group_size(idle.turn_id, layer) == PER_TURN
                    and await group_size(busy.turn_id, layer) == PER_TURN
                )

            await until(all_joined, what="the waiters never joined through the proxy")
        finally:
            override.disable()
        # Asleep on the layer, most likely; a fault that comes sooner on a slow machine must
        # be survived the same way.
        await asyncio.sleep(0.3)
        getattr(proxy, fault)()
        # The busy turn's waiters (wait 30 s) have not answered; that the idle ones did not
        # answer early is the lower bound on their elapsed time below (their wait may be
        # over after a slow start).
        assert not any(w.done() for w in waiters[PER_TURN:])
        await asyncio.sleep(0.5)  # the fault takes effect before the settlement
        settled_at = loop.time()
        await sync_to_async(settle_in_thread, thread_sensitive=False)(busy.call_ids[0], "late")
        answers = await asyncio.wait_for(asyncio.gather(*waiters), timeout=40)
    finally:
        await proxy.close()

    for answer in answers[:PER_TURN]:  # started before the fault, answered at their deadline
        assert answer.status == 200, answer.body
        assert answer.body["settled"] is False
        assert answer.elapsed >= DEADLINE_WAIT + 2 - 0.05, answer.elapsed  # not before it
        assert answer.finished_at <= started + DEADLINE_WAIT + 2 + LATE_SECONDS
    _assert_settled_answers(answers[PER_TURN:], settled_at, "late")
    if fault == "drop":  # a frozen Redis only shows as quiet rounds, which are normal
        assert _layer_failures(caplog)


@needs_redis
async def test_many_waiters_on_redis_answer_within_their_wait(user, caplog):
    """Redis's blocking pop (5 s) outlives redis-py's socket timeout (5 s), and a cancelled
    receive can keep running until it: waiters must neither see that error nor wait for it."""
    caplog.set_level(logging.WARNING)
    idle = await sync_to_async(barrier_turn)(user)
    busy = await sync_to_async(barrier_turn)(user)
    loop = asyncio.get_running_loop()
    wait = 8.0
    waiters = [asyncio.create_task(barrier_get(idle, wait=wait)) for _ in range(20)] + [
        asyncio.create_task(barrier_get(busy, wait=30)) for _ in range(20)
    ]
    await asyncio.sleep(6)  # past the 5 s socket timeout, with rounds cancelled meanwhile
    # The busy turn's waiters (wait 30 s) have not answered; that the idle ones did not answer
    # early (at the socket timeout) is the lower bound on their elapsed time below.
    assert not any(w.done() for w in waiters[20:])
    settled_at = loop.time()
    await sync_to_async(settle_in_thread, thread_sensitive=False)(busy.call_ids[0], "six")
    answers = await asyncio.wait_for(asyncio.gather(*waiters), timeout=40)

    _assert_deadline_answers(answers[:20], idle, wait)
    for answer in answers[20:]:
        assert answer.status == 200, answer.body
        assert answer.body["settled"] is True
        assert settled_at <= answer.finished_at <= settled_at + RECHECK_SECONDS + LATE_SECONDS
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_client_that_goes_away_leaves_the_group_quietly(user, caplog):
    caplog.set_level(logging.WARNING)
    turn = await sync_to_async(barrier_turn)(user)
    communicator = HttpCommunicator(
        application,
        "GET",
        f"{turn.url}?wait=30",
        headers=[(b"host", b"testserver"), (b"authorization", f"Bearer {turn.token}".encode())],
    )
    await communicator.send_input({"type": "http.request", "body": b""})

    async def joined() -> bool:
        return await group_size(turn.turn_id) == 1

    await until(joined, what="the waiter never joined the turn's group")
    await communicator.send_input({"type": "http.disconnect"})
    # The view is cancelled and returns at once: the bound is far below its wait (30 s).
    await communicator.wait(timeout=15)

    assert await group_size(turn.turn_id) == 0
    assert await communicator.receive_nothing(timeout=0.1)  # nothing sent to a gone client
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
