"""The ``grep`` bench: the ``grep`` tool over a generated 50,000-file workspace against
``grep -rnE`` of the same pattern, with the floor of any Python search (every file opened and
read, no regex). Django, no database.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import uuid
from pathlib import Path

from _measure import in_turns, per_run, timed
from _report import Table, spread
from execution_setup import DJANGO, MIB, OPTIONS, seconds

GREP_FILES = 50_000
GREP_PATTERN = r"needle_[0-9]+\(\)"  # the same in Python (the tool) and POSIX ERE (grep -E)
# fmt: off
_WORDS = [
    "def", "class", "return", "import", "self", "value", "items", "result", "config", "path",
    "request", "user", "event", "call", "state", "error", "index", "count", "name", "data", "list",
    "dict", "async", "await", "yield", "lambda", "None", "True", "False",
]
# fmt: on


def make_tree(root: Path, files: int, *, seed: int = 7) -> int:
    """``files`` source-like files (~2 KiB each), 100 a folder; a few matches planted."""
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
        if n % 1250 == 0:  # 40 matches in 50,000 files: the cost is the search, not the result
            lines.insert(rng.randint(0, len(lines)), f"    needle_{n}()")
            planted += 1
        (folder / f"file{n:05}.py").write_text("\n".join(lines) + "\n")
    return planted


def _grep_tool(workspace: Path) -> dict:
    """The ``grep`` tool over ``workspace`` (``<workspace root>/1/<name>``): its result.json."""
    from tools.runtime.base import CallContext
    from tools.runtime.files.grep import grep

    async def _no_update(_fields: dict) -> None:
        return None

    ctx = CallContext(
        call_id=uuid.uuid4(),
        conversation_id=uuid.uuid4(),
        owner_id=1,
        tool_name="grep",
        arguments={"pattern": GREP_PATTERN},
        generation=1,
        token=uuid.uuid4(),
        worker="bench",
        workspace=workspace,
        managed_root=workspace.parent / "managed",
        attempt_dir=workspace.parent / "attempt",
        update=_no_update,
    )
    [written] = asyncio.run(grep(ctx)).files
    return json.loads(written.path.read_bytes())


def _grep_rn(workspace: Path) -> int:
    done = subprocess.run(
        ["grep", "-rnE", GREP_PATTERN, "."], cwd=workspace, capture_output=True, check=False
    )
    return done.stdout.count(b"\n")


def _walk_and_read(workspace: Path) -> int:
    """The floor of any Python search: every file opened and read, no regex, no decoding."""
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


def bench_grep(table: Table, runs: int, folder: Path) -> None:
    """The ``grep`` tool over the tree vs ``grep -rnE`` of the same pattern, on a warm page
    cache; the pattern matches a few dozen lines, so the figure is the search of every file (as
    ``grep`` does), not the writing of its result."""
    DJANGO.setup()
    from django.conf import settings

    files = GREP_FILES // 10 if OPTIONS.quick else GREP_FILES
    # The tool checks that its workspace lies below the workspace root, in its owner's folder.
    root, settings.TOOLCORE_WORKSPACE_ROOT = settings.TOOLCORE_WORKSPACE_ROOT, folder
    workspace = folder / "1" / "grep-ws"
    workspace.mkdir(parents=True)
    try:
        planted = make_tree(workspace, files)
        size = sum(p.stat().st_size for p in workspace.rglob("*.py"))
        # Warm the page cache, and check that all three see the same matches.
        result = _grep_tool(workspace)
        assert result["matchCount"] == planted and result["stopped"] is None, result
        assert _grep_rn(workspace) == planted
        _walk_and_read(workspace)

        tool, grep, floor = in_turns(
            runs,
            lambda: timed(lambda: _grep_tool(workspace)),
            lambda: timed(lambda: _grep_rn(workspace)),
            lambda: timed(lambda: _walk_and_read(workspace)),
        )
    finally:
        settings.TOOLCORE_WORKSPACE_ROOT = root
        shutil.rmtree(workspace, ignore_errors=True)
    ratios = per_run(tool, grep)
    table.add(
        f"`grep` tool over {files:,} files ({size / MIB:.0f} MiB), {planted} matches "
        "(baseline: `grep -rnE` of the same pattern)",
        spread(tool, seconds),
        spread(grep, seconds),
        ratios,
        "≤ 3",
        statistics.median(ratios) <= 3,
        measured=tool,
        baseline=grep,
        unit="s",
    )
    table.add(
        "  floor: `os.scandir` walk + read of every file, no regex (baseline: `grep -rnE`)",
        spread(floor, seconds),
        spread(grep, seconds),
        per_run(floor, grep),
        measured=floor,
        baseline=grep,
        unit="s",
    )
    table.add(
        "  the `grep` tool against that floor",
        spread(tool, seconds),
        spread(floor, seconds),
        per_run(tool, floor),
        measured=tool,
        baseline=floor,
        unit="s",
    )
