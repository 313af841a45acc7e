"""What a sandboxed command may use (tools/sandbox_limits.py; docs/security.md, "Resource
limits"), with real processes: a fork bomb held to its process count while the server answers,
memory over the limit killed, a file past its size refused, and the cgroups gone after."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.realtime.daphne_helpers import site
from tools import sandbox_limits
from tools.sandbox import bwrap_problem, sandbox_for
from tools.sandbox_limits import FOLDER, CommandLimits, Hierarchy, Limits, hierarchies

from .test_sandbox import _run

pytestmark = pytest.mark.skipif(
    bwrap_problem() is not None, reason=f"no usable bubblewrap here: {bwrap_problem()}"
)
MiB = 1024 * 1024


def _controllers() -> set[str]:
    return {c for h in hierarchies() for c in h.controllers}


def _needs(controller: str):
    return pytest.mark.skipif(
        controller not in _controllers(),
        reason=f"no {controller} cgroup this process may use (docs/security.md, Resource limits)",
    )


def _limited(workspace: Path, **limits: int):
    return dataclasses.replace(sandbox_for(workspace), limits=Limits(**limits))


def _command_cgroups(controller: str) -> list[Path]:
    return [
        child
        for h in hierarchies()
        if controller in h.controllers
        for child in (h.folder / FOLDER).iterdir()
        if child.is_dir()
    ]


def _process_count(folder: Path) -> int | None:
    """The processes of a command's cgroup now (``pids.current``); None once it is gone."""
    try:
        return int((folder / "pids.current").read_text())
    except (OSError, ValueError):
        return None


@_needs("pids")
@pytest.mark.faults
def test_a_fork_bomb_is_held_to_its_process_count_while_the_server_answers(workspace, tmp_path):
    """A daphne site of its own (a few seconds to start: the server that must keep answering,
    in a process of its own as in production) and a bomb held at 64 processes for 8 s. In the
    fault suite's group: it loads the machine on purpose."""
    box = _limited(workspace, processes=64)
    with site(tmp_path / "site") as made:
        server = made.daphne()
        answered: list[float] = []
        peaks: dict[Path, int] = {}  # of every command's cgroup seen (other tests' too)
        done = threading.Event()

        def bomb() -> None:
            try:
                # The classic: each one starts two more. bash tries a failed fork again (dash
                # gives up), so the command stays at its limit until it is stopped, after 8 s.
                bomb = "exec bash -c 'b(){ b | b & }; b; sleep 30' 2>/dev/null"
                _run(bomb, workspace, tmp_path, sandbox=box, timeout=8)
            finally:
                done.set()

        runner = threading.Thread(target=bomb)
        runner.start()
        try:
            while not done.is_set():
                for folder in _command_cgroups("pids"):
                    count = _process_count(folder)
                    if count is not None:
                        peaks[folder] = max(count, peaks.get(folder, 0))
                started = time.monotonic()
                with urllib.request.urlopen(f"{server.http_url}/healthz", timeout=10) as answer:
                    assert answer.status == 200
                answered.append(time.monotonic() - started)
                # Paces the requests; nothing is asserted on the time it took.
                time.sleep(0.1)
        finally:
            runner.join(60)
    bombed = max(peaks, key=peaks.get)  # the bomb's own cgroup: the fullest by far
    assert 32 < peaks[bombed] <= 64, peaks  # it did bomb, and its cgroup held it
    assert len(answered) >= 10 and max(answered) < 1.0, sorted(answered)[-5:]
    assert not bombed.exists()  # removed once it ended


@pytest.fixture
def made_cgroups(monkeypatch) -> list[Path]:
    """The cgroups the commands of this test were given (other tests' commands, in other
    processes of the suite, have theirs beside them)."""
    made: list[Path] = []
    real = CommandLimits.make

    def make(self):
        prefix = real(self)
        made.extend(self.folders)
        return prefix

    monkeypatch.setattr(CommandLimits, "make", make)
    return made


@_needs("memory")
def test_memory_past_the_limit_ends_the_command_not_the_host(workspace, tmp_path, made_cgroups):
    box = _limited(workspace, memory=64 * MiB)
    # tail keeps a last line that never ends in memory: 256 MiB of it.
    result, _, _ = _run("head -c 268435456 /dev/zero | tail -n 1", workspace, tmp_path, sandbox=box)
    assert result["signal"] == "SIGKILL", result  # the pipeline's last, killed by the kernel
    result, stdout, _ = _run(
        "head -c 16777216 /dev/zero | tail -n 1 | wc -c", workspace, tmp_path, sandbox=box
    )
    assert result["exitCode"] == 0 and stdout.strip() == "16777216"  # 16 MiB fit in 64
    assert len(made_cgroups) == 2  # a memory cgroup each (no process limit was set)
    assert not any(folder.exists() for folder in made_cgroups)  # removed once they ended


def test_a_file_past_its_size_is_refused(workspace, tmp_path):
    box = _limited(workspace, file_size=MiB)
    result, stdout, _ = _run(
        f"head -c {2 * MiB} /dev/zero > big; echo status $?", workspace, tmp_path, sandbox=box
    )
    assert (workspace / "big").stat().st_size == MiB
    assert stdout == "status 153\n"  # 128 + SIGXFSZ: the writer was stopped at the limit
    assert result["exitCode"] == 0  # the shell itself was not stopped


def test_memory_without_its_controller_is_bounded_by_address_space(
    workspace, tmp_path, monkeypatch
):
    """No memory cgroup here (the hierarchies hidden): ``RLIMIT_AS`` holds the command."""
    monkeypatch.setattr(sandbox_limits, "hierarchies", lambda: ())
    box = _limited(workspace, memory=64 * MiB)
    result, stdout, _ = _run("ulimit -v", workspace, tmp_path, sandbox=box)
    assert stdout.strip() == str(64 * 1024)
    result, _, stderr = _run(
        "head -c 268435456 /dev/zero | tail -n 1", workspace, tmp_path, sandbox=box
    )
    assert result["exitCode"] != 0 and "memory" in stderr, stderr


def test_no_limit_of_a_kind_set_to_zero(workspace, tmp_path):
    box = _limited(workspace)
    result, stdout, _ = _run("ulimit -f; ulimit -v", workspace, tmp_path, sandbox=box)
    assert stdout.split() == ["unlimited", "unlimited"]


def test_the_start_up_line_says_how_each_limit_is_enforced(monkeypatch):
    monkeypatch.setattr(
        sandbox_limits, "hierarchies", lambda: (Hierarchy(Path("/x"), ("pids",), 1),)
    )
    line = sandbox_limits.describe(Limits(processes=100, memory=MiB, file_size=0))
    assert line == (
        "processes 100 (cgroup); memory 1048576 bytes (rlimit); file size unlimited (set to 0)"
    )
    monkeypatch.setattr(sandbox_limits, "hierarchies", lambda: ())
    assert sandbox_limits.describe(Limits(processes=100)).startswith(
        "processes NOT limited (no processes cgroup"
    )


def test_the_cgroups_a_v2_delegated_folder_gets(tmp_path):
    """cgroup v2 (``TOOLCORE_SANDBOX_CGROUP``): one folder, both controllers' files; swap off."""
    hierarchy = Hierarchy(tmp_path, ("pids", "memory"), 2)
    assert hierarchy.limit_files(Limits(processes=5, memory=MiB, file_size=7)) == {
        "pids.max": 5,
        "memory.max": MiB,
        "memory.swap.max": 0,
    }


def test_the_prelude_joins_each_cgroup_before_the_sandbox_starts(tmp_path, monkeypatch):
    hierarchy = Hierarchy(tmp_path, ("pids",), 1)
    (tmp_path / FOLDER).mkdir()
    monkeypatch.setattr(sandbox_limits, "hierarchies", lambda: (hierarchy,))
    limits = CommandLimits(Limits(processes=9, file_size=1024))
    prefix = limits.make()
    (folder,) = limits.folders
    assert (folder / "pids.max").read_text() == "9"
    assert prefix[:4] == [sandbox_limits.SETPRIV, "--pdeathsig", "KILL", "--"]
    prefix = prefix[4:]
    assert prefix[:2] == ["/bin/sh", "-c"] and prefix[3:] == [
        "toolcore-limits",
        str(folder / "cgroup.procs"),
        "--",
    ]
    assert "ulimit -f 2 " in prefix[2] and prefix[2].endswith('exec "$@"')
    (folder / "pids.max").unlink()  # a real cgroup's files go with it; here, by hand
    limits.remove()
    assert not folder.exists()


def test_a_start_removes_the_empty_cgroups_a_dead_worker_left(tmp_path, monkeypatch):
    hierarchy = Hierarchy(tmp_path, ("pids",), 1)
    monkeypatch.setattr(sandbox_limits, "hierarchies", lambda: (hierarchy,))
    old, new = tmp_path / FOLDER / "old", tmp_path / FOLDER / "new"
    old.mkdir(parents=True)
    new.mkdir()
    long_ago = time.time() - 3600
    os.utime(old, (long_ago, long_ago))
    assert sandbox_limits.sweep() == 1
    assert not old.exists() and new.exists()  # a live worker's command may be joining it
