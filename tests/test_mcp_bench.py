"""bench/mcp.py runs in its smallest size and reports its rows (so the script keeps working).

It runs as ``make bench`` runs it: a process of its own with ``--json``, on a throw-away SQLite
database and the in-memory layer whatever the suite runs on (the script makes and drops its own
database; the suite's Redis database is flushed between tests, which must not touch the
daphne the script starts).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")

pytestmark = pytest.mark.e2e


def test_the_mcp_bench_runs_in_its_smallest_size(tmp_path):
    fragment = tmp_path / "mcp.json"
    env = {k: v for k, v in os.environ.items() if k in INHERITED}
    done = subprocess.run(
        [sys.executable, "bench/mcp.py", "--runs", "1", "--calls", "2", "--samples", "2"]
        + ["--streams", "5", "--window", "1", "--json", str(fragment)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(fragment.read_text())
    assert report["script"] == "mcp"
    assert "database sqlite" in report["header"]
    rows = report["rows"]
    assert len(rows) == 8
    call, settle, waiting = rows[0], rows[3], rows[6]
    assert waiting["goal"] == "≤ 5 % above idle" and waiting["unit"] == "core"
    assert waiting["measured"]["median"] >= 0 and "5 `tools/call`s waiting" in waiting["figure"]
    assert call["goal"] == "≤ 1.5" and call["pass"] in (True, False)
    for row in (call, settle):
        assert row["measured"]["median"] > 0 and row["baseline"]["median"] > 0
        assert row["ratio"]["median"] > 0 and row["unit"] == "s"
