"""Process capture with real processes (tools/runtime/capture.py; docs/subsystems/api.md, "Log
pages"; docs/projections.md, "Bounded output")."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conversations.storage import CAPTURE_MAX_BYTES
from projections import logpages
from projections.fold import apply_tool_update
from projections.json_cost import json_size
from projections.logpages import read_page, sidecar_path
from projections.tool_output import bound_tool_output
from tests.waits import until
from tools.runtime.capture import ProcessCapture, tool_environment
from tools.runtime.live import LIVE_UPDATE_MAX_BYTES, LiveOutput
from tools.runtime.processes import group_is_alive, kill_group, start_ticks_of

MIB = 1024 * 1024
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def workspace(tmp_path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture
def make(workspace, tmp_path):
    """A capture of ``command`` in the workspace, into a fresh attempt folder, indexed."""
    made: list[ProcessCapture] = []

    def make(command: str, **kwargs) -> ProcessCapture:
        kwargs.setdefault("env", tool_environment(workspace))
        kwargs.setdefault("index_dir", tmp_path / "index")
        folder = tmp_path / "attempts" / f"g{len(made) + 1}"
        capture = ProcessCapture(command=command, cwd=workspace, folder=folder, **kwargs)
        made.append(capture)
        return capture

    yield make
    for capture in made:  # nothing a test started outlives it (an unreaped leader: still ours)
        if capture.pgid is not None and not capture.finished:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(capture.pgid, 9)


def _prctl_subreaper(on: bool) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, int(on), 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _group(pgid: int) -> list[tuple[int, int, str]]:
    """(pid, ppid, state) of the processes of group ``pgid``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            raw = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        fields = raw[raw.rindex(b")") + 2 :].split()
        if int(fields[2]) == pgid:
            found.append((int(name), int(fields[1]), fields[0].decode()))
    return found


def _ignores_sigterm(pgid: int) -> bool:
    """Whether a live process of group ``pgid`` ignores SIGTERM: its ``trap '' TERM`` is set
    (a command it starts after the trap inherits it)."""
    for pid, _, state in _group(pgid):
        if state == "Z":
            continue
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        ignored = re.search(r"^SigIgn:\s*([0-9a-f]+)$", status, re.MULTILINE)
        if ignored and int(ignored.group(1), 16) & (1 << (signal.SIGTERM - 1)):
            return True
    return False


def _until_file(name: str) -> str:
    """Shell that waits, 10 ms at a time, until the test (or a callback of it) makes the file
    ``name`` in the working directory: where a test lets the command go on."""
    return f"until [ -e {name} ]; do sleep 0.01; done"


@pytest.fixture
def reaper():
    """Orphans of the commands become this process's children, and it reaps them, as an init
    does. The PID 1 of a container may not reap, and a zombie still answers ``killpg(pgid, 0)``."""
    # The workers run on Linux (process groups, /proc, pidfd): so do these tests.
    assert _prctl_subreaper(True), "prctl(PR_SET_CHILD_SUBREAPER) failed"

    def gone(pgid: int, within: float = 30.0) -> bool:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            for pid, ppid, state in _group(pgid):
                if ppid == os.getpid() and state == "Z":
                    os.waitpid(pid, 0)
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return True
            time.sleep(0.02)
        return False

    yield gone
    _prctl_subreaper(False)


def _env_of(capture: ProcessCapture) -> dict[str, str]:
    text = (capture.folder / "stdout.txt").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _text(capture: ProcessCapture, name: str) -> bytes:
    return (capture.folder / f"{name}.txt").read_bytes()


# --- environment and working directory -----------------------------------------------------------


async def test_the_command_sees_no_server_variable(make, workspace, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://u:secret@db/x")
    monkeypatch.setenv("SECRET_KEY", "s" * 50)
    monkeypatch.setenv("REDIS_URL", "redis://:pw@cache:6379/0")
    monkeypatch.setenv("TOOLCORE_ENV_FOO", "bar")
    capture = make("env", env=tool_environment(workspace))
    result = await capture.run(10)
    assert result["exitCode"] == 0
    env = _env_of(capture)
    assert env["FOO"] == "bar"
    assert env["HOME"] == str(workspace)
    assert env["TERM"] == "dumb"
    assert env["LANG"] == "C.UTF-8"
    assert env["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    # What the shell itself adds (PWD, SHLVL, OLDPWD, _) is all that may join them.
    assert set(env) <= {"FOO", "HOME", "TERM", "LANG", "PATH", "PWD", "SHLVL", "OLDPWD", "_"}
    server_only = set(os.environ) - {"HOME", "TERM", "LANG", "PATH", "PWD", "SHLVL", "OLDPWD", "_"}
    assert not server_only & set(env)
    assert "secret" not in _text(capture, "stdout").decode()


def test_tool_environment_takes_only_prefixed_variables():
    environ = {
        "TOOLCORE_ENV_PATH": "/opt/tools/bin:/usr/bin",
        "TOOLCORE_ENV_LANG": "de_DE.UTF-8",
        "TOOLCORE_ENV_HOME": "/root",  # HOME is always the workspace
        "TOOLCORE_ENV_TERM": "xterm",  # and TERM always dumb
        "TOOLCORE_ENV_": "nameless",
        "TOOLCORE_WORKERS": "2",
        "SECRET_KEY": "k",
        "PATH": "/server/venv/bin:/usr/bin",
    }
    assert tool_environment(Path("/w/c1"), environ) == {
        "PATH": "/opt/tools/bin:/usr/bin",
        "LANG": "de_DE.UTF-8",
        "HOME": "/w/c1",
        "TERM": "dumb",
    }


async def test_cwd_is_the_workspace_and_stdin_is_empty(make, workspace):
    capture = make("pwd -P; cat; echo end")
    await capture.run(10)
    assert _text(capture, "stdout") == f"{workspace.resolve()}\nend\n".encode()


async def test_own_session_and_start_ticks(make):
    capture = make("sleep 5")
    await capture.start()
    assert capture.pgid == capture.pid == os.getpgid(capture.pid)
    assert os.getsid(capture.pid) == capture.pid  # a new session, no controlling terminal
    assert capture.process_start_ticks == start_ticks_of(capture.pid)
    assert capture.started_at is not None and capture.started_at.tzinfo is not None
    await capture.terminate(grace=1)
    assert await capture.wait(30)


# --- files and counts ----------------------------------------------------------------------------


async def test_20_mib_stops_at_16_mib_and_counts_the_rest(make):
    capture = make("head -c 20971520 /dev/zero; head -c 1048576 /dev/zero | tr '\\0' e >&2")
    result = await capture.run(60)
    assert result["exitCode"] == 0
    assert result["capture"] == {
        "stdout": {"bytes": 20 * MIB, "storedBytes": CAPTURE_MAX_BYTES, "truncated": True},
        "stderr": {"bytes": MIB, "storedBytes": MIB, "truncated": False},
        "output": {"bytes": 21 * MIB, "storedBytes": CAPTURE_MAX_BYTES, "truncated": True},
    }
    assert (capture.folder / "stdout.txt").stat().st_size == CAPTURE_MAX_BYTES
    assert _text(capture, "stderr") == b"e" * MIB
    output = _text(capture, "output")
    assert output == b"\0" * CAPTURE_MAX_BYTES  # the stderr came after the cap
    files = {f.kind: f for f in capture.files()}
    assert set(files) == {"stdout", "stderr", "output"}
    assert (files["stdout"].truncated, files["stderr"].truncated, files["output"].truncated) == (
        True,
        False,
        True,
    )
    assert all(f.media_type == "text/plain; charset=utf-8" for f in files.values())
    assert files["output"].path == capture.folder / "output.txt"


async def test_stderr_is_capped_on_its_own(make):
    capture = make("head -c 17825792 /dev/zero >&2; echo tail")
    result = await capture.run(60)
    assert result["capture"]["stderr"] == {
        "bytes": 17 * MIB,
        "storedBytes": CAPTURE_MAX_BYTES,
        "truncated": True,
    }
    assert result["capture"]["stdout"] == {"bytes": 5, "storedBytes": 5, "truncated": False}
    assert result["capture"]["output"]["bytes"] == 17 * MIB + 5
    assert _text(capture, "stdout") == b"tail\n"


async def test_binary_output_is_stored_exactly_and_decoded_with_replacement(make, workspace):
    blob = random.Random(7).randbytes(300_000) + b"\x00\xed\xa0\x80\xf0\x9f"
    (workspace / "blob").write_bytes(blob)
    seen: list[str] = []
    capture = make("cat blob", on_output=seen.append)
    await capture.run(10)
    assert _text(capture, "stdout") == blob
    assert _text(capture, "output") == blob
    live = "".join(seen)
    assert live == blob.decode("utf-8", "replace").replace("\x00", "\ufffd")
    assert not any(c == "\x00" or 0xD800 <= ord(c) <= 0xDFFF for c in live)


async def test_a_character_split_between_reads_is_decoded_whole(make, workspace):
    seen: list[str] = []

    def read(text: str) -> None:
        seen.append(text)
        (workspace / "go").touch()  # the rest is written once the first part was read

    # "€" is E2 82 AC: its first byte arrives alone; then invalid bytes and a NUL.
    capture = make(
        f"printf 'a\\342'; {_until_file('go')}; "
        "printf '\\202\\254b\\377\\000c\\n'; printf '\\342' >&2",
        on_output=read,
    )
    await capture.run(30)
    assert _text(capture, "stdout") == b"a\xe2\x82\xacb\xff\x00c\n"
    assert _text(capture, "stderr") == b"\xe2"
    assert len(seen) >= 2
    assert "".join(seen) == "a€b\ufffd\ufffdc\n\ufffd"  # the lone E2 at EOF too


async def test_output_interleaves_in_arrival_order(make, workspace):
    seen: list[str] = []

    def read(text: str) -> None:
        seen.append(text)
        for line in "".join(seen).splitlines():
            (workspace / f"seen-{line}").touch()

    # Each line is written once the one before it was read: they arrive in the order they
    # were written, however a loaded machine schedules the reader.
    capture = make(
        f"for i in 1 2 3; do echo out$i; {_until_file('seen-out$i')}; "
        f"echo err$i >&2; {_until_file('seen-err$i')}; done",
        on_output=read,
    )
    await capture.run(30)
    expected = "out1\nerr1\nout2\nerr2\nout3\nerr3\n"
    assert _text(capture, "output").decode() == expected
    assert "".join(seen) == expected
    assert _text(capture, "stdout") == b"out1\nout2\nout3\n"
    assert _text(capture, "stderr") == b"err1\nerr2\nerr3\n"


async def test_files_are_never_overwritten_and_a_failed_start_leaves_none(make, tmp_path):
    first = make("echo one")
    await first.run(10)
    again = ProcessCapture(
        command="echo two", cwd=first.cwd, env={}, folder=first.folder, index_dir=None
    )
    with pytest.raises(FileExistsError):
        await again.start()
    assert _text(first, "stdout") == b"one\n"

    lost = ProcessCapture(
        command="true", cwd=tmp_path / "missing", env={}, folder=tmp_path / "g9", index_dir=None
    )
    with pytest.raises(FileNotFoundError):
        await lost.start()
    assert list((tmp_path / "g9").iterdir()) == []


# --- exit, timeout and signals -------------------------------------------------------------------


async def test_exit_code_and_duration(make):
    capture = make("sleep 0.2; exit 7")
    result = await capture.run(10)
    assert (result["exitCode"], result["signal"], result["timedOut"]) == (7, None, False)
    assert 200 <= result["durationMs"] < 10_000  # milliseconds: 0.2 s and a loaded machine


async def test_timeout_sends_sigterm_to_the_group(make):
    capture = make("sleep 100")
    started = time.monotonic()
    result = await capture.run(0.3, grace=30)
    # Ended by the SIGTERM, not by the SIGKILL after the grace (30 s): the bounds leave a
    # loaded machine room, they do not measure speed.
    assert time.monotonic() - started < 15
    assert (result["exitCode"], result["signal"], result["timedOut"]) == (None, "SIGTERM", True)
    assert 300 <= result["durationMs"] < 15_000


async def test_a_command_ignoring_sigterm_is_killed_after_the_grace(make):
    capture = make("trap '' TERM; echo ready; sleep 100")
    started = time.monotonic()
    # The timeout (2 s) leaves the shell ample time to set its trap first, loaded or not.
    result = await capture.run(2, grace=0.5)
    elapsed = time.monotonic() - started
    # Killed after the grace, not after the command's 100 s (the upper bound is room for a
    # loaded machine).
    assert 2.5 <= elapsed < 30
    assert (result["exitCode"], result["signal"], result["timedOut"]) == (None, "SIGKILL", True)
    assert _text(capture, "stdout") == b"ready\n"


async def test_terminate_leaves_no_member_of_the_group(make, reaper):
    capture = make("sleep 100 & sh -c 'sleep 100; echo never'; echo never")
    await capture.start()
    assert not await capture.wait(0.3)
    # sh, sleep, sh, sleep: all started, however long a loaded machine takes to.
    await until(
        lambda: len([p for p in _group(capture.pgid) if p[2] != "Z"]) >= 4,
        what="the four processes of the group",
    )
    await capture.terminate(grace=2)
    assert await capture.wait(30)
    assert capture.result()["signal"] == "SIGTERM"
    assert reaper(capture.pgid)
    with pytest.raises(ProcessLookupError):
        os.killpg(capture.pgid, 0)


async def test_a_child_ignoring_sigterm_is_killed_after_the_leader_went(make, reaper):
    capture = make("(trap '' TERM; sleep 100) & sleep 100")
    await capture.start()
    assert not await capture.wait(0.3)
    await until(lambda: _ignores_sigterm(capture.pgid), what="the child's trap set")
    started = time.monotonic()
    await capture.terminate(grace=0.5)
    assert time.monotonic() - started >= 0.45
    assert await capture.wait(30)
    assert capture.result()["signal"] == "SIGTERM"  # the leader died of the first signal
    assert reaper(capture.pgid)


async def test_a_cancelled_run_terminates_its_command(make, reaper):
    seen: list[str] = []
    capture = make("echo running; sleep 100", on_output=seen.append)
    task = asyncio.create_task(capture.run(100, grace=1))
    await until(lambda: seen, what="the command running")  # it runs, and the run reads it
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await capture.wait(30)
    assert capture.result()["signal"] == "SIGTERM"
    assert reaper(capture.pgid)


# --- the end of output ---------------------------------------------------------------------------


async def test_a_closed_stdout_does_not_end_the_capture(make):
    capture = make("echo first; exec >&-; sleep 0.3; echo late >&2")
    result = await capture.run(10)
    assert result["exitCode"] == 0
    assert result["durationMs"] >= 300
    assert _text(capture, "stdout") == b"first\n"
    assert _text(capture, "stderr") == b"late\n"


async def test_a_background_child_holding_the_pipes_does_not_hang_wait(make, reaper):
    capture = make("sleep 100 & echo started")
    await capture.start()
    started = time.monotonic()
    assert await capture.wait(30)
    # Quiet for 0.5 s after the exit, not until the sleep lets go of the pipes (100 s); the
    # upper bound is room for a loaded machine.
    assert 0.4 < time.monotonic() - started < 15
    assert capture.result()["exitCode"] == 0
    assert _text(capture, "stdout") == b"started\n"
    assert group_is_alive(capture.pgid, capture.process_start_ticks) is False  # leader reaped
    await capture.terminate(grace=1)  # the background sleep is still in the group
    assert reaper(capture.pgid)


async def test_a_chatty_background_child_is_read_at_most_two_seconds(make, reaper):
    capture = make("(while :; do echo x; sleep 0.05; done) & echo started")
    await capture.start()
    started = time.monotonic()
    assert await capture.wait(30)
    # Two seconds of reading, not until the child stops (never); the upper bound is room for
    # a loaded machine.
    assert 1.5 < time.monotonic() - started < 15
    out = _text(capture, "stdout")
    # The child's first line may come before the shell's own: they race.
    assert out.count(b"started\n") == 1 and out.count(b"x\n") >= 10
    await capture.terminate(grace=1)
    assert reaper(capture.pgid)


async def test_wait_returns_false_then_true_promotion(make, workspace):
    capture = make(f"echo begin; {_until_file('go')}; echo done")
    await capture.start()
    assert await capture.wait(0.1) is False
    assert capture.result()["exitCode"] is None
    stdout = capture.folder / "stdout.txt"
    # Written as it arrived: there while the command still runs (it waits for ``go``).
    await until(lambda: stdout.exists() and stdout.read_bytes() == b"begin\n", what="begin")
    assert capture.result()["exitCode"] is None
    (workspace / "go").touch()
    assert await capture.wait(30) is True
    assert await capture.wait(0) is True
    assert _text(capture, "stdout") == b"begin\ndone\n"
    assert capture.result()["exitCode"] == 0


# --- process groups seen later -------------------------------------------------------------------


async def test_group_is_alive_and_kill_group_refuse_other_start_ticks(make):
    capture = make("sleep 100")
    await capture.start()
    pgid, ticks = capture.pgid, capture.process_start_ticks
    assert group_is_alive(pgid, ticks)
    assert not group_is_alive(pgid, ticks + 1)  # a recycled pid started at another time
    assert await kill_group(pgid, ticks + 1, grace=0.2) is False
    assert not await capture.wait(0.3)  # untouched (a slow machine only makes this easier)
    assert await kill_group(pgid, ticks, grace=1) is True
    assert await capture.wait(30)
    assert capture.result()["signal"] == "SIGTERM"
    assert not group_is_alive(pgid, ticks)
    assert await kill_group(pgid, ticks, grace=0.1) is False  # the leader was reaped


async def test_kill_group_sends_sigkill_after_the_grace(make):
    capture = make("trap '' TERM; sleep 100")
    await capture.start()
    await until(lambda: _ignores_sigterm(capture.pgid), what="the trap set")
    assert await kill_group(capture.pgid, capture.process_start_ticks, grace=0.3)
    assert await capture.wait(30)
    assert capture.result()["signal"] == "SIGKILL"


# --- log pages of captures -----------------------------------------------------------------------


@pytest.fixture
def reads(monkeypatch):
    """Bytes that log paging reads from the log files themselves."""
    counted = {"bytes": 0}

    class Counting:
        def __init__(self, f):
            self._f = f

        def read(self, n=-1):
            data = self._f.read(n)
            counted["bytes"] += len(data)
            return data

        def __getattr__(self, name):
            return getattr(self._f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._f.close()

    monkeypatch.setattr(logpages, "_open_log", lambda path: Counting(open(path, "rb")))  # noqa: SIM115
    return counted


async def test_pages_of_a_finished_capture_use_the_index_written_while_capturing(
    make, tmp_path, reads
):
    capture = make("seq 1 300000")  # 2.0 MB, 300,000 lines
    await capture.run(30)
    index = tmp_path / "index"
    path = capture.folder / "stdout.txt"
    sidecar = Path(sidecar_path(path, index))
    before = sidecar.stat()
    assert before.st_size >= 300_000 * 8
    page = read_page(path, offset=123_455, limit=3, index_dir=index)
    assert page["lines"] == ["123456", "123457", "123458"]
    assert page["totalLines"] == 300_000
    assert reads["bytes"] <= 64  # its three lines, no scan of the 2 MB
    after = sidecar.stat()
    assert (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size)
    last = read_page(capture.folder / "output.txt", index_dir=index)
    assert last["lines"][-1] == "300000" and last["nextOffset"] is None


async def test_pages_of_a_growing_capture(make, tmp_path, workspace, reads):
    capture = make(f"seq 1 100000; {_until_file('go')}; seq 100001 250000")
    index = tmp_path / "index"
    path = capture.folder / "output.txt"
    await capture.start()
    # The first 100,000 lines captured whole; the rest waits for ``go``.
    first = sum(len(str(n)) + 1 for n in range(1, 100_001))
    await until(lambda: path.exists() and path.stat().st_size == first, what="the first lines")
    assert not await capture.wait(0.3)
    page = read_page(path, limit=2, index_dir=index)
    assert page["lines"] == ["99999", "100000"]
    assert page["totalLines"] == 100_000
    (workspace / "go").touch()
    assert await capture.wait(30)
    reads["bytes"] = 0
    page = read_page(path, offset=249_998, index_dir=index)
    assert page["lines"] == ["249999", "250000"]
    assert page["totalLines"] == 250_000
    assert reads["bytes"] <= 32  # the reader's extension was taken over, not rebuilt
    assert read_page(path, offset=99_999, limit=2, index_dir=index)["lines"] == [
        "100000",
        "100001",
    ]


# --- live output ---------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _fold(updates: list[dict]) -> dict | None:
    state: dict | None = None
    for update in updates:
        state = apply_tool_update(state, update)
    return (state or {}).get("output")


def test_live_output_coalesces_to_one_update_per_interval():
    clock = Clock()
    live = LiveOutput(clock=clock)
    assert live.take() is None and live.flush() is None and live.due_in() is None
    live.feed("a\n")
    assert live.take() == {"outputDelta": "a\n"}  # the first goes at once
    live.feed("b\n")
    clock.now = 1000.05
    live.feed("c\n")
    assert live.take() is None
    assert live.due_in() == pytest.approx(0.05)
    clock.now = 1000.1
    assert live.take() == {"outputDelta": "b\nc\n"}
    assert live.take() is None and live.due_in() is None
    clock.now += 1
    live.feed("x" * 20_000)  # too big for a delta: the bounded output replaces
    update = live.take()
    assert set(update) == {"output"}
    assert update["output"] == bound_tool_output("a\nb\nc\n" + "x" * 20_000)
    assert json_size(update) <= LIVE_UPDATE_MAX_BYTES
    live.feed("y")
    assert live.take() is None
    assert live.flush() == {"outputDelta": "y"}  # the final one, not waiting


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pieces=st.lists(
        st.tuples(
            st.text(
                st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                min_size=1,
                max_size=40,
            ),
            st.integers(1, 8000),
        ),
        min_size=1,
        max_size=6,
    ),
    cuts=st.lists(st.integers(1, 70_000), min_size=1, max_size=60),
    steps=st.lists(st.floats(0, 0.25), min_size=1, max_size=60),
)
def test_live_updates_fold_into_the_bound_of_the_whole_text(pieces, cuts, steps):
    text = "".join(piece * times for piece, times in pieces)
    clock = Clock()
    live = LiveOutput(clock=clock)
    sent: list[tuple[float, dict]] = []
    start, i = 0, 0
    while start < len(text):
        stop = min(len(text), start + cuts[i % len(cuts)])
        clock.now += steps[i % len(steps)]
        live.feed(text[start:stop])
        update = live.take()
        if update is not None:
            sent.append((clock.now, update))
        start, i = stop, i + 1
    clock.now += live.due_in() or 0.0  # the final update, once due
    final = live.flush()
    if final is not None:
        sent.append((clock.now, final))
    times = [t for t, _ in sent]
    assert all(b - a >= 0.1 - 1e-9 for a, b in zip(times, times[1:], strict=False))
    assert all(json_size(u) <= LIVE_UPDATE_MAX_BYTES for _, u in sent)
    assert all(len(u) == 1 for _, u in sent)
    assert _fold([u for _, u in sent]) == bound_tool_output(text)
    assert live.output == bound_tool_output(text)


async def test_live_pump_sends_coalesced_updates_and_the_last_one(make, workspace):
    live = LiveOutput()
    sent: list[tuple[float, dict]] = []

    async def send(update: dict) -> None:
        sent.append((time.monotonic(), update))
        (workspace / "sent").touch()  # the rest is written once an update went out

    capture = make(
        f"echo line 1; {_until_file('sent')}; "
        "for i in $(seq 2 30); do echo line $i; sleep 0.01; done; echo end",
        on_output=live.feed,
    )
    pump = asyncio.create_task(live.pump(send))
    await capture.run(30)
    live.close()
    await asyncio.wait_for(pump, 10)
    times = [t for t, _ in sent]
    assert len(sent) >= 2
    assert all(b - a >= 0.1 - 0.002 for a, b in zip(times, times[1:], strict=False))
    whole = _text(capture, "output").decode()
    assert _fold([u for _, u in sent]) == bound_tool_output(whole)


# --- memory --------------------------------------------------------------------------------------

_RSS_SCRIPT = r"""
import asyncio, json, sys
from pathlib import Path
from tools.runtime.capture import ProcessCapture, tool_environment
from tools.runtime.live import LiveOutput

def kib(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))

async def main(folder):
    live = LiveOutput()
    capture = ProcessCapture(
        command="head -c 268435456 /dev/zero", cwd=folder, env=tool_environment(folder),
        folder=folder / "g1", on_output=live.feed, index_dir=folder / "index",
    )
    return await capture.run(300)

folder = Path(sys.argv[1])
before = kib("VmRSS:")
result = asyncio.run(main(folder))
print(json.dumps({"before": before, "peak": kib("VmHWM:"), "result": result}))
"""


def test_capturing_256_mib_keeps_memory_flat(tmp_path):
    """In a fresh interpreter, so the peak is the capture's own."""
    done = subprocess.run(
        [sys.executable, "-c", _RSS_SCRIPT, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    report = json.loads(done.stdout)
    assert report["result"]["capture"]["stdout"]["bytes"] == 256 * MIB
    assert report["peak"] - report["before"] < 32 * 1024  # KiB: < 32 MiB of growth
