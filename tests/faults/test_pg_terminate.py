"""PostgreSQL connections terminated (``pg_terminate_backend``) in the middle of a transaction:
nothing of it is written, the service call fails with a database error (or, in a worker, is
tried again), a retry succeeds once, and the invariants hold.

Each test holds the conversation row locked from a connection of its own, so the service's
transaction stops, open, on its first statement that needs the row (the sequence); the test
finds that backend in ``pg_stat_activity``, terminates it, and lets go of the row.
PostgreSQL only: SQLite has no server and no backend to terminate.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.db import DatabaseError, connection, connections

from conversations.models import Conversation, ConversationEvent, ExecutionClaim
from conversations.services.claims import claim_acquire
from conversations.services.messages import message_post
from conversations.services.settlement import ClaimGuard, call_settle
from tests.conversations.helpers import assistant_calls, new_conversation, open_turn
from tests.tools.worker_helpers import (
    database_url,
    response_of,
    stop_worker,
    wait_for,
    worker_process,
)
from tools.models import PermissionRule
from tools.workspaces import conversation_workspace

from .helpers import assert_intact, settled_once

# Runs until a file ``stop`` appears in the workspace (the allow-all rule of the test covers
# each of its simple commands).
HOLD = "while [ ! -f stop ]; do sleep 0.1; done; echo finished"
pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

LEASE_SECONDS = 6


@pytest.fixture(autouse=True)
def _postgresql():
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: SQLite has no server backend to terminate")


@contextlib.contextmanager
def conversation_locked(conversation_id) -> Iterator[psycopg.Connection]:
    """The conversation row locked (``FOR UPDATE``) by a connection of the test's own, until
    the block ends."""
    with psycopg.connect(database_url()) as conn:
        conn.execute(
            f"SELECT 1 FROM {Conversation._meta.db_table} WHERE id = %s FOR UPDATE",
            [conversation_id],
        )
        yield conn
        conn.rollback()


def terminate_waiting(locker: psycopg.Connection) -> str:
    """Terminate the backend of the test database blocked on the lock ``locker`` holds (its
    transaction open, mid-statement): the statement it was running."""
    holder = locker.info.backend_pid

    def waiting() -> tuple[int, str] | None:
        with psycopg.connect(database_url(), autocommit=True) as probe:
            return probe.execute(
                "SELECT pid, query FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND state = 'active' AND %s = ANY("
                "pg_blocking_pids(pid))",
                [holder],
            ).fetchone()

    pid, statement = wait_for(waiting, timeout=30, every=0.05)
    with psycopg.connect(database_url(), autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone()[0]
    return statement


def in_thread(fn, **kwargs):
    """Run ``fn`` on a thread of its own (a connection of its own): a future-like dict."""
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = fn(**kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    outcome["thread"] = thread
    return outcome


def test_a_settlement_whose_connection_is_terminated_writes_nothing(user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("notes", {"q": "x"})).call_ids
    claim = claim_acquire(call_id=call_id, worker="w")
    conversation.refresh_from_db()
    before = conversation.last_sequence
    settle = {
        "call_id": call_id,
        "outcome": "completed",
        "guard": ClaimGuard(claim.token, claim.generation),
        "result": {"content": [{"type": "text", "text": "found"}]},
        "text": "found",
    }
    with conversation_locked(conversation.pk) as locker:
        running = in_thread(call_settle, **settle)
        assert "gone AS (DELETE" in terminate_waiting(locker)  # settlement's one statement
    running["thread"].join(30)
    assert isinstance(running.get("error"), DatabaseError), running
    # Nothing of it: the call is still running under its claim, no response, no sequence.
    assert ExecutionClaim.objects.filter(call_id=call_id, token=claim.token).exists()
    assert not ConversationEvent.objects.filter(tool_call_id=call_id).exists()
    conversation.refresh_from_db()
    assert conversation.last_sequence == before
    event = call_settle(**settle)  # its holder tries again: its files are accepted as written
    assert event.sequence == before + 1
    assert settled_once([call_id])[str(call_id)]["outcome"] == "completed"
    assert_intact(purge=False)


def test_a_message_whose_connection_is_terminated_is_posted_once_on_retry(user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    conversation.refresh_from_db()
    before = conversation.last_sequence
    post = {
        "conversation_id": conversation.pk,
        "message_id": "said-once",
        "role": "assistant",
        "turn_id": turn_id,
        "content": [{"type": "text", "text": "hello"}],
    }
    with conversation_locked(conversation.pk) as locker:
        running = in_thread(message_post, **post)
        terminate_waiting(locker)
    running["thread"].join(30)
    assert isinstance(running.get("error"), DatabaseError), running
    assert not ConversationEvent.objects.filter(message_id="said-once").exists()
    conversation.refresh_from_db()
    assert conversation.last_sequence == before
    message_post(**post)
    message_post(**post)  # idempotent by messageId
    assert ConversationEvent.objects.filter(message_id="said-once").count() == 1
    assert_intact(purge=False)


def test_a_worker_whose_connection_is_terminated_while_settling_tries_again(user):
    PermissionRule.objects.create(tool_name="bash", pattern="", decision="allow")
    conversation = new_conversation(user)
    workspace = conversation_workspace(conversation)
    workspace.mkdir(parents=True)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("bash", {"command": HOLD})).call_ids
    worker = worker_process("w-cut", lease_seconds=LEASE_SECONDS)
    try:
        wait_for(lambda: ExecutionClaim.objects.filter(call_id=call_id).exists(), 30)
        with conversation_locked(conversation.pk) as locker:
            Path(workspace / "stop").touch()  # the command ends: its worker settles
            assert "gone AS (DELETE" in terminate_waiting(locker)
        response = wait_for(lambda: response_of(call_id), timeout=LEASE_SECONDS)
    finally:
        log = stop_worker(worker)
    # Settled by its own worker, trying again, not by recovery after the lease.
    assert response["outcome"] == "completed" and response["attempts"] == 1, log
    assert "settlement lost its database connection; trying again" in log
    assert "finished" in response["modelContent"][0]["text"]
    settled_once([call_id])
    assert_intact()
