"""Projection benches: each figure beside a baseline measured in the same run.

    python bench/projections.py [--runs N] [--quick]

Run from the repository root (the script puts the root on ``sys.path``, so nothing needs
installing; the projections import nothing from Django). Prints a Markdown table (the one in
docs/performance.md) with PASS/FAIL per goal and always exits 0: it is a report, not a test.
``--json PATH`` also writes the rows as data (bench/_report.py; ``bench/run.py`` collects them).
The unit tests never time anything (they count the work that decides these figures instead);
the clocks live here.

Every time is the median of ``--runs`` runs (5; 3 with ``--quick``). Goals are ratios to a figure
measured in the same run, because absolute times on a shared 2-core machine are noisy by 15-50%.
Memory is tracemalloc's peak growth during one call (deterministic up to a few KiB: one run).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import hashlib
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _measure import per_run, timed_in_turns  # noqa: E402
from _report import Report, Table, spread  # noqa: E402

from projections.frames import frame_page  # noqa: E402
from projections.json_cost import json_cost, json_size  # noqa: E402
from projections.process import project_process  # noqa: E402
from projections.tool_output import append_tool_output, bound_tool_output  # noqa: E402
from projections.tracker import ToolCallTracker  # noqa: E402
from projections.transcript import project_transcript  # noqa: E402

KIB = 1024
MIB = 1024 * 1024
# The diagnostic keywords of the process projection (docs/projections.md).
KEYWORDS = (
    "error",
    "errors",
    "warn",
    "warning",
    "fatal",
    "fail",
    "failed",
    "failure",
    "exception",
    "traceback",
    "panic",
    "denied",
    "timeout",
    "timed out",
    "segmentation fault",
)
NAIVE_DIAGNOSTIC = re.compile(r"\b(" + "|".join(KEYWORDS) + r")\b", re.IGNORECASE)

DELTA_CHARS = 4 * KIB
RESEND_STEP_CHARS = 10 * KIB
RESENDS_PER_RUN = 20
PAGE_BATCHES_PER_RUN = 20
PAGES_PER_BATCH = 5


# --- measuring ---------------------------------------------------------------------------------


def peak_growth(fn: Callable[[], object]) -> int:
    """Peak of traced memory above what was allocated when ``fn`` started, in bytes."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def seconds(t: float) -> str:
    return f"{t * 1000:.1f} ms" if t < 1 else f"{t:.2f} s"


def rate(size: int, times: list[float]) -> str:
    t = statistics.median(times)
    return f"{spread(times, seconds)} ({size / t / 1e6:.0f} MB/s)"


# --- inputs ------------------------------------------------------------------------------------


def build_capture(path: Path, size: int, *, seed: int = 1, near_misses: bool = True) -> int:
    """Write a synthetic build capture of exactly ``size`` bytes; answer its line count.

    Mostly CMake progress lines (~70 bytes); every 25th a verbose compiler command whose
    ``-Werror`` holds a keyword without a word boundary (a candidate the regex must reject); a
    warning every 2,000 lines; the real errors at the end, as a failing ``make`` prints them.
    Without ``near_misses`` the compiler commands say ``-Wextra`` instead.
    """
    flag = "-Werror=return-type" if near_misses else "-Wextra"
    rnd = random.Random(seed)
    dirs = ("core", "net", "util", "io", "ui", "db")
    ending = (
        b"src/main.cpp:77:5: error: 'frobnicate' was not declared in this scope\n"
        b"make[2]: *** [CMakeFiles/app.dir/build.make:76: CMakeFiles/app.dir/main.cpp.o] Error 1\n"
        b"make[1]: *** [CMakeFiles/Makefile2:83: CMakeFiles/app.dir/all] Error 2\n"
        b"make: *** [Makefile:136: all] Error 2\n"
    )
    body = size - len(ending)
    written = 0
    start = 0
    with path.open("wb") as f:
        while written < body:
            batch = []
            for i in range(start, start + 4096):
                d = dirs[rnd.randrange(len(dirs))]
                pct = min(99, i * 100 // (size // 70))
                if i % 25 == 24:
                    line = f"/usr/bin/c++ -O2 -Wall {flag} -c src/{d}/f{i}.cpp\n"
                elif i % 2000 == 1000:
                    line = f"src/{d}/f{i}.cpp:118:9: warning: unused variable 'tmp' [-Wunused]\n"
                elif i % 500 == 250:
                    line = f"[{pct:3d}%] Linking CXX static library lib{d}_{i % 97}.a\n"
                else:
                    line = f"[{pct:3d}%] Building CXX object src/{d}/CMakeFiles/{d}.dir/f{i}.o\n"
                batch.append(line.encode())
            start += 4096
            data = b"".join(batch)
            f.write(data)
            written += len(data)
        # Cut the progress lines at ``body`` (the last one shortened), then the errors.
        f.truncate(body)
        f.seek(body - 1)
        f.write(b"\n")
        f.write(ending)
    lines = 0
    with path.open("rb") as f:
        while block := f.read(MIB):
            lines += block.count(b"\n")
    return lines


def keyword_scan(path: Path) -> None:
    """The practical limit: lower-case 1 MiB chunks and ``bytes.find`` each keyword."""
    needles = [k.encode() for k in KEYWORDS]
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(MIB):
            low = chunk.lower()
            for needle in needles:
                low.find(needle)


def grep_count(path: Path) -> int:
    """GNU grep counting the lines with a keyword, case-insensitive, as whole words."""
    pattern = r"\b(" + "|".join(KEYWORDS) + r")\b"
    done = subprocess.run(
        ["grep", "-ciE", pattern, str(path)], capture_output=True, text=True, check=False
    )
    return int(done.stdout.strip() or 0)


def naive_scan(path: Path) -> int:
    """The obvious way: text mode, per-line ``re.search(..., re.IGNORECASE)``."""
    found = 0
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        for line in f:
            if NAIVE_DIAGNOSTIC.search(line):
                found += 1
    return found


# --- the benches -------------------------------------------------------------------------------


def bench_compact_diagnostic(table: Table, runs: int, folder: Path) -> dict[str, Path]:
    files = {}
    for near_misses in (True, False):
        capture = folder / f"build-16-{near_misses}.txt"
        lines = build_capture(capture, 16 * MIB, near_misses=near_misses)
        size = capture.stat().st_size
        ours, raw = timed_in_turns(
            runs,
            lambda c=capture: project_process(c, exit_code=2),
            lambda c=capture: keyword_scan(c),
        )
        what = "-Werror every 25th line" if near_misses else "no near misses"
        ratios = per_run(raw, ours)
        table.add(
            f"compact_diagnostic, 16 MiB / {lines:,} lines, {what} (baseline: lower + find)",
            rate(size, ours),
            rate(size, raw),
            ratios,
            "≥ 0.33",
            statistics.median(ratios) >= 1 / 3,
            measured=ours,
            baseline=raw,
            unit="s",
        )
        if near_misses:
            files["16 MiB build capture"] = capture
            naive, raw = timed_in_turns(
                runs, lambda c=capture: naive_scan(c), lambda c=capture: keyword_scan(c)
            )
            table.add(
                "  reference: per-line `re.search(..., re.IGNORECASE)`, same capture",
                rate(size, naive),
                rate(size, raw),
                per_run(raw, naive),
                measured=naive,
                baseline=raw,
                unit="s",
            )
            if shutil.which("grep"):
                grep, raw = timed_in_turns(
                    runs, lambda c=capture: grep_count(c), lambda c=capture: keyword_scan(c)
                )
                table.add(
                    "  reference: GNU `grep -ciE` of the keywords (whole words), same capture",
                    rate(size, grep),
                    rate(size, raw),
                    per_run(raw, grep),
                    measured=grep,
                    baseline=raw,
                    unit="s",
                )
    return files


def bench_process_memory(table: Table, folder: Path, files: dict[str, Path]) -> None:
    small = folder / "build-1.txt"
    build_capture(small, MIB, seed=2)
    many = folder / "build-64.txt"
    build_capture(many, 64 * MIB, seed=3)
    single = folder / "line-64.txt"
    with single.open("wb") as f:
        block = b"0123456789abcdef" * (MIB // 16)
        for i in range(64):
            f.write(block if i != 40 else block[:-20] + b" error: at 40 MiB  ")
    cases = {"1 MiB build capture": small, **files, "64 MiB build capture": many}
    cases["64 MiB, one line"] = single
    for label, path in cases.items():
        peak = peak_growth(lambda p=path: project_process(p, exit_code=1))
        size = path.stat().st_size
        table.add(
            f"project_process peak memory, {label} (baseline: file size)",
            f"{peak / MIB:.2f} MiB",
            f"{size / MIB:.0f} MiB",
            peak / size,
            "≤ 4 MiB",
            peak <= 4 * MIB,
            measured=peak / MIB,
            baseline=size / MIB,
            unit="MiB",
        )


def log_text(chars: int) -> str:
    line = '2026-11-29 12:00:01 "build" \u00e9 step\tok [ 42%] compiling src/module.c\n'
    return (line * (chars // len(line) + 1))[:chars]


def stream(text: str, marks: dict[str, float] | None = None) -> dict:
    """``text`` through ``append_tool_output`` in 4 KiB deltas; times of the first and last
    thousand deltas after the cut go into ``marks``."""
    out = None
    count = (len(text) + DELTA_CHARS - 1) // DELTA_CHARS
    first = 8  # the cut happens within the first 16 KiB: four deltas
    started = 0.0
    for k in range(count):
        if marks is not None and k in (first, count - 1000):
            started = time.perf_counter()
        out = append_tool_output(out, text[k * DELTA_CHARS : (k + 1) * DELTA_CHARS])
        if marks is not None and k in (first + 999, count - 1):
            marks["first" if k == first + 999 else "last"] = time.perf_counter() - started
    return out


def bench_streaming(table: Table, runs: int) -> None:
    text = log_text(64 * MIB)
    quarter = text[: 16 * MIB]
    blocks: dict[str, list[float]] = {"first": [], "last": []}

    def run64() -> None:
        marks: dict[str, float] = {}
        stream(text, marks)
        for key, value in marks.items():
            blocks[key].append(value)

    t16, t64, cost = timed_in_turns(
        runs, lambda: stream(quarter), run64, lambda: json_cost(quarter)
    )
    assert stream(quarter) == bound_tool_output(quarter)  # the figure is of the right work
    table.add(
        "append_tool_output, 16 MiB in 4 KiB deltas (baseline: json_cost of it, one pass)",
        spread(t16, seconds),
        spread(cost, seconds),
        per_run(t16, cost),
        measured=t16,
        baseline=cost,
        unit="s",
    )
    ratios = per_run(t64, t16)
    table.add(
        "append_tool_output, 64 MiB in 4 KiB deltas (ratio: 64 MiB / 16 MiB)",
        spread(t64, seconds),
        spread(t16, seconds),
        ratios,
        "≤ 4.5",
        statistics.median(ratios) <= 4.5,
        measured=t64,
        baseline=t16,
        unit="s",
    )
    first, last = blocks["first"][1:], blocks["last"][1:]  # not the warm-up's
    ratios = per_run(last, first)
    table.add(
        "  last 1,000 deltas of 64 MiB vs first 1,000 after the cut (flat)",
        spread(last, seconds),
        spread(first, seconds),
        ratios,
        "≤ 1.5",
        statistics.median(ratios) <= 1.5,
        measured=last,
        baseline=first,
        unit="s",
    )


def resend_times(text: str, sizes: tuple[int, ...]) -> list[float]:
    """Seconds per resend of an output grown by 10 KiB each time, from each of ``sizes`` code
    points on, then of the baseline (encode + SHA-1 of the first size). One tracker per size,
    resending in turns with the baseline, so that a burst of load from another process lands
    on all of them; the first send (hashed and bounded once) is not counted."""
    trackers = []
    for size in sizes:
        tracker = ToolCallTracker()
        tracker.replace("c1", text[:size])
        trackers.append(tracker)
    prefix = text[: sizes[0]]
    spent = [0.0] * (len(sizes) + 1)
    gc.collect()
    for j in range(1, RESENDS_PER_RUN + 1):
        for k, (size, tracker) in enumerate(zip(sizes, trackers, strict=True)):
            end = size + j * RESEND_STEP_CHARS
            started = time.perf_counter()
            update = tracker.replace("c1", text[:end])
            spent[k] += time.perf_counter() - started
            assert update == {"outputDelta": text[end - RESEND_STEP_CHARS : end]}
        started = time.perf_counter()
        hashlib.sha1(prefix.encode(), usedforsecurity=False).digest()
        spent[-1] += time.perf_counter() - started
    return [t / RESENDS_PER_RUN for t in spent]


def bench_tracker(table: Table, runs: int) -> None:
    text = log_text(2 * MIB + RESENDS_PER_RUN * RESEND_STEP_CHARS)
    sizes = (MIB, 2 * MIB)
    resend_times(text, sizes)  # warm up
    measured = [resend_times(text, sizes) for _ in range(runs)]
    one, two, hashing = ([m[k] for m in measured] for k in range(3))
    table.add(
        "tracker resend (+10 KiB) at 1 MiB (baseline: encode + SHA-1 of 1 MiB)",
        spread(one, seconds),
        spread(hashing, seconds),
        per_run(one, hashing),
        measured=one,
        baseline=hashing,
        unit="s",
    )
    ratios = per_run(two, one)
    table.add(
        "tracker resend (+10 KiB) at 2 MiB (ratio: 2 MiB / 1 MiB)",
        spread(two, seconds),
        spread(one, seconds),
        ratios,
        "≤ 2.5",
        statistics.median(ratios) <= 2.5,
        measured=two,
        baseline=one,
        unit="s",
    )


def bench_frames(table: Table, runs: int) -> None:
    payloads = [
        {"input": {"command": "c" * 2000}, "output": {"text": "o" * 16_000}},
        {"input": {"command": "c" * 100}, "output": {"text": "o" * 100}},
        {"inputOmitted": True, "output": {"text": "o" * 3000}},
    ]
    sizes = [json_size(p) for p in payloads]

    def records(n: int) -> list[dict]:
        return [
            {
                "tool_call_id": str(i),
                "payload_bytes": sizes[i % 3],
                "state": {"type": "tool", "toolCallId": str(i), "status": "completed"},
                "cursor": i,
            }
            for i in range(n)
        ]

    def loader(ids):
        return {i: payloads[int(i) % 3] for i in ids}

    small, large = records(1_000), records(100_000)
    # A page takes ~2 ms: batches of pages over both histories alternate many times per run,
    # so a burst of load from another process lands on both sides of the ratio.
    per_page: dict[int, list[float]] = {1_000: [], 100_000: []}
    for rs in (small, large):
        frame_page(rs, loader=loader)  # warm up
    for _ in range(runs):
        spent = {1_000: 0.0, 100_000: 0.0}
        gc.collect()
        for _ in range(PAGE_BATCHES_PER_RUN):
            for rs in (small, large):
                started = time.perf_counter()
                for _ in range(PAGES_PER_BATCH):
                    frame_page(rs, loader=loader)
                spent[len(rs)] += time.perf_counter() - started
        for n, t in spent.items():
            per_page[n].append(t / (PAGE_BATCHES_PER_RUN * PAGES_PER_BATCH))
    t_small, t_large = per_page[1_000], per_page[100_000]
    ratios = per_run(t_large, t_small)
    table.add(
        "frame_page, one page over 100,000 records (baseline: over 1,000)",
        spread(t_large, seconds),
        spread(t_small, seconds),
        ratios,
        "≤ 1.3",
        statistics.median(ratios) <= 1.3,
        measured=t_large,
        baseline=t_small,
        unit="s",
    )


def bench_transcript(table: Table, runs: int) -> None:
    text = "output line with some text\n" * 1_000_000  # 27 MB

    def previews() -> None:
        project_transcript(tool_name="bash", arguments={"command": "x"}, result_text=text)
        project_transcript(tool_name="read", arguments={}, result_text=text)

    t, count = timed_in_turns(runs, previews, lambda: (text.count("\n"), text.count("\n")))
    table.add(
        "transcript previews (bash + read) of a 27 MB output (baseline: 2 × str.count)",
        spread(t, seconds),
        spread(count, seconds),
        per_run(t, count),
        measured=t,
        baseline=count,
        unit="s",
    )


def main() -> None:
    report = Report("projections")  # takes ``--json PATH`` off the command line
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per figure (median)")
    parser.add_argument("--quick", action="store_true", help="3 runs per figure")
    args = parser.parse_args()
    runs = 3 if args.quick else max(1, args.runs)
    started = time.perf_counter()
    report.header = (
        f"{datetime.date.today().isoformat()}; Python {platform.python_version()}; "
        f"{os.cpu_count()} cores; medians of {runs} runs (smallest–largest). Ratio: on MB/s rows "
        "the baseline's time over the measured time (the share of the baseline's throughput, "
        "higher is better); on every other row measured over baseline (lower is better)."
    )
    print(report.header + "\n")
    print("| figure | measured | baseline | ratio | goal | result |")
    print("|---|---|---|---|---|---|")
    table = Table(report)
    with tempfile.TemporaryDirectory(prefix="toolcore-bench-") as tmp:
        folder = Path(tmp)
        files = bench_compact_diagnostic(table, runs, folder)
        bench_process_memory(table, folder, files)
    bench_streaming(table, runs)
    bench_tracker(table, runs)
    bench_frames(table, runs)
    bench_transcript(table, runs)
    passed = sum(table.verdicts)
    footer = (
        f"{passed} of {len(table.verdicts)} goals met; "
        f"{time.perf_counter() - started:.0f} s in all."
    )
    print(f"\n{footer}")
    report.write(footer)


if __name__ == "__main__":
    main()
