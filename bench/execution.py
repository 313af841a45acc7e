"""Execution benches: the runtime's paths beside a baseline doing the same work, in the same run.

    python bench/execution.py [--runs N] [--quick] [--only NAME] [--profile DIR]

Run from the repository root (the script puts the root on ``sys.path``). Prints a Markdown
table with PASS/FAIL per goal and always exits 0 when the benches ran: it is a report, not a
test. Each figure is the median of ``--runs`` runs (3), the measured path and its baseline run
in turns (a, b, a, b, …) so that load from other processes falls on both; a latency is a
percentile of its samples, taken in turns with the baseline's.

Rows are a table of benches (``BENCHES``): each takes the table, the runs and a scratch folder
and adds its rows. Add a bench by appending one. Each lives in a module of its own beside this
script (``execution_capture``, ``execution_pickup`` with ``execution_pickup_baselines``,
``execution_settle``, ``execution_grep``, ``execution_parse``; what they share in ``execution_setup`` and
``execution_workers``); this script parses the command line, runs them and is the entry point
of every child process they start.

- Capture: each capture runs in a fresh interpreter (``--child``) that reports its time and its
  peak resident set (``VmHWM``, cross-checked by sampling) above the resident set it had when
  the capture started: what the capture itself adds, whatever ran before it. Its time is
  measured inside that interpreter, around the capture alone. No database.
- Pickup latency: an idle ``manage.py runworker_tools`` process and sequential ``bash`` calls,
  each made ready by its own assistant message (allowed by a rule). From the ``COMMIT`` that
  makes the call ready (stamped in this process) to the first instruction of its process
  (``date +%s.%N``, the same wall clock); the baseline, sampled in turns: a transaction that
  sends ``pg_notify`` and commits, heard by a ``LISTEN``ing connection in another process, from
  its ``COMMIT`` to the notification read. The floor, sampled in turns too: a raw psycopg
  process (``--floor``) that hears a notification, claims a ready row of a scratch table in one
  statement (the worker's claim, pick ``SKIP LOCKED``, move, insert the claim) and a durable
  commit, and ``Popen``s the same command. Then the same pickups with a traced worker process
  (``--trace``), for the time of each step.
- Claim-run-settle: 1,000 ``read`` calls of a small file, made ready beforehand (10
  conversations of 100), run by 1, 2 and 4 worker processes (4 calls at once each, the
  default), set up beforehand and started together: from their start to the commit of the
  1,000th response event, with the CPU the processes and PostgreSQL used meanwhile. Baseline:
  as many raw psycopg ``INSERT`` + ``DELETE`` transactions (bench/core.py's ``RawEvents``).
- ``grep`` over a generated 50,000-file workspace against ``grep -rnE``. Django, no database.
- Reading hostile command lines (``execution_parse``): a 64 KiB line with 64 continuations, and
  a message of eight, against one raw tree-sitter parse of the same text. No database.
- The command sandbox (``TOOLCORE_SANDBOX``, tools/sandbox.py): the pickup latency with a worker
  process of ``bwrap`` against one of ``off``, in turns, beside its floor (the command's own
  start in the sandbox against ``/bin/sh -c``); the 256 MiB capture in the sandbox against
  outside it.

The pickup and claim-run-settle benches need PostgreSQL, the one database several processes
share: they run on a throw-away database (bench/_setup.py) and are skipped, with the reason
printed, when ``DATABASE_URL`` is not PostgreSQL. ``--profile DIR`` writes a ``cProfile`` of
each worker process they start (per thread, in thread CPU time) to DIR.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _measure import load_average  # noqa: E402
from _report import Report, Table  # noqa: E402
from execution_capture import (  # noqa: E402
    bench_capture,
    bench_capture_live_text,
    bench_capture_live_zeros,
    bench_capture_sandboxed,
    capture_child,
)
from execution_grep import bench_grep  # noqa: E402
from execution_parse import bench_parse  # noqa: E402
from execution_pickup import bench_pickup, bench_pickup_sandboxed  # noqa: E402
from execution_pickup_baselines import floor_child, listen_child  # noqa: E402
from execution_settle import bench_claim_run_settle  # noqa: E402
from execution_setup import DJANGO, OPTIONS  # noqa: E402
from execution_workers import worker_child  # noqa: E402

BENCHES: list[Callable[[Table, int, Path], None]] = [
    bench_capture,
    bench_capture_live_text,
    bench_capture_live_zeros,
    bench_capture_sandboxed,
    bench_pickup,
    bench_pickup_sandboxed,
    bench_claim_run_settle,
    bench_grep,
    bench_parse,
]


def main() -> None:
    report = Report("execution")  # takes ``--json PATH`` off the command line
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--quick", action="store_true", help="1 run per figure, smaller sizes")
    parser.add_argument(
        "--only", metavar="NAME", help="only the benches whose name contains NAME (bench_…)"
    )
    parser.add_argument("--child", nargs=2, metavar=("COMMAND", "FOLDER"), help=argparse.SUPPRESS)
    parser.add_argument("--live", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sandboxed", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker", type=int, metavar="CONCURRENCY", help=argparse.SUPPRESS)
    parser.add_argument("--trace", metavar="FILE", help=argparse.SUPPRESS)
    parser.add_argument(
        "--profile",
        metavar="DIR",
        type=Path,
        help="write cProfile statistics of each worker process started to DIR "
        "(workers-<count>-<i>.prof; each run overwrites them)",
    )
    parser.add_argument("--listen", metavar="CHANNEL", help=argparse.SUPPRESS)
    parser.add_argument("--floor", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        capture_child(args.child[0], Path(args.child[1]), args.live, args.sandboxed)
        return
    if args.worker:
        worker_child(args.worker, args.trace, args.profile and str(args.profile))
        return
    if args.listen:
        listen_child(args.listen)
        return
    if args.floor:
        floor_child()
        return
    OPTIONS.quick, OPTIONS.profile = args.quick, args.profile
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    runs = 1 if args.quick else max(1, args.runs)
    started = time.perf_counter()
    report.header = (
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; Python "
        f"{platform.python_version()}; {os.cpu_count()} cores; {load_average()} at the start; "
        f"medians of {runs} runs (smallest–largest). Ratio: measured over baseline (lower is "
        "better) unless the row says otherwise."
    )
    print(report.header + "\n")
    print("| figure | measured | baseline | ratio | goal | result |")
    print("|---|---|---|---|---|---|")
    table = Table(report)
    try:
        with tempfile.TemporaryDirectory(prefix="toolcore-bench-") as tmp:
            for bench in BENCHES:
                if args.only is None or args.only in bench.__name__:
                    os.sync()  # what the bench before wrote is on disk, not written back now
                    bench(table, runs, Path(tmp))
    finally:
        DJANGO.close()
    footer = (
        f"{sum(table.verdicts)} of {len(table.verdicts)} goals met; "
        f"{time.perf_counter() - started:.0f} s in all; {load_average()} at the end."
    )
    print(f"\n{footer}")
    report.write(footer)


if __name__ == "__main__":
    main()
