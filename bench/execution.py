"""Execution benches: the runtime's paths beside a shell doing the same work, in the same run.

    python bench/execution.py [--runs N] [--quick]

Run from the repository root (the script puts the root on ``sys.path``; nothing here needs
Django or a database). Prints a Markdown table with PASS/FAIL per goal and always exits 0: it is
a report, not a test. Each figure is the median of ``--runs`` runs (3), the measured path and
its baseline run in turns (a, b, a, b, …) so that load from other processes falls on both.

Rows are a table of benches (``BENCHES``): each takes the runs and a scratch folder and adds
its rows. Add a bench by appending one.

Each capture runs in a fresh interpreter (``--child``) that reports its time and its peak
resident set (``VmHWM``, cross-checked by sampling) above the resident set it had when the
capture started: what the capture itself adds, whatever ran before it. Its time is measured
inside that interpreter, around the capture alone.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools.runtime.capture import ProcessCapture, tool_environment  # noqa: E402
from tools.runtime.live import LiveOutput  # noqa: E402

MIB = 1024 * 1024
CAPTURE_BYTES = 256 * MIB
ZEROS = f"head -c {CAPTURE_BYTES} /dev/zero"
TEXT = f"head -c {CAPTURE_BYTES} /dev/zero | tr '\\0' x"


# --- measuring ---------------------------------------------------------------------------------


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))


class Table:
    def __init__(self) -> None:
        self.verdicts: list[bool] = []

    def add(
        self,
        figure: str,
        measured: str,
        baseline: str,
        ratio: float | None,
        goal: str = "",
        ok=None,
    ) -> None:
        verdict = "" if ok is None else ("PASS" if ok else "FAIL")
        if ok is not None:
            self.verdicts.append(ok)
        ratio_text = "" if ratio is None else f"{ratio:.2f}"
        print(
            f"| {figure} | {measured} | {baseline} | {ratio_text} | {goal} | {verdict} |",
            flush=True,
        )


def seconds(t: float) -> str:
    return f"{t * 1000:.0f} ms" if t < 1 else f"{t:.2f} s"


def in_turns(runs: int, *fns: Callable[[], object]) -> list[list]:
    """Each of ``fns`` run ``runs`` times, in turns; their answers per function."""
    answers: list[list] = [[] for _ in fns]
    for _ in range(runs):
        for fn, got in zip(fns, answers, strict=True):
            gc.collect()
            got.append(fn())
    return answers


# --- process capture ---------------------------------------------------------------------------


def _shell_redirect(command: str, folder: Path) -> Callable[[], float]:
    """The baseline: the shell writes the whole output to a file itself."""

    def run() -> float:
        target = folder / "redirect.out"
        started = time.perf_counter()
        subprocess.run(["sh", "-c", f"{command} > {target}"], check=True)
        spent = time.perf_counter() - started
        target.unlink()
        return spent

    return run


def _capture(command: str, folder: Path, *, live: bool) -> Callable[[], dict]:
    """One capture in a fresh interpreter (so its peak memory is the capture's own)."""

    def run() -> dict:
        shutil.rmtree(folder / "attempt", ignore_errors=True)
        shutil.rmtree(folder / "index", ignore_errors=True)
        child = [sys.executable, __file__, "--child", command, str(folder)]
        done = subprocess.run(child + (["--live"] if live else []), capture_output=True, check=True)
        report = json.loads(done.stdout)
        assert report["result"]["capture"]["stdout"]["bytes"] == CAPTURE_BYTES, report
        return report

    return run


def child(command: str, folder: Path, live: bool) -> None:
    """The measured side: seconds of the capture, and the resident set before and at its
    peak (``VmHWM``, cross-checked by sampling ``VmRSS`` every 10 ms from the event loop)."""

    async def capture_once() -> dict:
        loop = asyncio.get_running_loop()

        def sample() -> None:
            sampled.append(_status_kib("VmRSS:"))
            handle[0] = loop.call_later(0.01, sample)

        handle = [loop.call_later(0.01, sample)]
        output = LiveOutput() if live else None
        capture = ProcessCapture(
            command=command,
            cwd=folder,
            env=tool_environment(folder),
            folder=folder / "attempt",
            on_output=output.feed if output else None,
            index_dir=folder / "index",
        )
        try:
            return await capture.run(600)
        finally:
            handle[0].cancel()

    sampled: list[int] = []
    gc.collect()
    before = _status_kib("VmRSS:")
    started = time.perf_counter()
    result = asyncio.run(capture_once())
    spent = time.perf_counter() - started
    peak = max([_status_kib("VmHWM:"), *sampled])
    print(json.dumps({"seconds": spent, "growth": (peak - before) * 1024, "result": result}))


def _capture_rows(
    table: Table, runs: int, folder: Path, *, name: str, command: str, live: bool, goal: bool
) -> None:
    captured, redirected = in_turns(
        runs, _capture(command, folder, live=live), _shell_redirect(command, folder)
    )
    spent = statistics.median(r["seconds"] for r in captured)
    baseline = statistics.median(redirected)
    ratio = spent / baseline
    table.add(
        f"{name} (baseline: the shell redirects it to a file)",
        seconds(spent),
        seconds(baseline),
        ratio,
        "≤ 2" if goal else "",
        ratio <= 2 if goal else None,
    )
    growth = statistics.median(r["growth"] for r in captured)
    table.add(
        f"{name}: peak RSS growth (baseline: the output's size)",
        f"{growth / MIB:.1f} MiB",
        f"{CAPTURE_BYTES // MIB} MiB",
        growth / CAPTURE_BYTES,
        "≤ 32 MiB",
        growth <= 32 * MIB,
    )


def bench_capture(table: Table, runs: int, folder: Path) -> None:
    _capture_rows(
        table,
        runs,
        folder,
        name="capture of 256 MiB on stdout (`head -c 268435456 /dev/zero`)",
        command=ZEROS,
        live=False,
        goal=True,
    )


def bench_capture_live_text(table: Table, runs: int, folder: Path) -> None:
    _capture_rows(
        table,
        runs,
        folder,
        name="capture + live output of 256 MiB of text (the zeros through `tr '\\0' x`)",
        command=TEXT,
        live=True,
        goal=True,
    )


def bench_capture_live_zeros(table: Table, runs: int, folder: Path) -> None:
    # No goal: every NUL becomes U+FFFD (3 bytes) in the live view, whose bounded output then
    # costs a UTF-8 encoding of every byte; ASCII text takes the fast path of the row above.
    _capture_rows(
        table,
        runs,
        folder,
        name="capture + live output of 256 MiB of NUL bytes (worst case for the live view)",
        command=ZEROS,
        live=True,
        goal=False,
    )


BENCHES: list[Callable[[Table, int, Path], None]] = [
    bench_capture,
    bench_capture_live_text,
    bench_capture_live_zeros,
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--quick", action="store_true", help="1 run per figure")
    parser.add_argument("--child", nargs=2, metavar=("COMMAND", "FOLDER"), help=argparse.SUPPRESS)
    parser.add_argument("--live", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]), args.live)
        return
    runs = 1 if args.quick else max(1, args.runs)
    started = time.perf_counter()
    print(
        f"{datetime.date.today().isoformat()}; Python {platform.python_version()}; "
        f"{os.cpu_count()} cores; medians of {runs} runs. Ratio: measured over baseline "
        "(lower is better).\n"
    )
    print("| figure | measured | baseline | ratio | goal | result |")
    print("|---|---|---|---|---|---|")
    table = Table()
    with tempfile.TemporaryDirectory(prefix="toolcore-bench-") as tmp:
        for bench in BENCHES:
            bench(table, runs, Path(tmp))
    print(
        f"\n{sum(table.verdicts)} of {len(table.verdicts)} goals met; "
        f"{time.perf_counter() - started:.0f} s in all."
    )


if __name__ == "__main__":
    main()
