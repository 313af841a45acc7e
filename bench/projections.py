"""Projection benches: each figure beside a baseline measured in the same run.

    python bench/projections.py [--runs N] [--quick]

Run from the repository root (the script puts the root on ``sys.path``, so nothing needs
installing; the projections import nothing from Django). Prints a Markdown table (the one in
docs/performance.md) with PASS/FAIL per goal and always exits 0: it is a report, not a test.
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
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

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


def timed(fn: Callable[[], object]) -> float:
    gc.collect()
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def medians(runs: int, *fns: Callable[[], object]) -> list[float]:
    """Median seconds of each of ``fns`` over ``runs`` runs, run in turns (a, b, a, b, …) so
    that a burst of load from other processes falls on both sides of a ratio."""
    for fn in fns:
        fn()  # warm up: page cache, imports, allocator
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(runs):
        for fn, spent in zip(fns, times, strict=True):
            spent.append(timed(fn))
    return [statistics.median(spent) for spent in times]


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


class Table:
    def __init__(self) -> None:
        self.rows: list[tuple[str, ...]] = []
        self.verdicts: list[bool] = []

    def add(
        self,
        figure: str,
        measured: str,
        baseline: str,
        ratio: float | None,
        goal: str = "",
        ok: bool | None = None,
    ) -> None:
        verdict = "" if ok is None else ("PASS" if ok else "FAIL")
        if ok is not None:
            self.verdicts.append(ok)
        ratio_text = "" if ratio is None else f"{ratio:.2f}"
        self.rows.append((figure, measured, baseline, ratio_text, goal, verdict))
        print("| " + " | ".join(self.rows[-1]) + " |", flush=True)


def seconds(t: float) -> str:
    return f"{t * 1000:.1f} ms" if t < 1 else f"{t:.2f} s"


def rate(size: int, t: float) -> str:
    return f"{seconds(t)} ({size / t / 1e6:.0f} MB/s)"


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
        ours, raw = medians(
            runs,
            lambda c=capture: project_process(c, exit_code=2),
            lambda c=capture: keyword_scan(c),
        )
        what = "-Werror every 25th line" if near_misses else "no near misses"
        table.add(
            f"compact_diagnostic, 16 MiB / {lines:,} lines, {what} (baseline: lower + find)",
            rate(size, ours),
            rate(size, raw),
            raw / ours,
            "≥ 0.33",
            raw / ours >= 1 / 3,
        )
        if near_misses:
            files["16 MiB build capture"] = capture
            (naive,) = medians(runs, lambda c=capture: naive_scan(c))
            table.add(
                "  reference: per-line `re.search(..., re.IGNORECASE)`, same capture",
                rate(size, naive),
                rate(size, raw),
                raw / naive,
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

    t16, t64, cost = medians(runs, lambda: stream(quarter), run64, lambda: json_cost(quarter))
    assert stream(quarter) == bound_tool_output(quarter)  # the figure is of the right work
    table.add(
        "append_tool_output, 16 MiB in 4 KiB deltas (baseline: json_cost of it, one pass)",
        seconds(t16),
        seconds(cost),
        t16 / cost,
    )
    table.add(
        "append_tool_output, 64 MiB in 4 KiB deltas (ratio: 64 MiB / 16 MiB)",
        seconds(t64),
        seconds(t16),
        t64 / t16,
        "≤ 4.5",
        t64 / t16 <= 4.5,
    )
    first = statistics.median(blocks["first"])
    last = statistics.median(blocks["last"])
    table.add(
        "  last 1,000 deltas of 64 MiB vs first 1,000 after the cut (flat)",
        seconds(last),
        seconds(first),
        last / first,
        "≤ 1.5",
        last / first <= 1.5,
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
    per_resend = {size: statistics.median(m[k] for m in measured) for k, size in enumerate(sizes)}
    hashing = statistics.median(m[-1] for m in measured)
    table.add(
        "tracker resend (+10 KiB) at 1 MiB (baseline: encode + SHA-1 of 1 MiB)",
        seconds(per_resend[MIB]),
        seconds(hashing),
        per_resend[MIB] / hashing,
    )
    ratio = per_resend[2 * MIB] / per_resend[MIB]
    table.add(
        "tracker resend (+10 KiB) at 2 MiB (ratio: 2 MiB / 1 MiB)",
        seconds(per_resend[2 * MIB]),
        seconds(per_resend[MIB]),
        ratio,
        "≤ 2.5",
        ratio <= 2.5,
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
    t_small, t_large = (statistics.median(per_page[n]) for n in (1_000, 100_000))
    table.add(
        "frame_page, one page over 100,000 records (baseline: over 1,000)",
        seconds(t_large),
        seconds(t_small),
        t_large / t_small,
        "≤ 1.3",
        t_large / t_small <= 1.3,
    )


def bench_transcript(table: Table, runs: int) -> None:
    text = "output line with some text\n" * 1_000_000  # 27 MB

    def previews() -> None:
        project_transcript(tool_name="bash", arguments={"command": "x"}, result_text=text)
        project_transcript(tool_name="read", arguments={}, result_text=text)

    t, count = medians(runs, previews, lambda: (text.count("\n"), text.count("\n")))
    table.add(
        "transcript previews (bash + read) of a 27 MB output (baseline: 2 × str.count)",
        seconds(t),
        seconds(count),
        t / count,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per figure (median)")
    parser.add_argument("--quick", action="store_true", help="3 runs per figure")
    args = parser.parse_args()
    runs = 3 if args.quick else max(1, args.runs)
    started = time.perf_counter()
    print(
        f"{datetime.date.today().isoformat()}; Python {platform.python_version()}; "
        f"{os.cpu_count()} cores; medians of {runs} runs. Ratio: on MB/s rows the baseline's time "
        "over the measured time (the share of the baseline's throughput, higher is better); on "
        "every other row measured over baseline (lower is better).\n"
    )
    print("| figure | measured | baseline | ratio | goal | result |")
    print("|---|---|---|---|---|---|")
    table = Table()
    with tempfile.TemporaryDirectory(prefix="toolcore-bench-") as tmp:
        folder = Path(tmp)
        files = bench_compact_diagnostic(table, runs, folder)
        bench_process_memory(table, folder, files)
    bench_streaming(table, runs)
    bench_tracker(table, runs)
    bench_frames(table, runs)
    bench_transcript(table, runs)
    passed = sum(table.verdicts)
    print(
        f"\n{passed} of {len(table.verdicts)} goals met; "
        f"{time.perf_counter() - started:.0f} s in all."
    )


if __name__ == "__main__":
    main()
