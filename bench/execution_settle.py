"""The claim-run-settle bench: 1,000 ``read`` calls of a small file, made ready beforehand (10
conversations of 100), run by 1, 2 and 4 worker processes (4 calls at once each, the default),
set up beforehand and started together: from their start to the commit of the 1,000th response
event, with the CPU the processes and PostgreSQL used meanwhile. Baseline: as many raw psycopg
``INSERT`` + ``DELETE`` transactions (bench/core.py's ``RawEvents``). Needs PostgreSQL.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from _measure import in_turns, per_run
from _report import Table, spread
from execution_setup import DJANGO, OPTIONS, open_conversation, post_calls, seconds
from execution_workers import Workers

THROUGHPUT_CALLS = 1000
THROUGHPUT_PROCESSES = (1, 2, 4)
SMALL_FILE = "".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(40))


def _ready_reads(n: int) -> list:
    """``n`` ready ``read`` calls of a small file, 100 to a conversation (one assistant message
    each); the conversations' ids."""
    from conversations.models import ToolCall

    conversations = []
    for c in range(n // 100):
        conversation, turn_id = open_conversation(f"reads-{c}", {"small.txt": SMALL_FILE})
        post_calls(conversation, turn_id, [("read", {"path": "small.txt"})] * 100)
        conversations.append(conversation.pk)
    ready = ToolCall.objects.filter(conversation_id__in=conversations, state="ready").count()
    assert ready == n, ready
    return conversations


class CPU:
    """CPU seconds used so far by some processes, by the PostgreSQL server's processes, and by
    the whole machine (busy and in all, over every core), from ``/proc``."""

    def __init__(self, pids: list[int]) -> None:
        self.each = [self._process(pid) for pid in pids]
        self.workers = sum(self.each)
        self.postgres = sum(
            self._process(int(p.name))
            for p in Path("/proc").iterdir()
            if p.name.isdigit() and self._comm(p) == "postgres"
        )
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
        hz = os.sysconf("SC_CLK_TCK")
        self.total = sum(ticks[:8]) / hz
        self.busy = self.total - (ticks[3] + ticks[4]) / hz  # less idle and iowait

    @staticmethod
    def _comm(proc: Path) -> str:
        try:
            return (proc / "comm").read_text().strip()
        except OSError:
            return ""

    @staticmethod
    def _process(pid: int) -> float:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def since(self, before: CPU) -> dict[str, float]:
        each = [after - was for after, was in zip(self.each, before.each, strict=True)]
        return {
            "workers": self.workers - before.workers,
            "least": min(each),
            "most": max(each),
            "postgres": self.postgres - before.postgres,
            "busy": (self.busy - before.busy) / (self.total - before.total),
        }


def _claim_run_settle(env: dict, processes: int, n: int, folder: Path) -> dict[str, float]:
    """Seconds from starting ``processes`` worker processes (set up beforehand) to the commit of
    the ``n``-th response event, and the CPU used meanwhile."""
    from django.db.models import Max

    from conversations.models import ConversationEvent

    conversations = _ready_reads(n)
    responses = ConversationEvent.objects.filter(
        conversation_id__in=conversations, type="tool_call_response"
    )
    workers = Workers(env, processes, folder)
    pids = [p.pid for p in workers.processes]
    try:
        cpu = CPU(pids)
        started = time.time()
        workers.go()
        deadline = time.monotonic() + 600
        while responses.count() < n:
            workers.check()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{n} calls not settled within 600 s")
            time.sleep(0.1)
        used = CPU(pids).since(cpu)
        last = responses.aggregate(last=Max("created_at"))["last"].timestamp()
    finally:
        errors = workers.stop()
    assert "Traceback" not in errors, errors
    outcomes = {p["outcome"] for p in responses.values_list("payload", flat=True).iterator()}
    assert outcomes == {"completed"}, outcomes
    return {"seconds": last - started, **used}


def bench_claim_run_settle(table: Table, runs: int, folder: Path) -> None:
    """1,000 ready ``read`` calls (10 conversations of 100) run by 1, 2 and 4 worker processes
    (4 calls at once each); the raw baseline: as many ``INSERT`` + ``DELETE`` transactions with
    psycopg (bench/core.py's ``RawEvents``)."""
    n = THROUGHPUT_CALLS // 5 if OPTIONS.quick else THROUGHPUT_CALLS
    figure = f"claim-run-settle of {n:,} `read` calls"
    connection = DJANGO.postgresql()
    if connection is None:
        table.skip(figure, DJANGO.skip_reason())
        return
    from _setup import process_env
    from core import RawEvents

    env = process_env(connection)
    raw = RawEvents(connection, DJANGO.user, "raw")

    def baseline() -> float:
        raw.scratch_rows(n)
        return raw.transactions(n, "tool_call_response", delete_scratch=True)

    measures = [lambda k=k: _claim_run_settle(env, k, n, folder) for k in THROUGHPUT_PROCESSES]
    *answers, raws = in_turns(runs, *measures, baseline)
    raw.conn.close()
    got = {
        k: {key: statistics.median(a[key] for a in runs_of_k) for key in runs_of_k[0]}
        for k, runs_of_k in zip(THROUGHPUT_PROCESSES, answers, strict=True)
    }
    spent = {
        k: [a["seconds"] for a in runs_of_k]
        for k, runs_of_k in zip(THROUGHPUT_PROCESSES, answers, strict=True)
    }
    raw_time = statistics.median(raws)
    one = got[1]["seconds"]

    def cpu(k: int) -> str:
        g = got[k]
        each = "" if k == 1 else f" (each process {g['least']:.2f}–{g['most']:.2f} s)"
        return (
            f"; CPU a call: workers {g['workers'] / n * 1000:.1f} ms{each}, PostgreSQL "
            f"{g['postgres'] / n * 1000:.1f} ms; machine busy {g['busy']:.0%}"
        )

    table.add(
        f"{figure}, 1 worker process (baseline: {n:,} raw psycopg `INSERT` + `DELETE` "
        "transactions)",
        f"{spread(spent[1], seconds)} ({one / n * 1000:.2f} ms a call{cpu(1)})",
        f"{spread(raws, seconds)} ({raw_time / n * 1000:.2f} ms each)",
        per_run(spent[1], raws),
        measured=spent[1],
        baseline=raws,
        unit="s",
    )
    # More processes can only use the CPU one process leaves idle: on this machine, at most
    # 1 ÷ (the share of the whole machine busy while one process runs) times faster.
    ceilings = [1 / a["busy"] for a in answers[0]]
    table.add(
        f"  ceiling of any speedup on {os.cpu_count()} cores: 1 ÷ the machine's busy share with "
        "1 process (a goal above it is out of reach here)",
        "",
        "",
        ceilings,
    )
    for k in THROUGHPUT_PROCESSES[1:]:
        goal = k == 4
        speedups = per_run(spent[1], spent[k])
        ok = statistics.median(speedups) >= 1.5 if goal else None
        above = ok is False and statistics.median(ceilings) < 1.5
        table.add(
            f"{figure}, {k} worker processes (baseline: 1; ratio: speedup)",
            f"{spread(spent[k], seconds)} ({got[k]['seconds'] / n * 1000:.2f} ms a call{cpu(k)})",
            spread(spent[1], seconds),
            speedups,
            "speedup ≥ 1.5" if goal else "",
            ok,
            "FAIL (goal above the ceiling)" if above else "",
            measured=spent[k],
            baseline=spent[1],
            unit="s",
            floor=statistics.median(ceilings) if goal else None,
        )
