"""What ``make run`` and ``make test`` run (``make -n``: printed, not run; the venv taken as
installed, so nothing is built)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _planned(*args: str) -> str:
    done = subprocess.run(
        ["make", "-n", "-o", ".venv/.installed", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_make_run_starts_the_demo_afresh_unless_told_to_keep_it():
    assert "manage.py seed_demo --reset" in _planned("run")
    kept = [line for line in _planned("run", "DEMO=keep").splitlines() if "seed_demo" in line]
    assert kept and "--reset" not in kept[0]


def test_make_test_says_why_tests_were_skipped():
    assert "-m pytest -rs" in _planned("test")


def test_make_two_hosts_runs_the_two_host_suite_and_says_why_it_skipped():
    assert "-m pytest -rs -m hosts tests/hosts" in _planned("two-hosts")
