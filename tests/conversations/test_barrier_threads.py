"""The turn barrier holds no thread while it waits: a hundred waiters through the real ASGI
application cost a handful of shared threads, on whichever channel layer is configured
(in-memory on SQLite, Redis on the PostgreSQL + Redis run)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections
from django.test import Client

from .barrier_helpers import (
    LATE_SECONDS,
    asgi_get,
    barrier_get,
    barrier_turn,
    group_size,
    settle_in_thread,
)

pytestmark = pytest.mark.django_db(transaction=True)

WAITERS = 100
# The shared pools: the detached database threads (4) and the async views' hook thread (1),
# with room for the odd helper thread a library starts.
EXTRA_THREADS = 8


def _names() -> list[str]:
    return sorted(t.name for t in threading.enumerate())


async def test_a_hundred_waiters_add_a_handful_of_threads_and_all_answer_the_settlement(user):
    turn = await sync_to_async(barrier_turn)(user)
    loop = asyncio.get_running_loop()
    idle, idle_names = threading.active_count(), _names()
    started = loop.time()
    waiters = [asyncio.create_task(barrier_get(turn, wait=30)) for _ in range(WAITERS)]
    peak, peak_names = idle, idle_names

    def sample() -> None:
        nonlocal peak, peak_names
        if threading.active_count() > peak:
            peak, peak_names = threading.active_count(), _names()

    # Every waiter reaches the layer (its group holds all of them), then they all sleep.
    while await group_size(turn.turn_id) < WAITERS:
        sample()
        assert loop.time() - started < 20, "the waiters did not all join the turn's group"
        await asyncio.sleep(0.05)
    for _ in range(15):
        sample()
        await asyncio.sleep(0.1)

    assert peak - idle <= EXTRA_THREADS, f"idle: {idle_names}\nwith {WAITERS} waiters: {peak_names}"
    assert not any(w.done() for w in waiters), "answered while the call was unfinished"

    settled_at = loop.time()
    await sync_to_async(settle_in_thread, thread_sensitive=False)(turn.call_ids[0], "done")
    answers = await asyncio.wait_for(asyncio.gather(*waiters), timeout=30)

    for answer in answers:
        assert answer.status == 200, answer.body
        assert answer.body["settled"] is True
        assert [r["modelContent"][0]["text"] for r in answer.body["results"]] == ["done"]
        assert settled_at <= answer.finished_at <= started + 30 + LATE_SECONDS
    # Woken by the notification (or at worst the periodic re-check), not by the deadline.
    assert max(a.finished_at for a in answers) - settled_at < 10
    assert await group_size(turn.turn_id) == 0  # every waiter left the group


async def test_through_the_asgi_application_bad_input_is_a_clear_4xx(user, other_user):
    turn = await sync_to_async(barrier_turn)(user)
    stranger = await sync_to_async(barrier_turn)(other_user)
    cid = turn.url.split("/")[4]
    cases = [
        (f"{turn.url}?wait=61", f"Bearer {turn.token}", 422),
        (f"{turn.url}?wait=soon", f"Bearer {turn.token}", 422),
        (f"{turn.url}?wait=-1", f"Bearer {turn.token}", 422),
        (f"/api/v1/conversations/{cid}/turns/nope/results", f"Bearer {turn.token}", 404),
        (f"{turn.url}?wait=0", f"Bearer {stranger.token}", 404),  # not theirs
        (f"{turn.url}?wait=0", "Bearer tc_wrong", 401),
    ]
    for path, authorization, status in cases:
        answer = await asgi_get(path, [(b"authorization", authorization.encode())])
        assert answer.status == status, (path, answer.body)
        assert {"code", "message"} <= set(answer.body["error"]), answer.body


def _session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    try:
        return (
            f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
        )
    finally:
        connections.close_all()


async def test_a_session_waits_too_and_sync_views_still_answer(user):
    """The async view's sync hooks (sessions, CSRF, ...) run on the shared thread; a sync view
    beside it keeps Django's thread of its own."""
    turn = await sync_to_async(barrier_turn)(user)
    cookie = (b"cookie", (await sync_to_async(_session_cookie)(user)).encode())
    answer = await asgi_get(f"{turn.url}?wait=0.3", [cookie])
    assert answer.status == 200, answer.body
    assert answer.body["settled"] is False
    assert answer.elapsed >= 0.3
    cid = turn.url.split("/")[4]
    bearer = (b"authorization", f"Bearer {turn.token}".encode())
    events = await asgi_get(f"/api/v1/conversations/{cid}/events", [bearer])
    assert events.status == 200, events.body
    assert events.body["events"]
    assert events.body["lastSequence"] == events.body["events"][-1]["sequence"]
