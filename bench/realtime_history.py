"""The history bench: ``GET /api/v1/conversations/{cid}/history?limit=50`` of a conversation
with 10,000 settled calls (9 in 10 with 16 KiB of output in their activity) against one with
100, in the bench process (Django's test client): the time of one GET and the bytes it reads
from the database (``QueryBytes``). Skipped while the endpoint answers 404 or 405.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from typing import Any

from _measure import in_turns, millis, per_run
from _report import Table, spread
from realtime_setup import KIB, Bench, kib, open_conversation

HISTORY_URL = "/api/v1/conversations/{cid}/history"
HISTORY_CALLS = 10_000
HISTORY_SMALL_CALLS = 100
HISTORY_OUTPUT_CHARS = 16_000  # 16 KiB of output in the activity (a delta costs ≤ 16,384)
HISTORY_CALLS_A_MESSAGE = 50
HISTORY_REQUESTS = 20  # GETs of each conversation per run, in turns


class QueryBytes:
    """Bytes read from the database by the queries run inside the block.

    ``rows``: every ``SELECT`` is recorded (``connection.execute_wrapper``) and, after the
    block, run again with the same parameters; the sizes of the values it returns are summed
    (text in UTF-8, binary as is, 8 bytes a number, other values as their text): the rows
    fetched. ``buffers`` (PostgreSQL with ``pg_stat_statements`` loaded, else None): the shared
    buffers the statements of the bench database touched, hit or read, ``block_size`` each
    (table, index and TOAST pages)."""

    def __init__(self, connection: Any, *, stats: bool) -> None:
        self.connection = connection
        self.stats = stats
        self.statements: list[tuple[str, Any]] = []
        self.rows = 0
        self.buffers: int | None = None

    def _record(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if not many and sql.lstrip()[:6].upper() == "SELECT":
            self.statements.append((sql, params))
        return execute(sql, params, many, context)

    def __enter__(self) -> QueryBytes:
        if self.stats:
            with self.connection.cursor() as cursor:
                cursor.execute(f"SELECT pg_stat_statements_reset(0, {_THIS_DATABASE}, 0)")
        self._wrapper = self.connection.execute_wrapper(self._record)
        self._wrapper.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._wrapper.__exit__(*exc)
        if exc[0] is not None:
            return
        with self.connection.cursor() as cursor:
            if self.stats:
                cursor.execute(
                    "SELECT coalesce(sum(shared_blks_hit + shared_blks_read), 0) * "
                    "current_setting('block_size')::int FROM pg_stat_statements WHERE dbid = "
                    f"{_THIS_DATABASE} AND query NOT LIKE '%pg_stat_statements%'"
                )
                self.buffers = int(cursor.fetchone()[0])
            for sql, params in self.statements:
                cursor.execute(sql, params)
                self.rows += sum(_size(v) for row in cursor.fetchall() for v in row)


_THIS_DATABASE = "(SELECT oid FROM pg_database WHERE datname = current_database())"


def _size(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    if isinstance(value, bool | int | float):
        return 8
    return len(str(value).encode("utf-8"))


def _pg_stat_statements(connection: Any) -> bool:
    """Whether ``pg_stat_statements`` can be read here (created in the throw-away database
    when the server preloads it)."""
    from django.db import DatabaseError, transaction

    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            cursor.execute("SELECT count(*) FROM pg_stat_statements")
        return True
    except DatabaseError:
        return False


def _history_url(cid: str) -> str:
    return HISTORY_URL.format(cid=cid)


def _settled_calls(bench: Bench, n: int) -> Any:
    """A conversation with ``n`` calls of ``notes`` (50 to an assistant message, one turn),
    settled the way a worker settles them: claimed 50 at a time (``claim_acquire_batch``), 9 in
    10 given 16 KiB of output (an ``outputDelta`` folded into their activity), then
    ``call_settle`` (completed)."""
    from conversations.services import publish
    from conversations.services.activity import activity_fold
    from conversations.services.claims import claim_acquire_batch
    from conversations.services.messages import message_post
    from conversations.services.settlement import ClaimGuard, call_settle

    conversation, turn = open_conversation(bench, f"history {n}")
    output = "".join(f"line {i:05}: some tool output\n" for i in range(600))[:HISTORY_OUTPUT_CHARS]
    done = 0
    for batch in range(math.ceil(n / HISTORY_CALLS_A_MESSAGE)):
        count = min(HISTORY_CALLS_A_MESSAGE, n - done)
        message_post(
            conversation_id=conversation.pk,
            message_id=f"a{batch}",
            role="assistant",
            turn_id=turn,
            content=[{"type": "text", "text": f"calling {count} tools"}]
            + [
                {"type": "tool_call", "id": f"p{batch}-{i}", "name": "notes", "arguments": {"q": i}}
                for i in range(count)
            ],
        )
        claims = claim_acquire_batch(
            tool_names=["notes"], worker="bench", limit=count, owner_id=bench.user.pk
        )
        assert len(claims) == count, len(claims)
        for claim in claims:
            if done % 10:
                with publish.atomic():  # the fold locks the activity row
                    activity_fold(
                        tool_call_id=claim.call_id,
                        update={
                            "toolCallId": str(claim.call_id),
                            "turnId": turn,
                            "outputDelta": output,
                        },
                    )
            call_settle(
                call_id=claim.call_id,
                outcome="completed",
                guard=ClaimGuard(claim.token, claim.generation),
                result={"content": [{"type": "text", "text": "ok"}]},
            )
            done += 1
    return conversation


def bench_history(bench: Bench, table: Table, runs: int) -> None:
    from django.test import Client

    figure = f"history page (`limit=50`) of {HISTORY_CALLS:,} calls"
    client = Client(HTTP_AUTHORIZATION=f"Bearer {bench.token}")
    probe, _ = open_conversation(bench, "history probe")
    refusals = logging.getLogger("conversations.api.middleware")  # logs each 404 as a warning
    level = refusals.level
    refusals.setLevel(logging.ERROR)
    try:
        status = client.get(_history_url(str(probe.pk)), {"limit": 50}).status_code
    finally:
        refusals.setLevel(level)
    if status in (404, 405):
        table.skip(figure, f"`GET …/history` answers {status} (the endpoint is not there yet)")
        return
    stats = bench.vendor == "postgresql" and _pg_stat_statements(bench.connection)
    big = str(_settled_calls(bench, HISTORY_CALLS).pk)
    small = str(_settled_calls(bench, HISTORY_SMALL_CALLS).pk)

    urls = [_history_url(big), _history_url(small)]

    def get(url: str) -> float:
        started = time.perf_counter()
        answer = client.get(url, {"limit": 50})
        spent = time.perf_counter() - started
        assert answer.status_code == 200, answer.content[:500]
        return spent

    def run() -> list[dict[str, Any]]:
        """One run: ``HISTORY_REQUESTS`` GETs of each page in turns (big, small, big, …), the
        median time of each; then the bytes of one GET of each."""
        spent = in_turns(HISTORY_REQUESTS, *(lambda u=u: get(u) for u in urls))
        answers = []
        for url, times in zip(urls, spent, strict=True):
            with QueryBytes(bench.connection, stats=stats) as read:
                client.get(url, {"limit": 50})
            answers.append(
                {"seconds": statistics.median(times), "rows": read.rows, "buffers": read.buffers}
            )
        return answers

    run()  # warm-up
    got, base = (list(side) for side in zip(*(run() for _ in range(runs)), strict=True))
    times = per_run([g["seconds"] for g in got], [b["seconds"] for b in base])
    table.add(
        f"{figure} (baseline: the same of {HISTORY_SMALL_CALLS} calls), time of one GET "
        f"(median of {HISTORY_REQUESTS})",
        spread([g["seconds"] for g in got], millis),
        spread([b["seconds"] for b in base], millis),
        times,
        "≤ 1.5",
        statistics.median(times) <= 1.5,
        measured=[g["seconds"] for g in got],
        baseline=[b["seconds"] for b in base],
        unit="s",
    )
    measures = [("rows", "rows fetched: the captured `SELECT`s run again, their values' sizes")]
    if stats:  # the goal is on the buffers when PostgreSQL can say
        measures.insert(0, ("buffers", "`pg_stat_statements`: shared buffers hit + read"))
    for i, (key, what) in enumerate(measures):
        sizes = per_run([g[key] for g in got], [b[key] for b in base])
        table.add(
            f"  bytes read from the database by one GET ({what})",
            spread([g[key] for g in got], kib),
            spread([b[key] for b in base], kib),
            sizes,
            "≤ 1.5" if i == 0 else "",
            statistics.median(sizes) <= 1.5 if i == 0 else None,
            measured=[g[key] / KIB for g in got],
            baseline=[b[key] / KIB for b in base],
            unit="KiB",
        )
