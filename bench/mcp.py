"""MCP benches: Toolcore's MCP server beside its REST API, and its MCP client's settlement beside
the SDK's client alone, against a live daphne.

    python bench/mcp.py [--runs N] [--calls N] [--samples N] [--streams N] [--window S]
                        [--quick] [--only call|settle|waiting]

Each bench is a module beside this script (``mcp_call``, ``mcp_settle``, ``mcp_waiting``; what they share in
``mcp_setup``; daphne's application in ``mcp_asgi``; the stdio server in
``mcp_stamp_server``); this one parses the command line and runs them. Run from the repository
root. SQLite by default (a throw-away file database, bench/_setup.py);
PostgreSQL when ``DATABASE_URL`` is set, the Redis channel layer when ``REDIS_URL`` is. One
daphne serves ``bench/mcp_asgi.py`` (Toolcore's application with its embedded tool worker,
``TOOLCORE_WORKERS=1``, plus a settlement clock and a bare SDK server) on the bench database.
Prints a Markdown table; always exits 0 once the benches ran: it is a report, not a test.

- ``tools/call`` against REST: a ``read`` of a small file (allowed by a global permission rule,
  so no approval) through ``/mcp/`` with the official SDK's client (``streamable_http_client``
  and ``ClientSession``, the session opened once, then one call after the other), against the
  same call through REST as a model's client makes it: ``POST …/messages`` (an assistant
  message with the ``read`` call) then the turn barrier ``GET …/turns/{tid}/results?wait=30``,
  on one kept-alive connection (the same ``httpx2`` client the SDK uses). Each run times
  ``--calls`` calls of each, in turns (MCP, REST, bare); a run's figure is the median call, the
  ratio MCP ÷ REST per run, goal ≤ 1.5. The bare row: the same SDK client against a bare SDK
  server on the same daphne whose ``read`` answers a fixed text at once (``/bare/mcp/``): what
  the SDK itself costs a call on both ends.
- A stdio MCP server's answer to its call's settlement: ``bench/mcp_stamp_server.py``
  registered as the stdio server ``stamp`` (``tools/runtime/mcp/services.py``), its tool
  ``mcp__stamp__stamp`` allowed by a global rule; calls posted through REST one after the other
  (each awaited at the barrier). The tool answers its own ``time.time()``; the settlement's
  commit is stamped in daphne (``publish.send_now``, right after it committed). Baseline, in
  turns: the same server started by the SDK's client alone in this process, the answer to the
  client having it. ``--samples`` calls of each (p50, p95; the spread is the p50 of each run's
  slice).
- What waiting costs: ``--streams`` ``tools/call``s awaiting approval on their open streams,
  daphne's CPU against the same daphne idle, in turns (``mcp_waiting``).

Both clocks are the machine's wall clock (``time.time()``), read by processes of this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# This file is ``mcp.py`` and a script's folder comes first on ``sys.path``: put bench/ last, so
# that ``import mcp`` finds the SDK, and this folder's helpers are still found.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE] + [str(HERE)]

from _measure import load_average  # noqa: E402
from _report import Report, Table  # noqa: E402
from mcp_call import bench_call  # noqa: E402
from mcp_settle import bench_settle  # noqa: E402
from mcp_setup import Site  # noqa: E402
from mcp_waiting import bench_waiting  # noqa: E402


def main() -> None:
    report = Report("mcp")  # takes ``--json PATH`` off the command line
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per figure (median)")
    parser.add_argument("--calls", type=int, default=40, help="calls of each kind a run (40)")
    parser.add_argument("--samples", type=int, default=200, help="stdio calls of each (200)")
    parser.add_argument("--streams", type=int, default=400, help="waiting calls (400)")
    parser.add_argument("--window", type=float, default=12.0, help="seconds measured (12)")
    parser.add_argument("--quick", action="store_true", help="3 runs, 15 calls, 60 samples")
    parser.add_argument("--only", choices=("call", "settle", "waiting"), help="one bench")
    args = parser.parse_args()
    runs, calls, samples = max(1, args.runs), max(1, args.calls), max(1, args.samples)
    if args.quick:
        runs, calls, samples = 3, 15, 60
    import _setup  # the benches' environment: DATA_DIR, DEBUG off, …

    data_dir = Path(os.environ["DATA_DIR"])
    started = time.perf_counter()
    table = Table(report)
    try:
        with tempfile.TemporaryDirectory(prefix="toolcore-bench-") as tmp:
            site = Site(Path(tmp))
            try:
                report.header = (
                    f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; Python "
                    f"{platform.python_version()}; {os.cpu_count()} cores; {load_average()} at "
                    f"the start; database {site.vendor}; channel layer "
                    f"{'Redis' if os.environ.get('REDIS_URL') else 'in-memory'}; one daphne with "
                    f"its embedded worker; medians of {runs} runs (smallest–largest)."
                )
                print(report.header + "\n")
                print("| figure | measured | baseline | ratio | goal | result |")
                print("|---|---|---|---|---|---|")
                if args.only in (None, "call"):
                    asyncio.run(bench_call(site, table, runs, calls))
                if args.only in (None, "settle"):
                    asyncio.run(bench_settle(site, table, runs, samples))
                if args.only in (None, "waiting"):
                    streams, window = max(1, args.streams), max(1.0, args.window)
                    asyncio.run(bench_waiting(site, table, min(runs, 3), streams, window))
            finally:
                site.close()
    finally:
        _setup.remove_bench_data_dir(data_dir)
    print()
    footer = (
        f"{sum(table.verdicts)} of {len(table.verdicts)} goals met; "
        f"{time.perf_counter() - started:.0f} s in all; {load_average()} at the end."
    )
    for note in table.notes:
        print(note)
    print(footer)
    report.write(" ".join([*table.notes, footer]))


if __name__ == "__main__":
    main()
