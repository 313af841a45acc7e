"""Every bench, then one table: ``make bench``.

    python bench/run.py [--quick] [--runs N] [--only NAME ...] [--no-docs] [--collect]

Runs each bench script of this folder (every ``bench/*.py`` that reports its rows through
``bench/_report.py``: today core, execution, mcp, projections and realtime) in a process of its own
with ``--json``, showing its own table as it goes, then prints one table of all their rows,
writes ``bench/results.json`` (the same rows as data) and refreshes the table in
``docs/performance.md`` between its two markers, leaving the prose around them alone.

Each script is still runnable on its own and keeps its behaviour: the database and channel
layer of the current settings (SQLite and the in-memory layer by default; ``DATABASE_URL`` for
PostgreSQL, ``REDIS_URL`` for Redis), the figures that need PostgreSQL skipped with the reason
when it is not there. A script that fails is reported in the table with its exit status; the
others still run. ``--collect`` builds the table, the JSON and the docs from the fragments the
last run left (``bench/.fragments/``) without running anything. With ``--only``, the other
scripts' figures in ``bench/results.json`` are kept (each script's entry says when and on what
it ran), and the docs are left alone.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results.json"
FRAGMENTS = HERE / ".fragments"
DOCS = ROOT / "docs" / "performance.md"
BEGIN = "<!-- bench:begin (bench/run.py writes this table) -->"
END = "<!-- bench:end -->"
# The order they run in: the file-system-heavy execution bench (50,000 files written and
# deleted) after the others, as its own order already puts its grep last.
ORDER = ("projections", "core", "realtime", "mcp", "execution")


def scripts() -> list[Path]:
    """The bench scripts: the files of this folder that report rows through ``_report``."""
    found = [
        path
        for path in HERE.glob("*.py")
        if not path.name.startswith("_") and path.name != "run.py" and "Report(" in path.read_text()
    ]
    rank = {name: i for i, name in enumerate(ORDER)}
    return sorted(found, key=lambda p: (rank.get(p.stem, len(ORDER)), p.stem))


def run_script(path: Path, flags: list[str]) -> dict[str, Any]:
    """Run one script with ``--json``; its fragment (or a row saying that it failed)."""
    FRAGMENTS.mkdir(exist_ok=True)
    fragment_path = FRAGMENTS / f"{path.stem}.json"
    fragment_path.unlink(missing_ok=True)
    print(f"\n== bench/{path.name} {' '.join(flags)}".rstrip() + " ==\n", flush=True)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(path), *flags, "--json", str(fragment_path)], cwd=ROOT, check=False
    )
    spent = time.perf_counter() - started
    if fragment_path.exists():
        fragment = json.loads(fragment_path.read_text())
    else:
        fragment = {"script": path.stem, "header": "", "footer": "", "rows": []}
    fragment.update(seconds=round(spent, 1), exit=done.returncode)
    if done.returncode != 0:
        fragment["rows"].append(
            {
                "figure": f"bench/{path.name} exited with status {done.returncode}",
                "skipped": "failed",
                "measured": None,
                "baseline": None,
                "ratio": None,
                "unit": "",
                "floor": None,
                "text": {"measured": "failed: see its output above", "baseline": "", "ratio": ""},
                "goal": None,
                "pass": None,
            }
        )
    fragment_path.write_text(json.dumps(fragment, indent=1, ensure_ascii=False) + "\n")
    return fragment


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _verdict(row: dict[str, Any]) -> str:
    if row["pass"] is None:
        return ""
    if row["pass"]:
        return "PASS"
    return "**FAIL**" + (f" (floor {row['floor']:.2f})" if row.get("floor") is not None else "")


def table(fragments: list[dict[str, Any]]) -> str:
    lines = [
        "| bench | figure | measured | baseline | ratio | goal | result |",
        "|---|---|---|---|---|---|---|",
    ]
    for fragment in fragments:
        for row in fragment["rows"]:
            text = row["text"]
            cells = [
                fragment["script"],
                row["figure"],
                text["measured"],
                text["baseline"],
                text["ratio"],
                row["goal"] or "",
                _verdict(row),
            ]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def summary(fragments: list[dict[str, Any]]) -> str:
    goals = [row for f in fragments for row in f["rows"] if row["pass"] is not None]
    met = sum(1 for row in goals if row["pass"])
    missed = [
        f"{f['script']}: {row['figure'].split(' (')[0].strip()}"
        for f in fragments
        for row in f["rows"]
        if row["pass"] is False
    ]
    text = f"{met} of {len(goals)} goals met"
    if missed:
        text += "; missed: " + "; ".join(missed)
    return text + "."


def _vendor(url: str) -> str:
    scheme = url.split(":", 1)[0] if url else "sqlite"
    return {"postgres": "postgresql", "pgsql": "postgresql"}.get(scheme, scheme)


def environment() -> dict[str, Any]:
    one, five, fifteen = os.getloadavg()
    database = os.environ.get("DATABASE_URL", "")
    return {
        "when": f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
        "python": platform.python_version(),
        "cores": os.cpu_count(),
        "load_average": [round(one, 2), round(five, 2), round(fifteen, 2)],
        "database": _vendor(database),
        "channel_layer": "redis" if os.environ.get("REDIS_URL") else "in-memory",
    }


def results(fragments: list[dict[str, Any]], env: dict[str, Any]) -> dict[str, Any]:
    """``bench/results.json``: one record a figure."""
    figures = []
    for fragment in fragments:
        for row in fragment["rows"]:
            figures.append(
                {
                    "bench": fragment["script"],
                    "figure": row["figure"],
                    "measured": row["measured"],
                    "baseline": row["baseline"],
                    "ratio": row["ratio"],
                    "unit": row["unit"],
                    "goal": row["goal"],
                    "floor": row.get("floor"),
                    "pass": row["pass"],
                    "skipped": row.get("skipped"),
                    "text": row["text"],
                }
            )
    return {
        "environment": env,
        "scripts": [
            {
                **{key: f.get(key) for key in ("script", "header", "footer", "seconds", "exit")},
                "environment": f.get("environment", env),
            }
            for f in fragments
        ],
        "summary": summary(fragments),
        "figures": figures,
    }


def kept_fragments(previous: dict[str, Any], ran: set[str]) -> list[dict[str, Any]]:
    """The fragments of the scripts that did not run this time, rebuilt from the last
    ``bench/results.json`` (``previous``), each with the environment it ran in."""
    kept = []
    for script in previous.get("scripts", []):
        if script["script"] in ran:
            continue
        rows = [
            {**{k: v for k, v in figure.items() if k != "bench"}}
            for figure in previous.get("figures", [])
            if figure["bench"] == script["script"]
        ]
        environment = script.get("environment") or previous.get("environment")
        kept.append({**script, "environment": environment, "rows": rows})
    return kept


def ordered(fragments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rank = {name: i for i, name in enumerate(ORDER)}
    return sorted(fragments, key=lambda f: (rank.get(f["script"], len(ORDER)), f["script"]))


def refresh_docs(markdown: str, docs: Path = DOCS) -> bool:
    """Put ``markdown`` between the markers of ``docs``; False when they are missing."""
    text = docs.read_text()
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.DOTALL)
    if not pattern.search(text):
        return False
    docs.write_text(pattern.sub(lambda _: f"{BEGIN}\n{markdown}\n{END}", text, count=1))
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="each script's --quick")
    parser.add_argument("--runs", type=int, help="each script's --runs")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="only these scripts")
    parser.add_argument("--no-docs", action="store_true", help="leave docs/performance.md")
    parser.add_argument(
        "--collect", action="store_true", help="the last run's fragments, nothing run"
    )
    args = parser.parse_args()
    flags = ["--quick"] if args.quick else []
    if args.runs:
        flags += ["--runs", str(args.runs)]
    chosen = [p for p in scripts() if not args.only or p.stem in args.only]
    env = environment()
    started = time.perf_counter()
    if args.collect:
        if RESULTS.exists():  # the environment of the run that left the fragments
            env = json.loads(RESULTS.read_text()).get("environment", env)
        fragments = [
            json.loads((FRAGMENTS / f"{p.stem}.json").read_text())
            for p in chosen
            if (FRAGMENTS / f"{p.stem}.json").exists()
        ]
    else:
        fragments = [run_script(path, flags) for path in chosen]
    for fragment in fragments:
        fragment.setdefault("environment", env)
    done = results(fragments, env)
    recorded = done
    if args.only and not args.collect and RESULTS.exists():
        previous = json.loads(RESULTS.read_text())
        kept = kept_fragments(previous, {p.stem for p in chosen})
        recorded = results(ordered(fragments + kept), previous.get("environment", env))
    layer = env["channel_layer"]
    heading = (
        f"{env['when']}, {env['cores']} cores, Python {env['python']}, database "
        f"{env['database']}, {layer} channel layer, load average "
        f"{env['load_average'][0]:.2f} at the start; each figure the median of its runs "
        "(smallest–largest in brackets); each script's own conventions for the ratio (its "
        "section below says which way is better). " + done["summary"]
    )
    markdown = f"{heading}\n\n{table(fragments)}"
    print(f"\n== all benches ({time.perf_counter() - started:.0f} s) ==\n")
    print(markdown)
    RESULTS.write_text(json.dumps(recorded, indent=1, ensure_ascii=False) + "\n")
    print(f"\nwritten: {RESULTS.relative_to(ROOT)}")
    if not args.no_docs and not args.only:
        if refresh_docs(markdown):
            print(f"refreshed: {DOCS.relative_to(ROOT)}")
        else:
            print(f"{DOCS.relative_to(ROOT)} has no markers ({BEGIN} … {END}): not refreshed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
