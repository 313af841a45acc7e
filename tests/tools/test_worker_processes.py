"""Workers as separate processes (``manage.py runworker_tools``) sharing one PostgreSQL database:
what a team deployment runs. SQLite serves one process, so these run on PostgreSQL only."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from conversations.models import Asset, ConversationEvent, ToolCall
from tests.conversations.helpers import assistant_calls, new_conversation, open_turn
from tools.runtime.worker import POLL_SECONDS

from .worker_helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="several processes share PostgreSQL only"
    ),
]


def _worker_env() -> dict[str, str]:
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=url,
        SECRET_KEY="worker-process-secret-" + "x" * 32,
        ALLOWED_HOSTS="localhost",
        DATA_DIR=str(settings.DATA_DIR),
        TOOLCORE_WORKSPACE_ROOT=str(settings.TOOLCORE_WORKSPACE_ROOT),
        LOG_LEVEL="WARNING",
    )
    env.pop("REDIS_URL", None)
    return env


def _start_worker(name: str, concurrency: int = 4) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "runworker_tools",
            "--concurrency",
            str(concurrency),
            "--name",
            name,
        ],
        cwd=ROOT,
        env=_worker_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop(process: subprocess.Popen) -> str:
    process.send_signal(signal.SIGTERM)
    try:
        _, err = process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
        raise AssertionError("the worker did not stop on SIGTERM") from None
    assert process.returncode == 0, err[-2000:]
    return err


def test_two_worker_processes_racing_for_200_calls_run_each_exactly_once(user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    call_ids = []
    for _ in range(2):  # at most 128 tool calls in one message
        posted = assistant_calls(
            conversation, turn_id, *[("ls", {"path": "."}) for _n in range(100)]
        )
        call_ids.extend(posted.call_ids)
    assert ToolCall.objects.filter(state="ready").count() == 200
    workers = [_start_worker("w-a"), _start_worker("w-b")]
    try:
        wait_for(
            lambda: ConversationEvent.objects.filter(type="tool_call_response").count() == 200,
            timeout=120,
            every=0.2,
        )
    finally:
        errors = [_stop(w) for w in workers]
    responses = ConversationEvent.objects.filter(type="tool_call_response")
    assert sorted(str(e.tool_call_id) for e in responses) == sorted(str(c) for c in call_ids)
    assert {e.payload["outcome"] for e in responses} == {"completed"}
    assert {e.payload["attempts"] for e in responses} == {1}
    # Claimed once each: every result lives in the first attempt's folder.
    paths = list(Asset.objects.filter(tool_call_id__in=call_ids).values_list("path", flat=True))
    assert len(paths) == 200 and all("/g1/" in p for p in paths)
    assert not ToolCall.objects.filter(conversation=conversation).exists()
    assert all("Traceback" not in err for err in errors), errors


def _listening() -> bool:
    """A backend of the test database has run its ``LISTEN``s (a worker listens only after its
    first heartbeat and pickup have started; the first channel it listens to is the one of
    calls made ready, so any ``LISTEN`` done means that one is)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND state = 'idle' AND query LIKE 'LISTEN %'"
        )
        return cursor.fetchone()[0] > 0


def test_a_worker_process_is_woken_by_the_commit_not_the_poll(user):
    worker = _start_worker("w-quick", concurrency=1)
    try:
        # Started and listening, however long that took: its next poll is POLL_SECONDS away.
        wait_for(_listening, timeout=60, what="the worker listening")
        conversation = new_conversation(user)
        turn_id = open_turn(conversation)
        started = time.monotonic()
        (call_id,) = assistant_calls(conversation, turn_id, ("ls", {})).call_ids
        wait_for(
            lambda: ConversationEvent.objects.filter(tool_call_id=call_id).exists(), timeout=30
        )
        # Woken by the commit's notification, not by the poll: that one comes POLL_SECONDS
        # (5 s) after the pickup listening set off, which was before the call was made. The
        # bound leaves the notified pickup most of that on a loaded machine.
        assert time.monotonic() - started < POLL_SECONDS - 1
    finally:
        _stop(worker)
