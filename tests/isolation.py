"""What each test process owns on the servers the suite shares with other processes.

``make test`` runs the suite in several pytest-xdist workers at once (``PYTEST_XDIST_WORKER``:
``gw0``, ``gw1``, …). Each worker must own everything its tests touch: its test database
(pytest-django adds the worker's suffix to the name), its files (``tmp_path``), its ports
(``tests/ports.py``), and, on the shared Redis server, its databases, chosen here and nowhere
else. A worker's tests delete their channel layer's keys after every test; in a database of
their own those deletes never touch another worker's groups, nor a live site's.

Redis numbers its databases 0-15. A run with ``REDIS_URL=redis://…/B`` gives worker ``i`` the
databases ``B + 4i`` to ``B + 4i + 3`` (modulo 16), one for each role of ``REDIS_ROLES``: the
suite's own channel layer and throttle cache, the end-to-end sites (``tests/realtime``, MCP,
faults, load), the two hosts (``tests/hosts``) and the browser tests' live site. Four workers
use all sixteen; a fifth would share, so the suite refuses to start with more.

Both variables below are read in this process's environment, not only its own: the xdist
controller imports the test settings before it starts its workers, which inherit what it set.
``TOOLCORE_TEST_REDIS_URL`` therefore keeps the ``REDIS_URL`` the run was given (the base), and
each worker derives its own ``REDIS_URL`` from it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from urllib.parse import urlsplit, urlunsplit

REDIS_DATABASES = 16
REDIS_ROLES = ("suite", "sites", "hosts", "browser")
MAX_WORKERS = REDIS_DATABASES // len(REDIS_ROLES)
BASE_REDIS_URL = "TOOLCORE_TEST_REDIS_URL"
METRICS_OWNER = "TOOLCORE_TEST_METRICS_WORKER"
# Without Redis, the throttle's counts are files (config/settings.py): a folder per worker,
# inherited by the processes it starts (``manage.py throttle_reset`` reaches its counts).
THROTTLE_FOLDER = "TOOLCORE_TEST_THROTTLE_DIR"
THROTTLE_OWNER = "TOOLCORE_TEST_THROTTLE_WORKER"


def worker_id() -> str:
    """This process's xdist worker (``gw0``, ``gw1``, …), or ``""`` in a run without workers."""
    return os.environ.get("PYTEST_XDIST_WORKER", "")


def worker_index() -> int:
    name = worker_id()
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0


def base_redis_url() -> str:
    """The ``REDIS_URL`` the run was given (empty: the suite runs without Redis)."""
    return os.environ.get(BASE_REDIS_URL, "")


def own_redis_database(role: str, url: str | None = None) -> str:
    """The Redis URL of this worker's database for ``role`` (one of ``REDIS_ROLES``): the run's
    ``REDIS_URL`` (or ``url``) with its database number replaced, its query kept."""
    url = url if url is not None else base_redis_url()
    if not url:
        return ""
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or "0")
    index = worker_index()
    if index >= MAX_WORKERS:
        raise RuntimeError(
            f"pytest-xdist worker {worker_id()}: at most {MAX_WORKERS} workers run with Redis "
            f"({REDIS_DATABASES} databases, {len(REDIS_ROLES)} for each worker)"
        )
    number = (base + index * len(REDIS_ROLES) + REDIS_ROLES.index(role)) % REDIS_DATABASES
    return urlunsplit(parts._replace(path=f"/{number}"))


def own_suite_environment() -> None:
    """Called by the test settings before ``config.settings`` reads the environment: this
    process's ``REDIS_URL`` on its own database, and a metrics folder and a throttle folder of
    its own.

    A process the suite starts with the test settings inherits both and keeps them (it is the
    same worker's); a ``REDIS_URL`` a test chose for such a process is left as it is."""
    url = os.environ.get("REDIS_URL", "")
    base = os.environ.setdefault(BASE_REDIS_URL, url)
    if url and url in (base, own_redis_database("suite")):
        os.environ["REDIS_URL"] = own_redis_database("suite")
    owner = os.environ.get(METRICS_OWNER)
    if "TOOLCORE_METRICS_DIR" not in os.environ or (worker_id() and owner != worker_id()):
        # The run's processes (this one, and those it starts, which inherit the variable) record
        # into a folder of their own (config/metrics_files.py), removed at exit.
        os.environ["TOOLCORE_METRICS_DIR"] = tempfile.mkdtemp(prefix="toolcore-test-metrics-")
        os.environ[METRICS_OWNER] = worker_id()
        atexit.register(shutil.rmtree, os.environ["TOOLCORE_METRICS_DIR"], ignore_errors=True)
    if THROTTLE_FOLDER not in os.environ or os.environ.get(THROTTLE_OWNER) != worker_id():
        os.environ[THROTTLE_FOLDER] = tempfile.mkdtemp(prefix="toolcore-test-throttle-")
        os.environ[THROTTLE_OWNER] = worker_id()
        atexit.register(shutil.rmtree, os.environ[THROTTLE_FOLDER], ignore_errors=True)
