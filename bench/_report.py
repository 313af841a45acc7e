"""The benches' rows: printed as Markdown as they come, and kept as data for ``bench/run.py``.

Every bench script prints its own table and, when given ``--json PATH`` (``bench/run.py`` passes
one), writes its rows there as a JSON fragment: ``{"script", "started", "header", "rows": [...]}``.
A row holds the texts printed and, where the script has them, the numbers behind them: the
measured figure, its baseline and the ratio, each as ``{"median", "min", "max", "runs"}`` over
the runs, the goal and whether it passed. A row that only annotates the one above (a floor, a
reference) starts its figure with two spaces, as the Markdown tables always did. ``Table`` is
what the scripts add their rows to: it prints each as a Markdown row and keeps it in the report.

Nothing here imports Django: the projection benches run without it.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

Number = float | int


def stat(values: Sequence[Number] | Number | None) -> dict[str, Any] | None:
    """Median, smallest and largest of ``values`` (one number counts as one run)."""
    if values is None:
        return None
    if isinstance(values, int | float):
        values = [values]
    values = [float(v) for v in values]
    if not values:
        return None
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "runs": len(values),
    }


def spread(values: Sequence[Number] | Number, fmt: Callable[[float], str]) -> str:
    """The median, and the smallest and largest in brackets when there are several runs."""
    s = stat(values)
    if s is None:
        return ""
    if s["runs"] == 1 or s["min"] == s["max"]:
        return fmt(s["median"])
    return f"{fmt(s['median'])} ({fmt(s['min'])}–{fmt(s['max'])})"


def ratio_text(value: float) -> str:
    return f"{value:.2f}"


def json_path(argv: list[str] | None = None) -> Path | None:
    """The ``--json PATH`` of the command line, taken out of ``argv`` (``sys.argv`` by default)
    so that each script's own parser never sees it."""
    argv = sys.argv if argv is None else argv
    for i, arg in enumerate(argv):
        if arg == "--json" and i + 1 < len(argv):
            path = argv[i + 1]
            del argv[i : i + 2]
            return Path(path)
        if arg.startswith("--json="):
            del argv[i]
            return Path(arg.split("=", 1)[1])
    return None


class Report:
    """The rows of one bench script; ``write`` saves them when the script was given ``--json``."""

    def __init__(self, script: str) -> None:
        self.script = script
        self.path = json_path()
        self.header = ""
        self.rows: list[dict[str, Any]] = []

    def row(
        self,
        *,
        figure: str,
        measured: str,
        baseline: str,
        ratio: str,
        goal: str,
        ok: bool | None,
        values: dict[str, Any] | None = None,
    ) -> None:
        """One row: the texts printed, and ``values`` (``measured``, ``baseline``, ``ratio``:
        lists of the runs' numbers or one number; ``unit``; ``floor``: the ratio a goal cannot
        pass on this machine, when measured)."""
        values = values or {}
        self.rows.append(
            {
                "figure": figure,
                "measured": stat(values.get("measured")),
                "baseline": stat(values.get("baseline")),
                "ratio": stat(values.get("ratio")),
                "unit": values.get("unit", ""),
                "floor": values.get("floor"),
                "text": {
                    "measured": measured,
                    "baseline": baseline,
                    "ratio": ratio,
                },
                "goal": goal or None,
                "pass": ok,
            }
        )

    def skip(self, figure: str, reason: str) -> None:
        self.rows.append(
            {
                "figure": figure,
                "skipped": reason,
                "measured": None,
                "baseline": None,
                "ratio": None,
                "unit": "",
                "floor": None,
                "text": {"measured": f"skipped: {reason}", "baseline": "", "ratio": ""},
                "goal": None,
                "pass": None,
            }
        )

    def write(self, footer: str = "") -> None:
        if self.path is None:
            return
        fragment = {
            "script": self.script,
            "header": self.header,
            "footer": footer,
            "rows": self.rows,
        }
        self.path.write_text(json.dumps(fragment, indent=1, ensure_ascii=False) + "\n")


class Table:
    """The rows of a bench script as it runs: each printed as a Markdown row (figure, measured,
    baseline, ratio, goal, result) and kept in its ``Report``; the verdicts of the goals and
    notes for the footer."""

    def __init__(self, report: Report) -> None:
        self.report = report
        self.verdicts: list[bool] = []
        self.notes: list[str] = []

    def add(
        self,
        figure: str,
        measured_text: str,
        baseline_text: str = "",
        ratios: Sequence[Number] | Number | None = None,
        goal: str = "",
        ok: bool | None = None,
        verdict: str = "",
        **values: Any,
    ) -> None:
        """A row; ``ratios`` one number or the runs' ratios (the median printed, the smallest
        and largest in brackets); ``values`` the numbers behind the texts (``Report.row``)."""
        verdict = verdict or ("" if ok is None else ("PASS" if ok else "FAIL"))
        if ok is not None:
            self.verdicts.append(ok)
        ratio = "" if ratios is None else spread(ratios, ratio_text)
        print(
            f"| {figure} | {measured_text} | {baseline_text} | {ratio} | {goal} | {verdict} |",
            flush=True,
        )
        self.report.row(
            figure=figure,
            measured=measured_text,
            baseline=baseline_text,
            ratio=ratio,
            goal=goal,
            ok=ok,
            values={**values, "ratio": ratios},
        )

    def skip(self, figure: str, reason: str) -> None:
        print(f"| {figure} | skipped: {reason} | | | | |", flush=True)
        self.report.skip(figure, reason)

    def note(self, text: str) -> None:
        self.notes.append(text)
