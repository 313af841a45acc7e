"""Core benches: ratios of the service paths to raw baselines measured in the same run.

    python bench/core.py [--runs N] [--quick]

Uses the database of the current settings (SQLite by default; set DATABASE_URL for
PostgreSQL) through a throw-away test database, and prints medians of several runs with the
smallest and largest, the service path and its raw baseline run in turns. ``--json PATH`` also
writes the rows as data (bench/_report.py; ``bench/run.py`` collects them).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
from pathlib import Path

from _measure import in_turns, per_run, timed
from _report import Report, Table, spread
from _setup import (
    conninfo,
    django_on_bench_database,
    drop_bench_database,
    remove_bench_data_dir,
)


def _raw_connection(connection):
    """A raw driver connection to the same database, outside Django."""
    settings = connection.settings_dict
    if connection.vendor == "postgresql":
        import psycopg

        return psycopg.connect(conninfo(connection)), "%s"
    conn = sqlite3.connect(settings["NAME"], isolation_level=None, timeout=20)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn, "?"


def _begin(conn, vendor: str) -> None:
    if vendor == "sqlite":
        conn.execute("BEGIN IMMEDIATE")


def _commit(conn, vendor: str) -> None:
    if vendor == "sqlite":
        conn.execute("COMMIT")
    else:
        conn.commit()


def _payload(i: int) -> dict:
    return {"messageId": f"m{i}", "content": [{"type": "text", "text": "x" * 220}]}


class RawEvents:
    """The raw baseline: event rows inserted with the driver, one transaction each, into a
    conversation of their own (optionally with a DELETE of a scratch row, as settlement does)."""

    def __init__(self, connection, user, title: str) -> None:
        from conversations.models import ConversationEvent
        from conversations.services.conversations import conversation_create

        self.conn, self.mark = _raw_connection(connection)
        self.vendor = connection.vendor
        conversation = conversation_create(owner=user, title=title)
        self.conv_id = conversation.pk.hex if self.vendor == "sqlite" else conversation.pk
        self.table = ConversationEvent._meta.db_table
        self.sequence = 0

    def scratch_rows(self, n: int) -> None:
        """``n`` rows in a scratch table for the baseline's DELETEs (made outside the timing)."""
        cur = self.conn.cursor()
        cur.execute("CREATE TABLE IF NOT EXISTS bench_scratch (id integer PRIMARY KEY)")
        cur.execute("DELETE FROM bench_scratch")
        cur.executemany(
            f"INSERT INTO bench_scratch (id) VALUES ({self.mark})", [(i,) for i in range(n)]
        )
        if self.vendor != "sqlite":
            self.conn.commit()

    def transactions(self, n: int, type_: str, *, delete_scratch: bool = False) -> float:
        mark, cur = self.mark, self.conn.cursor()

        def run():
            for i in range(n):
                self.sequence += 1
                _begin(self.conn, self.vendor)
                cur.execute(
                    f"INSERT INTO {self.table} (conversation_id, sequence, type, payload, "
                    f"created_at) VALUES ({mark}, {mark}, {mark}, {mark}, CURRENT_TIMESTAMP)",
                    (
                        self.conv_id,
                        self.sequence,
                        type_,
                        json.dumps(_payload(i), separators=(",", ":")),
                    ),
                )
                if delete_scratch:
                    cur.execute(f"DELETE FROM bench_scratch WHERE id = {mark}", (i,))
                _commit(self.conn, self.vendor)

        return timed(run)


def bench_append(connection, user, n: int) -> tuple[float, float]:
    from django.db import transaction

    from conversations.services.conversations import conversation_create
    from conversations.services.events import event_append

    conversation = conversation_create(owner=user, title="append")

    def service() -> float:
        def run():
            for i in range(n):
                with transaction.atomic():
                    event_append(
                        conversation_id=conversation.pk, type="user_message", payload=_payload(i)
                    )

        return timed(run)

    baseline = RawEvents(connection, user, "append-raw")

    def raw() -> float:
        return baseline.transactions(n, "user_message")

    return service, raw, baseline.conn, None


def _claimed_calls(user, n: int):
    """``n`` claimed calls of the built-in ``notes`` tool in one turn (made outside the timing)."""
    from conversations.services.claims import claim_acquire
    from conversations.services.conversations import conversation_create
    from conversations.services.messages import message_post

    conversation = conversation_create(owner=user, title="settle")
    turn = message_post(conversation_id=conversation.pk, message_id="u", role="user", content=[])
    claims = []
    for batch in range(n // 50):
        content = [
            {"type": "tool_call", "id": f"p{batch}-{i}", "name": "notes", "arguments": {"q": i}}
            for i in range(50)
        ]
        posted = message_post(
            conversation_id=conversation.pk,
            message_id=f"a{batch}",
            role="assistant",
            turn_id=turn.body["turnId"],
            content=content,
        )
        for call_id in posted.call_ids:
            claims.append(claim_acquire(call_id=call_id, worker="bench"))
    return claims


def _settle_service(user, n: int):
    from conversations.models import ToolCall
    from conversations.services.settlement import ClaimGuard, call_settle

    def service() -> float:
        claims = _claimed_calls(user, n)

        def run():
            for claim in claims:
                call_settle(
                    call_id=claim.call_id,
                    outcome="completed",
                    guard=ClaimGuard(claim.token, claim.generation),
                    result={"content": [{"type": "text", "text": "ok"}]},
                    text="ok",
                )

        elapsed = timed(run)
        assert not ToolCall.objects.filter(state="running").exists()
        return elapsed

    return service


def bench_settle(connection, user, n: int):
    baseline = RawEvents(connection, user, "settle-raw")

    def raw() -> float:
        baseline.scratch_rows(n)
        return baseline.transactions(n, "tool_call_response", delete_scratch=True)

    return _settle_service(user, n), raw, baseline.conn, None


def bench_settle_floor(connection, user, n: int):
    """PostgreSQL only: settlement against its floor, the same database and disk work driven
    from the driver with no Python around it: the same read, the same ``result.json`` creation
    (temporary file, ``fdatasync``, ``link``, ``fsync`` of the folder) and the same
    one-statement transaction."""
    import hashlib
    import os
    import uuid

    from django.utils import timezone

    from conversations.sql import postgresql as sql
    from conversations.sql.common import SETTLING_CALL_SQL, SettlingRow
    from conversations.storage import attempt_dir, relative_to_data

    conn, _ = _raw_connection(connection)
    data = json.dumps({"content": [{"type": "text", "text": "ok"}]}).encode()
    payload = json.dumps({"toolCallId": "x" * 36, "modelContent": [{"text": "y" * 700}]})
    statement = sql._settle_sql(True, 1, True)

    def floor() -> float:
        claims = _claimed_calls(user, n)
        cur = conn.cursor()

        def run():
            for claim in claims:
                cur.execute(SETTLING_CALL_SQL, (claim.call_id,))
                row = SettlingRow._make(cur.fetchone())
                folder = attempt_dir(row.conversation_id, claim.call_id, row.generation)
                os.makedirs(folder, exist_ok=True)
                tmp = folder / f".result.json.{uuid.uuid4().hex}.tmp"
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
                os.write(fd, data)
                os.fdatasync(fd)
                os.close(fd)
                os.link(tmp, folder / "result.json")
                os.unlink(tmp)
                dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
                os.fsync(dfd)  # the name durable too, as write_exclusive does
                os.close(dfd)
                now = timezone.now()
                cur.execute(
                    statement,
                    {
                        "conversation": row.conversation_id,
                        "call": claim.call_id,
                        "turn": row.turn_id,
                        "generation": claim.generation,
                        "state": "running",
                        "token": claim.token,
                        "type": "tool_call_response",
                        "payload": payload,
                        "now": now,
                        "a0_id": uuid.uuid4(),
                        "a0_kind": "payload",
                        "a0_path": relative_to_data(folder / "result.json"),
                        "a0_size": len(data),
                        "a0_sha256": hashlib.sha256(data).hexdigest(),
                        "a0_media_type": "application/json",
                        "a0_truncated": False,
                        "state_json": '{"status":"completed"}',
                        "payload_json": "{}",
                        "payload_bytes": 2,
                        "is_final": True,
                        "rev": row.activity_rev,
                    },
                )
                assert cur.fetchone() is not None
                conn.commit()

        return timed(run)

    return _settle_service(user, n), floor, conn, None


def bench_events(connection, user, n: int):
    from django.db import transaction
    from django.test import Client

    from conversations.api.auth import token_create
    from conversations.models import Conversation, ConversationEvent
    from conversations.services.conversations import conversation_create

    conversation = conversation_create(owner=user, title="replay")
    with transaction.atomic():
        ConversationEvent.objects.bulk_create(
            [
                ConversationEvent(
                    conversation=conversation,
                    sequence=i + 1,
                    type="user_message",
                    payload=_payload(i),
                )
                for i in range(n)
            ],
            batch_size=2000,
        )
        Conversation.objects.filter(pk=conversation.pk).update(last_sequence=n)
    with connection.cursor() as cursor:
        # Statistics, as autovacuum would gather them: without them PostgreSQL may plan the
        # raw read of a freshly loaded table as a scan of every row of it.
        cursor.execute(f"ANALYZE {ConversationEvent._meta.db_table}")
    _, secret = token_create(user=user, name="bench")
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    url = f"/api/v1/conversations/{conversation.pk}/events"

    def service() -> float:
        def run():
            after, seen = 0, 0
            while True:
                body = json.loads(client.get(url, {"after": after, "limit": 100}).content)
                seen += len(body["events"])
                if body["nextAfter"] is None:
                    break
                after = body["nextAfter"]
            assert seen == n, seen

        return timed(run)

    conn, mark = _raw_connection(connection)
    conv_id = conversation.pk.hex if connection.vendor == "sqlite" else conversation.pk
    payload = "payload::text" if connection.vendor == "postgresql" else "payload"
    # The same rows in the same pages (keyset, 100 at a time), the payload as stored text: no
    # JSON decoding, no HTTP, no access check.
    page_sql = (
        f"SELECT sequence, type, turn_id, tool_call_id, {payload}, created_at "
        f"FROM {ConversationEvent._meta.db_table} WHERE conversation_id = {mark} "
        f"AND sequence > {mark} ORDER BY sequence LIMIT 100"
    )

    def raw() -> float:
        cur = conn.cursor()

        def run():
            after, seen = 0, 0
            while True:
                cur.execute(page_sql, (conv_id, after))
                rows = cur.fetchall()
                if not rows:
                    break
                seen += len(rows)
                after = rows[-1][0]
            if connection.vendor == "postgresql":
                conn.commit()
            assert seen == n, seen

        return timed(run)

    pages = -(-n // 100)

    def floor() -> float:
        """The raw read plus as many requests of the endpoint that find nothing to send (an
        empty page at the head: the request, the token, the access check and one query), the
        least any page-by-page HTTP read of these rows costs."""

        def run():
            for _ in range(pages):
                body = json.loads(client.get(url, {"after": n, "limit": 100}).content)
                assert body["events"] == [], body

        return timed(run) + raw()

    return service, raw, conn, floor


def seconds(t: float) -> str:
    return f"{t:.3f} s"


def main() -> None:
    report = Report("core")
    table = Table(report)

    def add(figure, measured, baseline, ratios, goal=None, ok=None, verdict="", floor=None):
        table.add(
            figure,
            spread(measured, seconds),
            spread(baseline, seconds),
            ratios,
            "" if goal is None else f"≥ {goal}",
            ok,
            verdict,
            measured=measured,
            baseline=baseline,
            unit="s",
            floor=statistics.median(floor) if floor else None,
        )

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, 3 runs")
    args = parser.parse_args()
    runs = 3 if args.quick else args.runs
    connection = django_on_bench_database()
    try:
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.create(username="bench")
        sizes = {
            "append": 500 if args.quick else 2000,
            "settle": 200 if args.quick else 1000,
            "events": 20_000 if args.quick else 100_000,
        }
        report.header = (
            f"database: {connection.vendor}; medians of {runs} runs (smallest–largest), the "
            "service and its baseline in turns; ratio = baseline time / service time (higher "
            "is better)"
        )
        print(report.header + "\n")
        print("| path | service | raw baseline | ratio | goal | result |")
        print("|---|---|---|---|---|---|")
        driver = "psycopg" if connection.vendor == "postgresql" else "sqlite3"
        benches = [
            (
                f"event append ×{sizes['append']} (baseline: raw {driver} `INSERT` + commit)",
                bench_append,
                sizes["append"],
                0.4,
            ),
            # No goal: a durable result.json costs more than the whole raw transaction; the
            # goal is settlement against its floor (below, PostgreSQL).
            (
                f"settle ×{sizes['settle']} calls (baseline: raw {driver} `INSERT` + `DELETE` + "
                "commit), for reference",
                bench_settle,
                sizes["settle"],
                None,
            ),
            (
                f"`GET …/events` pages of 100 over {sizes['events']:,} events (baseline: raw "
                f"{driver} read of the same pages, payload as text)",
                bench_events,
                sizes["events"],
                0.5,
            ),
        ]
        if connection.vendor == "postgresql":
            benches.append(
                (
                    f"settle ×{sizes['settle']} vs its floor (the same SQL and file work from "
                    "psycopg and `os`, no Python around it)",
                    bench_settle_floor,
                    sizes["settle"],
                    0.75,
                )
            )
        for name, bench, size, goal in benches:
            if connection.vendor != "postgresql":
                goal = None  # the goals are for PostgreSQL: in-process sqlite3 is far cheaper
            service, raw, conn, floor = bench(connection, user, size)
            service_times, raw_times, *floor_times = in_turns(
                runs, service, raw, *([floor] if floor else [])
            )
            if conn is not None:
                conn.close()
            ratios = per_run(raw_times, service_times)
            floor_ratios = per_run(raw_times, floor_times[0]) if floor_times else None
            ok = None if goal is None else statistics.median(ratios) >= goal
            verdict = "" if ok is None else ("PASS" if ok else "FAIL")
            if ok is False and floor_ratios and statistics.median(floor_ratios) < goal:
                verdict = "FAIL (goal above the floor)"
            add(name, service_times, raw_times, ratios, goal, ok, verdict, floor_ratios)
            if floor_times:
                pages = size // 100
                add(
                    f"  floor: the raw read + {pages:,} requests of an empty page at the head "
                    "(request, token, access check, one query)",
                    floor_times[0],
                    raw_times,
                    floor_ratios,
                )
                add(
                    "  the service against that floor",
                    service_times,
                    floor_times[0],
                    per_run(floor_times[0], service_times),
                )
    finally:
        from django.conf import settings
        from django.db import connections

        connections.close_all()
        drop_bench_database(connection)
        remove_bench_data_dir(Path(settings.DATA_DIR))
    footer = f"{sum(table.verdicts)} of {len(table.verdicts)} goals met."
    print(f"\n{footer}")
    report.write(footer)


if __name__ == "__main__":
    main()
