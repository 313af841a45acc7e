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
    real_join = barrier.Waiting.join

    async def join(self, timeout: float) -> None:
        joins.append(timeout)
        await real_join(self, timeout)

    monkeypatch.setattr(barrier.Waiting, "join", join)
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


def _counting(monkeypatch, name: str) -> list:
    """Each call of ``barrier.<name>`` (a selector the barrier runs on its threads), recorded."""
    calls = []
    real = getattr(barrier, name)

    def counted(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(barrier, name, counted)
    return calls


async def test_waiters_check_only_on_news_and_the_watch_reads_them_all_at_once(user, monkeypatch):
    """Twenty waiters of a turn where nothing happens for 9 s: each checks at the start, once
    joined, and at most once more (the watch's first reading of its turn); the watch reads all
    of them in one query a sweep. (Re-checking every 2 s each, they made 6 checks apiece.)"""
    call_ids, url, client = await sync_to_async(_setup)(user, calls=1)
    checks = _counting(monkeypatch, "turn_results")
    sweeps = _counting(monkeypatch, "unfinished_marks")
    loop = asyncio.get_running_loop()
    started = loop.time()
    responses = await asyncio.wait_for(
        asyncio.gather(*(client.get(url, {"wait": 9}) for _ in range(20))), timeout=60
    )
    elapsed = loop.time() - started
    assert all(r.json()["settled"] is False for r in responses)
    assert len(checks) <= 3 * 20, len(checks)
    # Every sweep read the one turn, whatever number waits for it; at most one every 2 s.
    turn_id = url.split("/")[-2]
    assert sweeps and all(list(turns) == [turn_id] for turns, _ in sweeps)
    assert len(sweeps) <= elapsed / barrier.RECHECK_SECONDS + 1


async def test_a_settlement_no_message_announces_is_seen_by_the_watch(user, monkeypatch):
    """The in-memory layer does not reach across processes: a worker of another process settles
    and no message comes. The watch sees the turn's calls change and wakes the waiter."""
    from conversations.services import publish

    call_ids, url, client = await sync_to_async(_setup)(user, calls=1)
    waiter = asyncio.create_task(client.get(url, {"wait": 60}))
    await until(_joined(url, 1), what="the waiter never joined the turn's group")
    monkeypatch.setattr(publish, "send_now", lambda outbox: None)  # nothing is announced
    await sync_to_async(settle_in_thread, thread_sensitive=False)(call_ids[0], "unannounced")
    response = await asyncio.wait_for(waiter, timeout=40)  # its wait is 60 s: the watch woke it
    body = response.json()
    assert body["settled"] is True
    assert [r["modelContent"][0]["text"] for r in body["results"]] == ["unannounced"]


async def test_a_call_waiter_sleeps_through_its_turns_other_calls(user, monkeypatch):
    """``waiting`` for one call of a turn: a ``turn.changed`` naming another call is no news;
    one naming this call, or no call, is. (The watch sweeps once an hour here: only messages
    wake.)"""
    from channels.layers import get_channel_layer

    from conversations.services.publish import turn_group

    monkeypatch.setattr(barrier, "RECHECK_SECONDS", 3600)
    call_ids, url, _ = await sync_to_async(_setup)(user, calls=2)
    turn_id = url.split("/")[-2]
    layer = get_channel_layer()
    group = turn_group(turn_id)
    async with barrier.waiting(turn_id=turn_id, call_id=call_ids[0]) as news:
        assert news.joined
        await layer.group_send(
            group, {"type": "turn.changed", "turnId": turn_id, "toolCallId": str(call_ids[1])}
        )
        assert await news.sleep(0.5) is False
        await layer.group_send(
            group, {"type": "turn.changed", "turnId": turn_id, "toolCallId": str(call_ids[0])}
        )
        assert await asyncio.wait_for(news.sleep(30), timeout=40) is True
        await layer.group_send(group, {"type": "turn.changed", "turnId": turn_id})
        assert await asyncio.wait_for(news.sleep(30), timeout=40) is True
