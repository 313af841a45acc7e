"""The SeaweedFS harness itself: a ``weed`` started by a test process ends with it, even when
that process is killed with no chance to stop it (``kill -9``, a CI timeout)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.storage.seaweed import weed_binary

REPO = Path(__file__).resolve().parents[2]
STARTER = (
    "from tests.storage.seaweed import seaweed_start, weed_binary\n"
    "server = seaweed_start(weed_binary(), bucket='harness')\n"
    "print(server.process.pid, server.folder, flush=True)\n"
    "import time; time.sleep(600)\n"
)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.skipif(weed_binary() is None, reason="SeaweedFS is not installed")
def test_a_weed_outlives_no_killed_test_process():
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    pid = None
    try:
        pid_text, folder = starter.stdout.readline().split()
        pid = int(pid_text)
        assert _alive(pid)
        os.kill(starter.pid, signal.SIGKILL)
        starter.wait()
        deadline = time.monotonic() + 15
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid), "weed outlived the process that started it"
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait()
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGKILL)
        if pid is not None:
            shutil.rmtree(folder, ignore_errors=True)
