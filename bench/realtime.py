"""Realtime benches: the websockets and the history page beside baselines measured in the same run.

    python bench/realtime.py [--runs N] [--quick] [--only NAME]

Run from the repository root. SQLite by default (a throw-away file database, bench/_setup.py);
PostgreSQL when ``DATABASE_URL`` is set; the fan-out runs on the in-memory channel layer and,
when ``REDIS_URL`` is set, on Redis too. Prints a Markdown table: each figure is the median of
``--runs`` runs (3) with the smallest and largest in brackets, the measured path and its
baseline run in turns; a ratio is the median of the per-run ratios. Always exits 0 once the
benches ran: it is a report, not a test.

- Replay: 100,000 stored events to one client that subscribes with ``after: 0``, through daphne
  serving ``config.asgi:application`` on the bench database. Baseline: a bare ``websockets``
  server sending the same replay frames (those the consumer sent in a warm-up run),
  pre-encoded. Floor: a bare server that reads the rows with the raw driver (1,000 at a time,
  as the consumer does), formats the events and frames, and sends them.
- Fan-out: 200 sockets subscribed to one conversation, daphne serving
  ``bench/realtime_asgi.py`` (Toolcore's application plus ``/ws/bare/``, a bare Channels
  consumer on the layer the product publishes conversation groups to: the baseline). Another process POSTs assistant messages through
  daphne's REST (``POST …/messages``) one after the other, as fast as daphne answers, so on the
  in-memory layer they are published in daphne's process. Latency: from the commit
  (``committedAt``, stamped by the bench application) to receipt, p50 and p99 of every
  message; throughput: messages received ÷ the time from the first POST to the last message.
  1,000 events per path and layer, split over the runs (3 × 334: a run of 1,000 events takes
  about a minute here). Sockets open and close 25 at a time (see ``AT_ONCE``).
- History: ``GET /api/v1/conversations/{cid}/history?limit=50`` of a conversation with 10,000
  settled calls (9 in 10 with 16 KiB of output in their activity) against one with 100, in
  the bench process (Django's test client): time and bytes read from the database (see
  ``QueryBytes``). The calls are made through the services, as a worker settles them, which
  takes 1.5–2.5 minutes for 10,000. Skipped while the endpoint answers 404 or 405.
- Memory: daphne's resident set (``VmRSS``) before and after 1,000 sockets connect and
  subscribe (one conversation each), per socket; baseline: the bare consumer. A fresh daphne
  each run. Then the CPU daphne uses over 10 s while they idle: one period of the sockets'
  credential re-check (``TOOLCORE_WS_AUTH_CHECK_SECONDS``); the head checks (every 30 s) fall
  outside it.

Each bench lives in a module of its own beside this script (``realtime_replay``,
``realtime_fanout``, ``realtime_history``, ``realtime_memory``; what they share in
``realtime_setup``; the processes they start in ``realtime_peers``); this one parses the command
line and runs them.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _measure import load_average
from _report import Report, Table
from realtime_fanout import bench_fanout
from realtime_history import bench_history
from realtime_memory import bench_memory
from realtime_peers import raise_fd_limit
from realtime_replay import bench_replay
from realtime_setup import Bench

BENCHES: list[Callable[[Bench, Table, int], None]] = [
    bench_replay,
    bench_fanout,
    bench_history,
    bench_memory,
]


def main() -> None:
    report = Report("realtime")  # takes ``--json PATH`` off the command line
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--quick", action="store_true", help="1 run per figure, smaller sizes")
    parser.add_argument("--only", metavar="NAME", help="only the benches whose name has NAME")
    args = parser.parse_args()
    runs = 1 if args.quick else max(1, args.runs)
    raise_fd_limit()
    import _setup  # the benches' environment: DATA_DIR, DEBUG off, …

    data_dir = Path(os.environ["DATA_DIR"])
    started = time.perf_counter()
    table = Table(report)
    try:
        with tempfile.TemporaryDirectory(prefix="toolcore-bench-") as tmp:
            bench = Bench(Path(tmp), args.quick)
            try:
                layers = ", ".join(layer for layer, _ in bench.layers())
                report.header = (
                    f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; Python "
                    f"{platform.python_version()}; {os.cpu_count()} cores; {load_average()} at the "
                    f"start; database {bench.vendor}; channel layers: {layers}; medians of "
                    f"{runs} runs (smallest–largest)."
                )
                print(report.header + "\n")
                print("| figure | measured | baseline | ratio | goal | result |")
                print("|---|---|---|---|---|---|")
                for fn in BENCHES:
                    if args.only is None or args.only in fn.__name__:
                        fn(bench, table, runs)
            finally:
                bench.close()
    finally:
        _setup.remove_bench_data_dir(data_dir)
    print()
    for note in table.notes:
        print(note)
    footer = (
        f"{sum(table.verdicts)} of {len(table.verdicts)} goals met; "
        f"{time.perf_counter() - started:.0f} s in all; {load_average()} at the end."
    )
    print(footer)
    report.write(" ".join([*table.notes, footer]))


if __name__ == "__main__":
    main()
