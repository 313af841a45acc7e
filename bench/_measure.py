"""The benches' clocks and arithmetic, one copy for every bench script: a time, runs in turns,
per-run ratios, percentiles, the load average. Nothing here imports Django.

Figures are taken in turns (measured, baseline, measured, baseline, …) so that a burst of load
from other processes falls on both sides of a ratio; a ratio is then the median of the per-run
ratios (bench/_report.py prints the median with the smallest and largest).
"""

from __future__ import annotations

import gc
import math
import os
import time
from collections.abc import Callable
from typing import Any


def timed(fn: Callable[[], object]) -> float:
    """Seconds ``fn`` takes (wall clock, ``perf_counter``)."""
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def in_turns(runs: int, *fns: Callable[[], Any]) -> list[list[Any]]:
    """Each of ``fns`` run ``runs`` times, in turns, a garbage collection before each; their
    answers per function."""
    answers: list[list[Any]] = [[] for _ in fns]
    for _ in range(runs):
        for fn, got in zip(fns, answers, strict=True):
            gc.collect()
            got.append(fn())
    return answers


def timed_in_turns(runs: int, *fns: Callable[[], object]) -> list[list[float]]:
    """Seconds of each of ``fns`` in each of ``runs`` runs, in turns, after one warm-up call of
    each (page cache, imports, allocator)."""
    for fn in fns:
        fn()
    return in_turns(runs, *(lambda fn=fn: timed(fn) for fn in fns))


def per_run(a: list[float], b: list[float]) -> list[float]:
    """``a[i] / b[i]`` for each run."""
    return [x / y for x, y in zip(a, b, strict=True)]


def percentile(values: list[float], p: float) -> float:
    """The ``p``-th percentile (0–100), nearest rank."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(p / 100 * len(ordered))))
    return ordered[rank - 1]


def by_run(samples: list[float], runs: int, p: float) -> list[float]:
    """The ``p``-th percentile of each of ``runs`` consecutive slices of ``samples`` (taken in
    turns with their baseline's): the spread of a percentile from run to run."""
    size = max(1, len(samples) // max(1, runs))
    return [percentile(samples[i : i + size], p) for i in range(0, size * runs, size)]


def millis(t: float) -> str:
    """Seconds as milliseconds: two decimals below 10 ms, one above."""
    return f"{t * 1000:.2f} ms" if t < 0.01 else f"{t * 1000:.1f} ms"


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f}"
