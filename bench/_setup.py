"""Shared set-up of the benches: Django on a throw-away database (created and destroyed here)."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
if "DATA_DIR" not in os.environ:  # worker processes of the benches are given their parent's
    os.environ["DATA_DIR"] = tempfile.mkdtemp(prefix="toolcore-bench-")
os.environ.setdefault("TOOLCORE_WORKSPACE_ROOT", os.path.join(os.environ["DATA_DIR"], "workspaces"))
# Measure what production runs: DEBUG off (no query log), warnings only on the console.
os.environ.setdefault("DEBUG", "0")
os.environ.setdefault("SECRET_KEY", "bench-" + "x" * 40)
os.environ.setdefault("LOG_LEVEL", "WARNING")
os.environ.setdefault("ALLOWED_HOSTS", "testserver,localhost")


def django_on_bench_database():
    """Set Django up and create a fresh database (the test database of the settings)."""
    import django

    django.setup()
    from django.db import connection

    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    return connection


def drop_bench_database(connection) -> None:
    name = connection.settings_dict["NAME"]
    connection.creation.destroy_test_db(name, verbosity=0)


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started
