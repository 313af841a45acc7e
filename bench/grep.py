"""The grep bench: the ``grep`` tool over a generated 50,000-file workspace vs ``grep -rn``.

    python bench/grep.py [--files N] [--runs N] [--quick]

Both search the same tree for the same pattern, one that matches a few dozen lines (under the
tool's result budget, so it searches every file, as ``grep`` does). Each figure is the median
of several runs, taken in turns on a warm page cache. The floor is the least any Python walk
can do: ``os.scandir`` over the tree, opening and reading every file, no regex, no decoding.
Ratios are the tool's time divided by the other's (lower is better); the goal is ≤ 3 against
``grep -rn``. The script always exits 0: it is a report, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import _setup  # noqa: F401  (sys.path and the environment of the benches)

PATTERN = r"needle_[0-9]+\(\)"
GREP_PATTERN = r"needle_[0-9]+\(\)"  # the same in POSIX ERE
GOAL = 3.0

_WORDS = [
    "def",
    "class",
    "return",
    "import",
    "self",
    "value",
    "items",
    "result",
    "config",
    "path",
    "request",
    "user",
    "event",
    "call",
    "state",
    "error",
    "index",
    "count",
    "name",
    "data",
    "list",
    "dict",
    "async",
    "await",
    "yield",
    "lambda",
    "None",
    "True",
    "False",
]


def make_tree(root: Path, files: int, *, seed: int = 7) -> int:
    """``files`` source-like files (~2 KiB each) in 100 files a folder; the matches planted."""
    rng = random.Random(seed)
    planted = 0
    for n in range(files):
        folder = root / f"pkg{n // 1000:02}" / f"mod{n // 100 % 10}"
        if n % 100 == 0:
            folder.mkdir(parents=True, exist_ok=True)
        lines = []
        for _ in range(rng.randint(30, 70)):
            words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(2, 8)))
            lines.append(f"    {words}  # {rng.randint(0, 10**6)}")
        if n % 1250 == 0:  # 40 matches in 50,000 files: under the result budget
            lines.insert(rng.randint(0, len(lines)), f"    needle_{n}()")
            planted += 1
        (folder / f"file{n:05}.py").write_text("\n".join(lines) + "\n")
    return planted


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def run_tool(workspace: Path) -> dict:
    from tools.runtime.base import CallContext
    from tools.runtime.files.grep import grep

    async def _no_update(_fields: dict) -> None:
        return None

    ctx = CallContext(
        call_id=uuid.uuid4(),
        conversation_id=uuid.uuid4(),
        owner_id=1,
        tool_name="grep",
        arguments={"pattern": PATTERN},
        generation=1,
        token=uuid.uuid4(),
        worker="bench",
        workspace=workspace,
        managed_root=workspace.parent / "managed",
        attempt_dir=workspace.parent / "attempt",
        update=_no_update,
    )
    return asyncio.run(grep(ctx)).result


def run_grep(workspace: Path) -> int:
    done = subprocess.run(
        ["grep", "-rnE", GREP_PATTERN, "."],
        cwd=workspace,
        capture_output=True,
        check=False,
    )
    return done.stdout.count(b"\n")


def walk_and_read(workspace: Path) -> int:
    """The floor: every file opened and read, nothing else."""
    total, stack = 0, [str(workspace)]
    while stack:
        with os.scandir(stack.pop()) as scan:
            for entry in scan:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    fd = os.open(entry.path, os.O_RDONLY)
                    try:
                        total += len(os.read(fd, 65536))
                    finally:
                        os.close(fd)
    return total


def row(name: str, measured: float, baseline: float, goal: float | None) -> str:
    """One table row: the ratio is ``measured / baseline`` (lower is better)."""
    ratio = measured / baseline if baseline else float("inf")
    verdict = "" if goal is None else ("PASS" if ratio <= goal else "FAIL")
    goal_text = "" if goal is None else f"≤ {goal:g}"
    return (
        f"| {name} | {measured * 1000:.1f} ms | {baseline * 1000:.1f} ms | {ratio:.2f} "
        f"| {goal_text} | {verdict} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="5,000 files")
    options = parser.parse_args()
    files = 5_000 if options.quick else options.files

    import django

    django.setup()
    base = Path(tempfile.mkdtemp(prefix="toolcore-grep-bench-"))
    try:
        workspace = base / "ws"
        workspace.mkdir()
        started = time.perf_counter()
        planted = make_tree(workspace, files)
        made = time.perf_counter() - started
        size = sum(p.stat().st_size for p in workspace.rglob("*.py"))
        print(
            f"{files:,} files, {size / 2**20:.1f} MiB, {planted} matches planted "
            f"(made in {made:.1f} s); medians of {options.runs} runs"
        )
        # Warm the page cache and check that all three see the same tree.
        result = run_tool(workspace)
        assert result["matchCount"] == planted and result["stopped"] is None, result
        assert run_grep(workspace) == planted
        walk_and_read(workspace)
        tool, grep, floor = [], [], []
        for _ in range(options.runs):  # in turns, so drift hits all three alike
            tool.append(timed(lambda: run_tool(workspace)))
            grep.append(timed(lambda: run_grep(workspace)))
            floor.append(timed(lambda: walk_and_read(workspace)))
        t, g, f = (statistics.median(x) for x in (tool, grep, floor))
        print()
        print("| figure | measured | baseline | ratio | goal | result |")
        print("|---|---|---|---|---|---|")
        print(row(f"grep tool vs `grep -rnE`, {files:,} files", t, g, GOAL))
        print(row("floor: scandir walk + read every file (no regex) vs `grep -rnE`", f, g, None))
        print(row("grep tool vs that floor", t, f, None))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
