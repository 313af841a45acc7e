"""A worker whose clock runs an hour ahead (libfaketime preloaded in its process): leases are written and
judged by the database's clock, so it neither takes the claim of a live worker (its sweep sees
the lease running) nor keeps its own past the lease (a dead worker's claim expires on time).

PostgreSQL only: SQLite has no server clock (each process's SQLite reads that process's clock,
and a faked clock fakes SQLite's too), so on SQLite the processes of one machine share its
clock by construction and there is no other clock to judge by.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from django.db import connection

from conversations.models import ExecutionClaim
from tests.conversations.helpers import assistant_calls, new_conversation, open_turn
from tests.tools.worker_helpers import response_of, stop_worker, wait_for, worker_process
from tools.models import PermissionRule
from tools.workspaces import conversation_workspace

from .helpers import assert_intact, settled_once

# Runs until a file ``stop`` appears in the workspace (the allow-all rule of the test covers
# each of its simple commands).
HOLD = "while [ ! -f stop ]; do sleep 0.1; done; echo held"
pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

LEASE_SECONDS = 3
# libfaketime preloaded into the worker's own process (the ``faketime`` command would run it as
# a child, which a kill -9 of the command would leave running). Every clock is faked, the
# monotonic one too: with FAKETIME_DONT_FAKE_MONOTONIC, libfaketime 0.9.10 answers EINVAL to
# the absolute clock_nanosleep behind Python's time.sleep, so the worker's sandbox probe failed
# whenever bwrap was slow enough for subprocess's wait to sleep (a loaded machine).
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
AHEAD = {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": "+1h"}


@pytest.fixture(autouse=True)
def _postgresql_and_faketime():
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has no server clock: a faked process clock fakes SQLite's too")
    if not Path(LIBFAKETIME).exists():
        pytest.skip("libfaketime is not installed (apt-get install faketime)")


def _seconds_left(call_id) -> float:
    """The claim's lease left, by the database's clock."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT EXTRACT(EPOCH FROM expires_at - statement_timestamp()) "
            f"FROM {ExecutionClaim._meta.db_table} WHERE call_id = %s",
            [call_id],
        )
        return float(cursor.fetchone()[0])


def test_a_worker_an_hour_ahead_neither_steals_nor_keeps_a_claim(user):
    PermissionRule.objects.create(tool_name="bash", pattern="", decision="allow")
    conversation = new_conversation(user)
    workspace = conversation_workspace(conversation)
    workspace.mkdir(parents=True)
    turn_id = open_turn(conversation)
    (held,) = assistant_calls(conversation, turn_id, ("bash", {"command": HOLD})).call_ids
    honest = worker_process("w-honest", lease_seconds=LEASE_SECONDS, concurrency=1)
    ahead = None
    try:
        first = wait_for(lambda: ExecutionClaim.objects.filter(call_id=held).first(), 30)
        # The honest worker is full: the next call can only go to the worker an hour ahead.
        ahead = worker_process("w-ahead", lease_seconds=LEASE_SECONDS, env=AHEAD)
        (kept,) = assistant_calls(
            conversation, turn_id, ("bash", {"command": "sleep 1000"})
        ).call_ids
        wait_for(lambda: ExecutionClaim.objects.filter(call_id=kept, worker="w-ahead").exists(), 30)
        # Two of its sweeps (at start, then every lease) and several of its renewals pass.
        time.sleep(2 * LEASE_SECONDS)
        # Not stolen: the live worker's call is still its, at the same generation and token.
        claim = ExecutionClaim.objects.get(call_id=held)
        assert (claim.worker, claim.token, claim.generation) == (
            "w-honest",
            first.token,
            first.generation,
        )
        # Not kept: its own lease ends a lease from the database's now, not an hour later.
        assert 0 < _seconds_left(kept) <= LEASE_SECONDS + 0.5
        ahead.send_signal(signal.SIGKILL)
        ahead.wait()
        # Its claim runs out on time: the honest worker's sweep settles the command. A lease
        # judged by the fast clock would keep it an hour; a minute tells the two apart and
        # leaves a loaded machine room for its sweeps.
        kept_response = wait_for(lambda: response_of(kept), timeout=60)
        assert kept_response["outcome"] == "indeterminate"
        (workspace / "stop").touch()
        held_response = wait_for(lambda: response_of(held), timeout=30)
    finally:
        if ahead is not None:
            stop_worker(ahead)
        stop_worker(honest)
    assert held_response["outcome"] == "completed" and held_response["attempts"] == 1
    settled_once([held, kept])
    assert_intact()
