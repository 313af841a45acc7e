"""The workers a daphne runs in its own process (``TOOLCORE_WORKERS``) stop in order with it:
on SIGTERM their stop is recorded (``WorkerHeartbeat.stopped_at``, which starts the host's
grace at once and shows "stopped" in the admin) and nothing fails on the way out.

They used to be stopped by an ``atexit`` hook, which Python runs after ``concurrent.futures``
has closed its thread pools to new work: the worker's last database step (recording its stop)
could no longer be handed to its pool, so a worker stopped with its daphne looked silent, not
stopped, and logged failed database steps while it went.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.realtime.daphne_helpers import Site

pytestmark = pytest.mark.e2e

ROWS = (
    "import json\n"
    "from tools.models import WorkerHeartbeat\n"
    "print(json.dumps([[w.name, w.stopped_at is not None]"
    " for w in WorkerHeartbeat.objects.order_by('pk')]))"
)


def _workers(made) -> list[tuple[str, bool]]:
    """``(name, stopped)`` of every worker the site's database knows."""
    return [tuple(row) for row in json.loads(made.manage("shell", "-v", "0", "-c", ROWS).strip())]


def test_a_daphne_stopped_by_sigterm_records_its_embedded_workers_stop(tmp_path):
    made = Site(tmp_path, TOOLCORE_WORKERS="2")
    made.migrate()  # no user needed
    try:
        server = made.daphne(LOG_LEVEL="INFO")
        deadline = time.monotonic() + 60  # bounds a hang: two workers starting, loaded
        # A worker logs that it started once its first heartbeat is written.
        while len(_logged(server.stderr(), "worker started")) < 2:
            assert time.monotonic() < deadline, server.stderr()
            time.sleep(0.1)
        stderr = server.stop()
        assert server.process.returncode == 0, stderr
        workers = _workers(made)
        assert len(workers) == 2 and all(stopped for _, stopped in workers), (workers, stderr)
        assert sorted(_logged(stderr, "worker stopped")) == sorted(name for name, _ in workers)
        assert "Traceback" not in stderr and "WARNING" not in stderr, stderr
    finally:
        made.close()


def _logged(stderr: str, message: str) -> list[str]:
    """The workers that logged ``message`` (JSON lines: DEBUG is off)."""
    found = []
    for line in stderr.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("message", "").startswith(message) and "worker" in record:
            found.append(record["worker"])
    return found
