"""config/http.py: synchronous views served whole on one thread of a bounded pool.

Through ``PooledASGIHandler`` itself (an ASGI communicator, no server), with views of a test
URLconf that record where and how they ran.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from asgiref.testing import ApplicationCommunicator
from channels.testing import HttpCommunicator
from django.core import signals
from django.db import connection
from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from config.http import PooledASGIHandler

pytestmark = pytest.mark.django_db(transaction=True)

HOST = [(b"host", b"testserver")]
seen: dict[str, list] = {}
_active = 0
_active_lock = threading.Lock()
_overlapped = threading.Event()  # two ``slow`` views ran at once


def _note(key: str, value) -> None:
    seen.setdefault(key, []).append(value)


@csrf_exempt
def where(request):
    _note("view", threading.current_thread().name)
    with connection.cursor() as cursor:  # opens this thread's connection
        cursor.execute("SELECT 1")
    _note("connection", id(connection))
    return JsonResponse({"thread": threading.current_thread().name, "body": request.body.decode()})


def slow(request):
    global _active
    with _active_lock:
        _active += 1
        _note("active", _active)
        if _active == 2:
            _overlapped.set()
    # A pool of two runs two at once: the first two wait for each other (the deadline only
    # bounds a pool that never does), whatever the machine's load.
    _overlapped.wait(30)
    # Room for a third to start, were the pool to allow one: a slow machine can only make
    # "never more" easier to pass, not fail it.
    time.sleep(0.05)
    with _active_lock:
        _active -= 1
    return HttpResponse("ok")


def boom(request):
    raise RuntimeError("boom")


def stream(request):
    def chunks():
        for i in range(3):
            yield f"part{i};".encode()

    return StreamingHttpResponse(chunks(), content_type="text/plain")


class _Endless:
    """A stream that never ends, counting the parts read and noting its close."""

    def __init__(self) -> None:
        self.read = 0

    def __iter__(self):
        return self

    def __next__(self) -> bytes:
        self.read += 1
        return b"x" * 1024

    def close(self) -> None:
        _note("stream_closed", self.read)


def endless(request):
    source = _Endless()
    _note("source", source)
    return StreamingHttpResponse(source, content_type="application/octet-stream")


async def asynchronous(request):
    _note("async", threading.current_thread().name)
    return HttpResponse("async")


urlpatterns = [
    path("where", where),
    path("slow", slow),
    path("boom", boom),
    path("stream", stream),
    path("endless", endless),
    path("async", asynchronous),
]


@pytest.fixture(autouse=True)
def _urls(settings):
    settings.ROOT_URLCONF = __name__
    settings.DEBUG = False
    settings.ALLOWED_HOSTS = ["testserver"]
    seen.clear()
    _overlapped.clear()
    started = lambda **kw: _note("started", threading.current_thread().name)  # noqa: E731
    finished = lambda **kw: _note("finished", threading.current_thread().name)  # noqa: E731
    signals.request_started.connect(started, weak=False)
    signals.request_finished.connect(finished, weak=False)
    yield
    signals.request_started.disconnect(started)
    signals.request_finished.disconnect(finished)


async def _get(handler, url: str, method: str = "GET", body: bytes = b"") -> dict:
    communicator = HttpCommunicator(handler, method, url, body=body, headers=HOST)
    return await communicator.get_response(timeout=10)


async def test_a_sync_request_runs_whole_on_one_pool_thread():
    handler = PooledASGIHandler(threads=2)
    answer = await _get(handler, "/where", "POST", b"hello")
    assert answer["status"] == 200
    body = json.loads(answer["body"])
    assert body["body"] == "hello"
    thread = body["thread"]
    assert thread.startswith("toolcore-http")
    # The signals, the middleware and the view all ran on that thread: no hop in between.
    assert seen["started"] == [thread]
    assert seen["view"] == [thread]
    assert seen["finished"] == [thread]


async def test_the_connection_goes_back_at_the_end_of_the_request():
    handler = PooledASGIHandler(threads=1)
    await _get(handler, "/where")
    # request_finished ran on the pool thread: its connection is closed (back to the pool).
    loop = asyncio.get_running_loop()
    still_open = await loop.run_in_executor(handler._pool, lambda: connection.connection)
    assert still_open is None


async def test_requests_beyond_the_pool_queue():
    handler = PooledASGIHandler(threads=2)
    answers = await asyncio.gather(*(_get(handler, "/slow") for _ in range(8)))
    assert [a["status"] for a in answers] == [200] * 8
    assert max(seen["active"]) == 2  # two at a time, never more


async def test_an_uncaught_error_is_a_500_not_a_dead_request():
    handler = PooledASGIHandler(threads=1)
    answer = await _get(handler, "/boom")
    assert answer["status"] == 500
    assert seen["finished"]  # the request still finished (connections given back)


@pytest.mark.parametrize("signal", ["request_started", "request_finished"])
async def test_an_outage_in_the_request_signals_is_a_503_or_the_answer_itself(signal):
    """A receiver of the request's signals meets the database away (a fault injected: a real
    ``OperationalError`` from a receiver): before the view, the answer is 503 ``unavailable``;
    after it (giving connections back), the view's own answer stands. Never daphne's bare 500."""
    from django.db import OperationalError

    def cut(**kwargs):
        raise OperationalError("the connection is closed")

    getattr(signals, signal).connect(cut, weak=False)
    try:
        answer = await _get(PooledASGIHandler(threads=1), "/where")
    finally:
        getattr(signals, signal).disconnect(cut)
    if signal == "request_started":
        assert answer["status"] == 503
        assert dict(answer["headers"])[b"Retry-After"] == b"1"
        assert "view" not in seen
    else:
        assert answer["status"] == 200
        assert json.loads(answer["body"])["thread"].startswith("toolcore-http")


async def test_a_streaming_response_is_sent_whole_then_closed():
    handler = PooledASGIHandler(threads=1)
    communicator = HttpCommunicator(handler, "GET", "/stream", headers=HOST)
    await communicator.send_input({"type": "http.request", "body": b""})
    start = await communicator.receive_output(timeout=10)
    assert start["status"] == 200
    body = b""
    while True:
        message = await communicator.receive_output(timeout=10)
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    assert body == b"part0;part1;part2;"
    await communicator.wait(timeout=5)
    assert seen["finished"]


async def test_a_stream_is_read_as_it_is_sent_and_stops_when_the_client_goes():
    handler = PooledASGIHandler(threads=1)
    communicator = HttpCommunicator(handler, "GET", "/endless", headers=HOST)
    await communicator.send_input({"type": "http.request", "body": b""})
    start = await communicator.receive_output(timeout=10)
    assert start["status"] == 200
    first = await communicator.receive_output(timeout=10)
    assert first["body"] and first["more_body"]
    # Not read whole into memory first (it never ends): part by part as it is sent.
    await communicator.send_input({"type": "http.disconnect"})
    await communicator.wait(timeout=5)
    closed = seen["stream_closed"]
    assert len(closed) == 1 and closed[0] >= 1
    assert seen["finished"]


async def test_an_async_view_stays_on_the_event_loop():
    handler = PooledASGIHandler(threads=1)
    answer = await _get(handler, "/async")
    assert answer["status"] == 200
    assert answer["body"] == b"async"
    assert seen["async"] == [threading.current_thread().name]  # the loop's thread
    # Its synchronous hooks shared the one thread of async views, not a pool thread.
    assert seen["started"] and not seen["started"][0].startswith("toolcore-http")


async def test_a_client_gone_before_its_body_arrived_gets_nothing():
    handler = PooledASGIHandler(threads=1)
    scope = HttpCommunicator(handler, "POST", "/where").scope
    communicator = ApplicationCommunicator(handler, scope)
    # The body never comes: the client disconnects instead.
    await communicator.send_input({"type": "http.disconnect"})
    await communicator.wait(timeout=5)
    assert await communicator.receive_nothing(timeout=0.1)
    assert "view" not in seen
