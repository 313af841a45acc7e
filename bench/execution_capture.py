"""Capture benches: a command's 256 MiB of output captured by ``ProcessCapture`` (with and
without the live view), beside the shell redirecting the same output to a file.

Each capture runs in a fresh interpreter (``bench/execution.py --child``) that reports its time
and its peak resident set (``VmHWM``, cross-checked by sampling) above the resident set it had
when the capture started: what the capture itself adds, whatever ran before it. Its time is
measured inside that interpreter, around the capture alone. No database.
"""

from __future__ import annotations

import asyncio
import gc
import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from _measure import in_turns, per_run
from _report import Table, spread
from execution_setup import MIB, SCRIPT, seconds

CAPTURE_BYTES = 256 * MIB
ZEROS = f"head -c {CAPTURE_BYTES} /dev/zero"
TEXT = f"head -c {CAPTURE_BYTES} /dev/zero | tr '\\0' x"


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))


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


def _capture(
    command: str, folder: Path, *, live: bool, sandboxed: bool = False
) -> Callable[[], dict]:
    """One capture in a fresh interpreter (so its peak memory is the capture's own); in the
    command sandbox (``tools/sandbox.py``) when ``sandboxed``."""

    def run() -> dict:
        shutil.rmtree(folder / "attempt", ignore_errors=True)
        shutil.rmtree(folder / "index", ignore_errors=True)
        child = [sys.executable, str(SCRIPT), "--child", command, str(folder)]
        child += ["--live"] if live else []
        child += ["--sandboxed"] if sandboxed else []
        done = subprocess.run(child, capture_output=True, check=True)
        report = json.loads(done.stdout)
        assert report["result"]["capture"]["stdout"]["bytes"] == CAPTURE_BYTES, report
        return report

    return run


def capture_child(command: str, folder: Path, live: bool, sandboxed: bool = False) -> None:
    """The measured side: seconds of the capture, and the resident set before and at its
    peak (``VmHWM``, cross-checked by sampling ``VmRSS`` every 10 ms from the event loop)."""
    from tools.runtime.capture import ProcessCapture, tool_environment
    from tools.runtime.live import LiveOutput
    from tools.sandbox import SYSTEM_HIDDEN, Sandbox
    from tools.sandbox_limits import Limits

    # The settings' default limits (this child runs without Django's settings).
    limits = Limits(processes=1024, memory=4 * 1024**3, file_size=8 * 1024**3)
    sandbox = Sandbox(workspace=folder, hide=SYSTEM_HIDDEN, limits=limits) if sandboxed else None

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
            sandbox=sandbox,
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
    spent = [r["seconds"] for r in captured]
    ratios = per_run(spent, redirected)
    table.add(
        f"{name} (baseline: the shell redirects it to a file)",
        spread(spent, seconds),
        spread(redirected, seconds),
        ratios,
        "≤ 2" if goal else "",
        statistics.median(ratios) <= 2 if goal else None,
        measured=spent,
        baseline=redirected,
        unit="s",
    )
    growth = [r["growth"] / MIB for r in captured]
    table.add(
        f"{name}: peak RSS growth (baseline: the output's size)",
        spread(growth, lambda v: f"{v:.1f} MiB"),
        f"{CAPTURE_BYTES // MIB} MiB",
        [g * MIB / CAPTURE_BYTES for g in growth],
        "≤ 32 MiB",
        statistics.median(growth) <= 32,
        measured=growth,
        baseline=CAPTURE_BYTES / MIB,
        unit="MiB",
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


def bench_capture_sandboxed(table: Table, runs: int, folder: Path) -> None:
    """The same 256 MiB capture in the command sandbox, against it outside."""
    from tools.sandbox import bwrap_problem

    figure = "capture of 256 MiB on stdout in the command sandbox (bubblewrap)"
    problem = bwrap_problem()
    if problem is not None:
        table.skip(figure, problem)
        return
    inside, outside = in_turns(
        runs,
        _capture(ZEROS, folder, live=False, sandboxed=True),
        _capture(ZEROS, folder, live=False),
    )
    spent, base = [r["seconds"] for r in inside], [r["seconds"] for r in outside]
    ratios = per_run(spent, base)
    table.add(
        f"{figure} (baseline: the same capture without the sandbox)",
        spread(spent, seconds),
        spread(base, seconds),
        ratios,
        "≤ 1.1",
        statistics.median(ratios) <= 1.1,
        measured=spent,
        baseline=base,
        unit="s",
    )
