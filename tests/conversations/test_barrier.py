"""The turn barrier: an async view that waits on a notification, holding no thread or connection."""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, connections
from django.test import AsyncClient

from conversations import barrier
from tests.waits import until

from .barrier_helpers import barrier_turn, group_size, settle_in_thread

pytestmark = pytest.mark.django_db(transaction=True)


def _setup(user, calls: int = 2):
    """The ``barrier_turn``'s calls and URL, and a client with its token."""
    turn = barrier_turn(user, calls)
    return turn.call_ids, turn.url, BearerAsyncClient(turn.token)


def _joined(url: str, waiters: int):
    """A condition: ``waiters`` waiters of the barrier at ``url`` hold its turn's group (they
    wait on the layer)."""
    turn_id = url.split("/")[-2]  # …/turns/<turn id>/results

    async def joined() -> bool:
        return await group_size(turn_id) == waiters

    return joined


class BearerAsyncClient(AsyncClient):
    """Sends the token on every request (AsyncClient's constructor ``headers`` are mangled)."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token

    async def get(self, path, data=None, **extra):
        return await super().get(
            path, data, headers={"Authorization": f"Bearer {self.token}"}, **extra
        )


async def test_wait_zero_answers_at_once_with_the_pending_calls(user, monkeypatch):
    call_ids, url, client = await sync_to_async(_setup)(user)
    joins = []
    real_join = barrier._Wakeups.join

    async def join(self, timeout: float) -> None:
        joins.append(timeout)
        await real_join(self, timeout)

    monkeypatch.setattr(barrier._Wakeups, "join", join)
    loop = asyncio.get_running_loop()
    started = loop.time()
    response = await client.get(url, {"wait": 0})
    # "At once" is that it never waited on the turn's group; the time only bounds a hang (a
    # loaded machine may take seconds over the one check).
    assert joins == []
    assert loop.time() - started < 10
    assert response.status_code == 200
    body = response.json()
    assert body["settled"] is False
    assert [p["toolCallId"] for p in body["pending"]] == [str(i) for i in call_ids]
    assert {p["state"] for p in body["pending"]} == {"ready"}


async def test_returns_when_the_last_call_settles_not_before(user):
    call_ids, url, client = await sync_to_async(_setup)(user)
    waiter = asyncio.create_task(client.get(url, {"wait": 30}))
    await until(_joined(url, 1), what="the waiter never joined the turn's group")
    await sync_to_async(settle_in_thread, thread_sensitive=False)(call_ids[1], "second")
    # Room for a wrong early answer to come: a slow machine can only make this check easier
    # to pass, never fail it (the waiter's wait is 30 s).
    await asyncio.sleep(0.5)
    assert not waiter.done(), "answered while a call was still unfinished"
    await sync_to_async(settle_in_thread, thread_sensitive=False)(call_ids[0], "first")
    response = await asyncio.wait_for(waiter, timeout=20)  # woken, not at its wait (30 s)
    body = response.json()
    assert body["settled"] is True
    assert [r["contentIndex"] for r in body["results"]] == [0, 1]
    assert [r["modelContent"][0]["text"] for r in body["results"]] == ["first", "second"]
    assert body["queue"] == []


async def test_times_out_with_pending_calls(user):
    call_ids, url, client = await sync_to_async(_setup)(user, calls=1)
    response = await client.get(url, {"wait": 0.5})
    assert response.json() == {
        "settled": False,
        "pending": [{"toolCallId": str(call_ids[0]), "state": "ready"}],
    }


def _open_connections() -> int:
    if connection.vendor != "postgresql":
        return -1
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return cursor.fetchone()[0]
    finally:
        connections.close_all()


async def test_fifty_waiters_hold_no_threads_or_connections(user):
    call_ids, url, client = await sync_to_async(_setup)(user, calls=1)
    threads_before = threading.active_count()
    waiters = [asyncio.create_task(client.get(url, {"wait": 30})) for _ in range(50)]
    # All of them wait (each joined the turn's group), however long a loaded machine took.
    await until(_joined(url, 50), what="the waiters never all joined the turn's group")
    await asyncio.sleep(0.5)  # a moment asleep: a thread kept would still be held then
    assert not any(w.done() for w in waiters)
    # Each waiter borrowed a pool thread for a moment; none keeps one while it waits.
    assert threading.active_count() - threads_before < 20
    busy = await sync_to_async(_open_connections, thread_sensitive=False)()
    if busy >= 0:  # PostgreSQL: count the other sessions on the test database
        assert busy < 20
    await sync_to_async(settle_in_thread, thread_sensitive=False)(call_ids[0], "done")
    responses = await asyncio.wait_for(asyncio.gather(*waiters), timeout=30)
    assert all(r.status_code == 200 and r.json()["settled"] for r in responses)
