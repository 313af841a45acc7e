"""A command runs as its worker's OS user: it must not read the worker's environment (its
database URL, its secret key) through ``/proc/<worker pid>/environ``."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import pytest

from tools.runtime import processes
from tools.runtime.registry import HANDLERS

from .worker_helpers import running_worker, wait_for

_PROBE = """
import importlib.util, os, subprocess, sys
spec = importlib.util.spec_from_file_location("processes", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
if sys.argv[2] == "protect":
    assert module.environment_protect()
seen = subprocess.run(["cat", f"/proc/{os.getpid()}/environ"], env={}, capture_output=True)
print("read" if b"TOOLCORE_PROBE_SECRET" in seen.stdout else "refused")
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"),
    reason="drops to an unprivileged user with setpriv (root only; root reads any /proc file)",
)
@pytest.mark.parametrize("mode, expected", [("plain", "read"), ("protect", "refused")])
def test_a_command_cannot_read_a_protected_workers_environment(mode, expected):
    """Run as an unprivileged user, as a deployment's worker is: a child of the same user reads
    its parent's /proc/<pid>/environ, unless the parent made itself not dumpable."""
    folder = tempfile.mkdtemp()
    try:
        os.chmod(folder, 0o755)
        module = os.path.join(folder, "processes.py")
        shutil.copy(processes.__file__, module)
        os.chmod(module, 0o644)
        seen = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
            + ["/usr/bin/python3", "-c", _PROBE, module, mode],
            env={"PATH": "/usr/bin:/bin", "TOOLCORE_PROBE_SECRET": "s3cret"},
            capture_output=True,
            text=True,
            cwd=folder,
            timeout=30,
        )
    finally:
        shutil.rmtree(folder)
    assert seen.stdout.strip() == expected, seen.stderr


@pytest.mark.django_db(transaction=True)
def test_a_worker_makes_its_process_not_dumpable():
    with running_worker(handlers=HANDLERS):
        wait_for(lambda: processes.is_dumpable() is False)
