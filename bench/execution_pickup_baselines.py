"""The pickup bench's baseline and floor, each with its child process.

- The baseline, ``NotifyRoundTrip``: a transaction that sends ``pg_notify`` and commits, heard
  by a ``LISTEN``ing connection in another process (``bench/execution.py --listen``); from its
  ``COMMIT`` to the notification read.
- The floor, ``PickupFloor``: a raw psycopg process (``bench/execution.py --floor``) that hears
  a notification, claims a ready row of a scratch table in one statement (the worker's claim:
  pick ``SKIP LOCKED``, move, insert the claim) and a durable commit, and ``Popen``s the same
  command as the pickups; from the ``COMMIT`` to the command's first instruction.

The children import neither Django nor bench/_setup.py: psycopg only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

from execution_setup import SCRIPT

PICKUP_COMMAND = "date +%s.%N"  # the process's first instruction stamps the wall clock
BENCH_CHANNEL = "toolcore_bench_roundtrip"


def listen_child(channel: str) -> None:
    """The baseline's other end: ``LISTEN channel`` on its own connection, and print the
    wall-clock time at which each notification arrives (``payload time``)."""
    import psycopg

    with psycopg.connect(os.environ["BENCH_CONNINFO"], autocommit=True) as conn:
        conn.execute(f"LISTEN {channel}")
        print("ready", flush=True)
        for note in conn.notifies():
            got = time.time()
            if note.payload == "stop":
                return
            print(f"{note.payload} {got:.6f}", flush=True)


class NotifyRoundTrip:
    """The baseline: a transaction that sends ``pg_notify`` and commits, heard by a listening
    connection in another process; time from the ``COMMIT`` sent to the notification read."""

    def __init__(self, connection: Any) -> None:
        import psycopg
        from _setup import conninfo

        dsn = conninfo(connection)
        self.conn = psycopg.connect(dsn)
        self.child = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--listen", BENCH_CHANNEL],
            env={**os.environ, "BENCH_CONNINFO": dsn},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        if self.child.stdout.readline().strip() != "ready":
            raise RuntimeError("the listening process did not start")
        self.count = 0

    def _send(self, payload: str) -> float:
        self.conn.execute("SELECT pg_notify(%s, %s)", (BENCH_CHANNEL, payload))
        sent = time.time()
        self.conn.commit()
        return sent

    def sample(self) -> float:
        self.count += 1
        sent = self._send(str(self.count))
        payload, got = self.child.stdout.readline().split()
        assert payload == str(self.count), payload
        return float(got) - sent

    def close(self) -> None:
        self._send("stop")
        self.child.wait(10)
        self.conn.close()


FLOOR_CHANNEL = "toolcore_bench_floor"
FLOOR_CALLS, FLOOR_CLAIMS = "bench_floor_calls", "bench_floor_claims"
# A claim as the worker's: pick with SKIP LOCKED, move running, insert the claim, one statement.
FLOOR_CLAIM = (
    f"WITH picked AS (SELECT id FROM {FLOOR_CALLS} WHERE state = 'ready' ORDER BY created_at "
    f"LIMIT 4 FOR UPDATE SKIP LOCKED), moved AS (UPDATE {FLOOR_CALLS} c SET state = 'running', "
    f"generation = c.generation + 1 FROM picked WHERE c.id = picked.id RETURNING c.id, "
    f"c.generation, c.command), claimed AS (INSERT INTO {FLOOR_CLAIMS} (call_id, token, "
    f"generation, expires_at) SELECT id, gen_random_uuid(), generation, now() + interval '30 s' "
    f"FROM moved RETURNING call_id) SELECT m.id, m.command FROM moved m JOIN claimed c "
    f"ON c.call_id = m.id"
)


def floor_child() -> None:
    """The pickup's raw floor, the other end: ``LISTEN``, and on each notification claim the
    ready rows in one statement and a durable commit, then start each one's command with
    ``Popen`` (``/bin/sh -c``, its own session, its stdout a pipe) and print what it printed.
    No Django, no asyncio, no files: what any worker must do at the least."""
    import psycopg

    with (
        psycopg.connect(os.environ["BENCH_CONNINFO"], autocommit=True) as listener,
        psycopg.connect(os.environ["BENCH_CONNINFO"]) as conn,
    ):
        listener.execute(f"LISTEN {FLOOR_CHANNEL}")
        print("ready", flush=True)
        for note in listener.notifies():
            if note.payload == "stop":
                return
            with conn.transaction():
                claimed = conn.execute(FLOOR_CLAIM).fetchall()
            for _call, command in claimed:
                child = subprocess.Popen(
                    ["/bin/sh", "-c", command],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    start_new_session=True,
                )
                out, _ = child.communicate()
                print(f"{note.payload} {out.decode().strip()}", flush=True)


class PickupFloor:
    """The pickup's floor, sampled in turns with the pickups: a transaction that inserts a
    ready row and sends ``pg_notify``, and a process that hears it, claims the row and starts
    its command (``floor_child``); from the ``COMMIT`` sent to the command's first
    instruction, as the pickups are measured."""

    def __init__(self, connection: Any) -> None:
        import psycopg
        from _setup import conninfo

        dsn = conninfo(connection)
        self.conn = psycopg.connect(dsn)
        self.conn.execute(
            f"CREATE TABLE IF NOT EXISTS {FLOOR_CALLS} (id bigserial PRIMARY KEY, state text "
            "NOT NULL, generation int NOT NULL DEFAULT 0, command text NOT NULL, "
            "created_at timestamptz NOT NULL DEFAULT now())"
        )
        self.conn.execute(
            f"CREATE INDEX IF NOT EXISTS {FLOOR_CALLS}_ready ON {FLOOR_CALLS} (state, created_at)"
        )
        self.conn.execute(
            f"CREATE TABLE IF NOT EXISTS {FLOOR_CLAIMS} (call_id bigint PRIMARY KEY, token uuid "
            "NOT NULL, generation int NOT NULL, expires_at timestamptz NOT NULL)"
        )
        self.conn.commit()
        self.child = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--floor"],
            env={**os.environ, "BENCH_CONNINFO": dsn},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        if self.child.stdout.readline().strip() != "ready":
            raise RuntimeError("the floor's process did not start")
        self.count = 0

    def _send(self, payload: str, command: str | None) -> float:
        if command is not None:
            self.conn.execute(
                f"INSERT INTO {FLOOR_CALLS} (state, command) VALUES ('ready', %s)", (command,)
            )
        self.conn.execute("SELECT pg_notify(%s, %s)", (FLOOR_CHANNEL, payload))
        sent = time.time()
        self.conn.commit()
        return sent

    def sample(self) -> float:
        self.count += 1
        sent = self._send(str(self.count), PICKUP_COMMAND)
        payload, started = self.child.stdout.readline().split()
        assert payload == str(self.count), payload
        return float(started) - sent

    def close(self) -> None:
        self._send("stop", None)
        self.child.wait(10)
        self.conn.close()
