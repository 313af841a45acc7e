"""What ``make run`` and ``make test`` run (``make -n``: printed, not run; the venv taken as
installed, so nothing is built)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


# A suite run by make (`make test PYTEST_WORKERS=3`) passes its variables down to a make it
# starts: the plans here are those of a make run from a shell.
MAKE_STATE = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "PYTEST_WORKERS", "PYTEST_ARGS")
# make's default: one worker more than the cores (the tests wait for the processes they
# start), at most four, since tests/isolation.py has Redis databases for four.
WORKERS = min(len(os.sched_getaffinity(0)) + 1, 4)


def _planned(*args: str) -> str:
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "-o", ".venv/.installed", *args],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k not in MAKE_STATE},
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
    assert f"-m pytest -rs -n {WORKERS} -m hosts tests/hosts" in _planned("two-hosts")


def test_make_test_runs_in_parallel_unless_told_one_worker():
    assert f"-m pytest -rs -n {WORKERS} " in _planned("test")
    assert "-m pytest -rs -n auto " in _planned("test", "PYTEST_WORKERS=auto")
    (pytest,) = [
        line for line in _planned("test", "PYTEST_WORKERS=3").splitlines() if "pytest" in line
    ]
    assert pytest.endswith("-m pytest -rs -n 3 "), pytest  # then PYTEST_ARGS, empty
    # One worker: the suite in the make process's own pytest, no xdist worker started.
    assert "-m pytest -rs -n 0" in _planned("test", "PYTEST_WORKERS=1")
