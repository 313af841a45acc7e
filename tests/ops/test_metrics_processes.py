"""Every process counts (config/metrics_files.py): counts made in other processes of the host
are in this process's scrape, alive or dead; a dead process's open websockets are not; and the
websocket gauge follows a real consumer up and down."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings

from config.metrics_files import ALIVE_SUFFIX, ARCHIVE, metrics_folder
from conversations import metrics

from ..realtime.helpers import connect, hello, token_for
from .metrics_helpers import scrape, value

ROOT = Path(__file__).resolve().parents[2]
CHILD = textwrap.dedent(
    """
    import os, sys, time
    import django
    django.setup()
    from conversations import metrics
    metrics.live_dropped("queue_full", int(sys.argv[1]))
    metrics.WEBSOCKETS.labels("probe").inc(int(sys.argv[2]))
    print("counted", flush=True)
    if sys.argv[3] == "wait":
        time.sleep(60)
    elif sys.argv[3] == "crash":
        os._exit(0)  # no atexit: as after kill -9
    """
)


def _child(dropped: int, sockets: int, end: str) -> subprocess.Popen:
    """A process of this host (the suite's settings, so the same metrics folder) that counts
    ``dropped`` live messages and opens ``sockets`` probe sockets, then waits, crashes or
    exits in order."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    assert env["TOOLCORE_METRICS_DIR"] == str(settings.TOOLCORE_METRICS_DIR)
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(dropped), str(sockets), end],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline().strip() == "counted"
    return process


def _dropped(samples) -> float:
    return value(samples, "toolcore_live_messages_dropped_total", reason="queue_full")


def _sockets(samples) -> float:
    return value(samples, "toolcore_websockets", endpoint="probe")


@pytest.mark.django_db
def test_counts_of_other_processes_are_scraped_living_or_dead():
    base = scrape()
    metrics.live_dropped("queue_full", 2)  # this process
    waiting = _child(5, 1, "wait")
    try:
        samples = scrape()
        assert _dropped(samples) - _dropped(base) == 7
        assert _sockets(samples) - _sockets(base) == 1  # the waiting child's socket is open
        crashed = _child(11, 3, "crash")
        crashed.wait(timeout=30)
        samples = scrape()
        assert _dropped(samples) - _dropped(base) == 2 + 5 + 11
        # A crashed process's sockets stay until a process starts and finds it dead ...
        assert _sockets(samples) - _sockets(base) == 1 + 3
        exited = _child(13, 4, "exit")
        assert exited.wait(timeout=30) == 0
        samples = scrape()
        assert _dropped(samples) - _dropped(base) == 2 + 5 + 11 + 13
        # ... as this one did at its start; and it took its own with it when it exited.
        assert _sockets(samples) - _sockets(base) == 1
        waiting.send_signal(signal.SIGKILL)
        waiting.wait(timeout=30)
        # A process starting archives the dead processes' files: their counts stay, their
        # sockets go, and only the living and the archives are left in the folder.
        started = _child(0, 0, "exit")
        assert started.wait(timeout=30) == 0
        samples = scrape()
        assert _dropped(samples) - _dropped(base) == 2 + 5 + 11 + 13
        assert _sockets(samples) - _sockets(base) == 0
        folder = metrics_folder()
        assert (folder / f"counter_{ARCHIVE}.db").exists()
        for pid in (waiting.pid, crashed.pid, exited.pid):
            assert not list(folder.glob(f"*_{pid}-*.db")), pid
            assert not list(folder.glob(f"{pid}-*{ALIVE_SUFFIX}")), pid
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()


@pytest.mark.django_db(transaction=True)
async def test_the_websocket_gauge_follows_a_real_consumer(user):
    def sockets() -> float:
        return value(scrape(), "toolcore_websockets", endpoint="conversations")

    before = await sync_to_async(sockets)()
    socket = await connect(await token_for(user))
    await hello(socket)
    assert await sync_to_async(sockets)() == before + 1
    refused = await connect("tc_not-a-token")  # accepted, then closed with 4401
    assert (await refused.receive_output(timeout=5))["code"] == 4401
    await refused.disconnect()
    await socket.disconnect()
    deadline = time.monotonic() + 5
    while await sync_to_async(sockets)() != before and time.monotonic() < deadline:
        await sync_to_async(time.sleep)(0.05)
    assert await sync_to_async(sockets)() == before


@pytest.mark.django_db(transaction=True)
async def test_live_messages_published_to_a_follower_are_counted(user):
    from ..realtime.helpers import conversation_with_turn, published, say

    def events() -> float:
        return value(scrape(), "toolcore_live_messages_published_total", type="conversation.event")

    conversation, turn_id = await conversation_with_turn(user)
    socket = await connect(await token_for(user))
    await hello(socket)
    await socket.send_json_to(
        {"type": "subscribe", "conversationId": str(conversation.pk), "after": None}
    )
    await socket.receive_json_from(timeout=5)  # the snapshot
    await published()  # what the set-up published went out (Redis: the publisher lingers)
    before = await sync_to_async(events)()
    await say(conversation, turn_id)
    await published()
    frame = await socket.receive_json_from(timeout=5)
    assert frame["type"] == "conversation.event"
    assert await sync_to_async(events)() - before == 1
    await socket.disconnect()


@pytest.mark.django_db
def test_a_file_created_and_not_yet_sized_spoils_neither_a_scrape_nor_a_start():
    """Found under load: prometheus_client creates a process's file, then sizes it. A process
    killed between the two left an empty ``counter_<id>.db``; every scrape then failed (500, a
    ``struct.error``) and so would the next start's archive. Now the scrape skips a file too
    short for its header, and the archive drops it as unreadable."""
    base = scrape()
    folder = metrics_folder()
    empty = folder / "counter_999999-0badf00d.db"  # a dead process's (no .alive of its own)
    empty.touch()
    try:
        metrics.live_dropped("queue_full", 3)
        assert _dropped(scrape()) - _dropped(base) == 3  # answered 200, counts intact
        started = _child(0, 0, "exit")  # a start archives the dead: the empty file goes
        assert started.wait(timeout=30) == 0
        assert not empty.exists()
        assert _dropped(scrape()) - _dropped(base) == 3
    finally:
        empty.unlink(missing_ok=True)
