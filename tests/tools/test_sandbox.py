"""The command sandbox with real processes (tools/sandbox.py; docs/security.md, "The command
sandbox"): what a command under bubblewrap can see, write and reach, and that stopping it stops
everything it started. Commands run as the runtime runs them: ``ProcessCapture`` with the
sandbox of the settings, and ``bash`` through a real worker."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.test import override_settings

from tests.waits import until
from tools import sandbox as sandbox_module
from tools.runtime.capture import ProcessCapture, tool_environment
from tools.runtime.processes import group_has_live_member
from tools.runtime.registry import HANDLERS
from tools.sandbox import Sandbox, bwrap_problem, hidden_paths, sandbox_for, sandbox_state
from tools.workspaces import owner_workspace_root

from .worker_helpers import model_call, response_of, running_worker, wait_for

pytestmark = pytest.mark.skipif(
    bwrap_problem() is not None, reason=f"no usable bubblewrap here: {bwrap_problem()}"
)
ROOT = Path(__file__).resolve().parents[2]


def _working_in(workspace: Path) -> list[int]:
    """The host's processes whose working directory is ``workspace``: what runs in its
    sandbox (every command starts there, and nothing else on the host does)."""
    real, found = os.path.realpath(workspace), []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{name}/cwd") == real:
                    found.append(int(name))
    return found


def _run(command: str, workspace: Path, tmp_path: Path, *, timeout: float = 60, **kwargs):
    """The command captured in its sandbox (the settings' one); (result, stdout, stderr)."""
    box = kwargs.pop("sandbox", None) or sandbox_for(workspace)
    assert box is not None, "the suite runs commands sandboxed"
    folder = tmp_path / "attempts" / str(len(list(tmp_path.glob("attempts/*"))))

    async def go():
        capture = ProcessCapture(
            command=command,
            cwd=workspace,
            env=tool_environment(workspace),
            folder=folder,
            sandbox=box,
            **kwargs,
        )
        return await capture.run(timeout)

    result = asyncio.run(go())
    return result, (folder / "stdout.txt").read_text(), (folder / "stderr.txt").read_text()


# --- what it sees ---------------------------------------------------------------------------


def test_another_owners_workspace_assets_and_the_database_are_hidden(workspace, tmp_path):
    other = owner_workspace_root(2) / "theirs"
    other.mkdir(parents=True)
    (other / "secret.txt").write_text("the other owner's file")
    asset = Path(settings.DATA_DIR) / "conversations" / "c1" / "asset.bin"
    asset.parent.mkdir(parents=True)
    asset.write_text("an asset")
    database = Path(settings.DATABASES["default"]["NAME"])
    readable = [str(other / "secret.txt"), str(asset)]
    if database.is_absolute() and database.exists():  # SQLite: the file itself
        readable.append(str(database))
    # Each path exists outside; inside, `cat` finds nothing there.
    for path in readable:
        assert Path(path).exists()
        result, out, err = _run(f"cat {path}", workspace, tmp_path)
        assert result["exitCode"] == 1, (path, out, err)
        assert out == "" and "No such file or directory" in err
    # The workspace root shows only the way to this workspace; DATA_DIR shows nothing.
    _, out, _ = _run(f"ls -A {other.parent.parent}", workspace, tmp_path)
    assert out.split() == ["1"], out
    _, out, _ = _run(f"ls -A {settings.DATA_DIR}", workspace, tmp_path)
    assert out == "", out


def test_the_checkout_run_and_paths_of_the_setting_are_hidden(workspace, tmp_path):
    hidden = tmp_path / "operator-secrets"
    hidden.mkdir()
    (hidden / "key").write_text("k")
    with override_settings(TOOLCORE_SANDBOX_HIDE=[hidden]):
        assert hidden in hidden_paths()
        box = sandbox_for(workspace)
    for folder in (hidden, Path("/run")):
        _, out, _ = _run(f"ls -A {folder}", workspace, tmp_path, sandbox=box)
        assert out == "", (folder, out)
    # The checkout: none of its files (only the empty folders other hidden paths are put on).
    _, out, err = _run(f"ls -A {ROOT}; cat {ROOT / 'manage.py'}", workspace, tmp_path, sandbox=box)
    assert not set(out.split()) & {"manage.py", "pyproject.toml", "config", "tools"}, out
    assert "No such file or directory" in err


def test_its_own_processes_only(workspace, tmp_path):
    result, out, _ = _run("ls /proc | grep '^[0-9]' | wc -l; echo $$", workspace, tmp_path)
    count, pid = out.split()
    # bubblewrap's init, the shell, ls, grep and wc: none of the server's processes.
    assert int(count) <= 5 and int(pid) <= 5, out


# --- what it writes -------------------------------------------------------------------------


def test_it_writes_its_workspace_and_a_private_tmp_only(workspace, tmp_path):
    outside = tmp_path / "outside.txt"
    command = (
        "echo kept > made.txt; echo private > /tmp/scratch; cat /tmp/scratch; "
        f"echo no > {outside}; echo no > /usr/local/x; echo no > /etc/x; true"
    )
    result, out, err = _run(command, workspace, tmp_path)
    assert (workspace / "made.txt").read_text() == "kept\n"
    assert out == "private\n"
    assert not outside.exists() and not Path("/usr/local/x").exists()
    assert err.count("Read-only file system") >= 2, err
    # Its /tmp was its own: nothing of it is left on the host's.
    assert not Path("/tmp/scratch").exists() or Path("/tmp/scratch").read_text() != "private\n"


# --- what it reaches ------------------------------------------------------------------------


@pytest.fixture
def listener():
    """A TCP server on 127.0.0.1 of this host (a kernel-chosen port), as PostgreSQL or Redis."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server.getsockname()[1]
    server.close()


def _connects(port: int) -> str:
    return f"if bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' 2>/dev/null; then echo open; else echo closed; fi"


def test_no_network_by_default(workspace, tmp_path, listener):
    ports = [listener]
    for url, default in (
        (os.environ.get("DATABASE_URL"), 5432),
        (os.environ.get("REDIS_URL"), 6379),
    ):
        if url:  # the team run's PostgreSQL and Redis too
            ports.append(urlsplit(url).port or default)
    for port in ports:
        result, out, _ = _run(_connects(port), workspace, tmp_path)
        assert out == "closed\n", port
    # The same command outside a sandbox does connect: the listener is real.
    outside = subprocess.run(["sh", "-c", _connects(listener)], capture_output=True, text=True)
    assert outside.stdout == "open\n"


def test_the_network_when_the_setting_allows_it(workspace, tmp_path, listener):
    with override_settings(TOOLCORE_SANDBOX_NETWORK=True):
        box = sandbox_for(workspace)
    assert box is not None and box.network
    result, out, _ = _run(_connects(listener), workspace, tmp_path, sandbox=box)
    assert out == "open\n"


# --- stopping it ----------------------------------------------------------------------------


def _pids(workspace: Path, name: str) -> list[int]:
    return [int(line.split()[1]) for line in (workspace / name).read_text().splitlines()]


def test_a_trap_has_its_grace_and_its_own_exit_status(workspace, tmp_path):
    command = "trap 'echo cleaning; sleep 0.2; echo done; exit 7' TERM; sleep 100 & wait"
    result, out, _ = _run(command, workspace, tmp_path, timeout=1)
    assert out == "cleaning\ndone\n"
    assert (result["exitCode"], result["signal"], result["timedOut"]) == (7, None, True)


def test_a_timed_out_command_reports_the_signal_that_ended_it(workspace, tmp_path):
    result, _, _ = _run("sleep 100", workspace, tmp_path, timeout=1)
    assert (result["exitCode"], result["signal"], result["timedOut"]) == (None, "SIGTERM", True)


def test_stopping_it_stops_everything_it_started_even_outside_its_group(workspace, tmp_path):
    # A daemon of its own session (setsid), which no signal to the group reaches, and one that
    # ignores SIGTERM: both end with the sandbox.
    command = (
        "setsid sh -c 'echo setsid $(cut -d\" \" -f4 /proc/self/stat); sleep 1000' >> pids & "
        "sh -c \"trap '' TERM; echo deaf \\$\\$ >> pids; sleep 1000\" & "
        "echo leader $$ >> pids; sleep 1000"
    )
    box = sandbox_for(workspace)

    async def go():
        capture = ProcessCapture(
            command=command,
            cwd=workspace,
            env=tool_environment(workspace),
            folder=tmp_path / "stopped",
            sandbox=box,
        )
        await capture.start()
        await until(
            lambda: (
                (workspace / "pids").exists()
                and len((workspace / "pids").read_text().splitlines()) == 3
            ),
            what="the three processes started",
        )
        await capture.terminate(grace=1)
        assert await capture.wait(30)
        return capture

    capture = asyncio.run(go())
    assert not group_has_live_member(capture.pgid)
    # Nothing of the sandbox runs any more, the daemon of its own session included.
    wait_for(lambda: not _working_in(workspace), what="every process of the sandbox ended")


def test_stopped_while_the_sandbox_is_being_made_it_never_runs(workspace, tmp_path):
    # A SIGTERM sent before the command exists would reach no one (bubblewrap, the leader, is
    # spared it): the group gets SIGKILL instead, and the command never writes.
    box = sandbox_for(workspace)

    async def go():
        capture = ProcessCapture(
            command="sleep 0.5; touch marker",
            cwd=workspace,
            env=tool_environment(workspace),
            folder=tmp_path / "early",
            sandbox=box,
        )
        await capture.start()
        await capture.terminate(grace=30)  # at once: well before the command's half second
        assert await capture.wait(30)
        return capture.result()

    result = asyncio.run(go())
    assert result["signal"] in ("SIGKILL", "SIGTERM"), result
    wait_for(lambda: not _working_in(workspace), what="nothing of the sandbox runs")
    assert not (workspace / "marker").exists()


def test_a_background_process_ends_with_the_command(workspace, tmp_path):
    # Its own PID namespace: what it left behind ends when it exits (async runs are the way to
    # keep a process running).
    result, out, _ = _run("(sleep 1000; echo late > late.txt) & echo early", workspace, tmp_path)
    assert out == "early\n" and result["exitCode"] == 0
    wait_for(lambda: not _working_in(workspace), what="the background process ended")
    assert not (workspace / "late.txt").exists()


# --- through the bash tool ------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_bash_calls_run_in_the_sandbox(user):
    other = owner_workspace_root(user.pk + 1000) / "theirs"
    other.mkdir(parents=True)
    (other / "secret.txt").write_text("not yours")
    command = f"cat {other / 'secret.txt'}; echo pid=$$; ls /run | wc -l"
    with running_worker(handlers=HANDLERS):
        _, _, call_id = model_call(user, "bash", {"command": command})
        payload = wait_for(lambda: response_of(call_id))
    text = payload["modelContent"][0]["text"]
    assert "not yours" not in text and "No such file or directory" in text, text
    # The shell is process 2 of its namespace (bubblewrap's init is 1); /run is empty.
    assert "pid=2\n0\n" in text, text


# --- the settings and the start -------------------------------------------------------------


def test_the_state_the_pages_and_readyz_show():
    assert sandbox_state() == "bwrap"
    with override_settings(TOOLCORE_SANDBOX="off"):
        assert sandbox_state() == "off" and sandbox_for(Path("/tmp")) is None


def _environment(tmp_path: Path, **env: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLCORE_", "DEBUG"))}
    clean.pop("DATABASE_URL", None)
    clean.pop("REDIS_URL", None)
    clean.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        SECRET_KEY="sandbox-start-test-" + "x" * 32,
        ALLOWED_HOSTS="localhost",
        DATA_DIR=str(tmp_path / "data"),
        TOOLCORE_WORKSPACE_ROOT=str(tmp_path / "workspaces"),
        **env,
    )
    return clean


def _no_bwrap_path(tmp_path: Path) -> str:
    """A PATH with every program of this one but bubblewrap: a machine without it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        with contextlib.suppress(OSError):
            for entry in os.scandir(folder):
                target = bin_dir / entry.name
                if entry.name != "bwrap" and not target.exists():
                    target.symlink_to(entry.path)
    assert shutil.which("bwrap", path=str(bin_dir)) is None
    return str(bin_dir)


def test_a_worker_without_bubblewrap_refuses_to_start_naming_the_setting(tmp_path):
    env = _environment(tmp_path, PATH=_no_bwrap_path(tmp_path))
    done = subprocess.run(
        [sys.executable, "manage.py", "runworker_tools"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("TOOLCORE_SANDBOX: bwrap is not installed"), done.stderr
    assert "TOOLCORE_SANDBOX=off" in lines[-1] and "Traceback" not in done.stderr


def test_the_settings_are_checked_at_start(tmp_path):
    for variable, value, line in [
        ("TOOLCORE_SANDBOX", "docker", "TOOLCORE_SANDBOX: must be bwrap or off, not 'docker'"),
        ("TOOLCORE_SANDBOX_HIDE", "relative/path", "TOOLCORE_SANDBOX_HIDE: lists absolute"),
        ("TOOLCORE_SANDBOX_NETWORK", "maybe", "TOOLCORE_SANDBOX_NETWORK: must be 1/0"),
        ("TOOLCORE_SANDBOX_MEMORY", "4G", "TOOLCORE_SANDBOX_MEMORY: must be a whole number"),
        ("TOOLCORE_SANDBOX_PROCESSES", "-1", "TOOLCORE_SANDBOX_PROCESSES: must be 0 or more"),
        ("TOOLCORE_SANDBOX_CGROUP", "commands", "TOOLCORE_SANDBOX_CGROUP: must be an absolute"),
    ]:
        done = subprocess.run(
            [sys.executable, "-c", "import django; django.setup()"],
            cwd=ROOT,
            env=_environment(tmp_path, **{variable: value}),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 1 and done.stderr.strip().startswith(line), done.stderr


def test_the_probe_says_why_a_sandbox_cannot_be_made():
    assert sandbox_module.bwrap_problem("no-such-bwrap-here").startswith(
        "no-such-bwrap-here is not installed"
    )


def test_the_options_put_hidden_folders_under_the_workspace_bind(tmp_path):
    workspace = tmp_path / "root" / "1" / "ws"
    (workspace / "inner").mkdir(parents=True)
    (tmp_path / "assets").mkdir()
    (tmp_path / "root" / "2").mkdir()
    hide = (tmp_path / "root", tmp_path / "assets", workspace / "inner", tmp_path / "missing")
    box = Sandbox(workspace=workspace, hide=(*hide, tmp_path / "root" / "2"))
    argv = box.argv(["/bin/sh", "-c", "true"])
    bind = argv.index("--bind")
    assert argv[bind + 1 : bind + 3] == [str(workspace), str(workspace)]
    # The workspace root before the bind, what is hidden inside the workspace after it.
    assert argv.index(str(tmp_path / "root")) < bind < argv.index(str(workspace / "inner"))
    # Nothing missing is mounted, nor a folder inside one hidden already.
    assert str(tmp_path / "missing") not in argv and str(tmp_path / "root" / "2") not in argv
    assert "--unshare-net" in argv and argv[-3:] == ["/bin/sh", "-c", "true"]


# --- what the pages, the admin and /readyz say ----------------------------------------------


@pytest.fixture
def without_bwrap(tmp_path, monkeypatch):
    """This process on a machine without bubblewrap (a PATH without it), DEBUG on."""
    monkeypatch.setenv("PATH", _no_bwrap_path(tmp_path))
    bwrap_problem.cache_clear()
    yield
    bwrap_problem.cache_clear()


@pytest.mark.django_db
def test_readyz_reports_the_sandbox(client, monkeypatch):
    from tools import sandbox_limits

    hierarchy = sandbox_limits.Hierarchy(Path("/x"), ("pids",), 1)
    monkeypatch.setattr(sandbox_limits, "hierarchies", lambda: (hierarchy,))
    with override_settings(TOOLCORE_SANDBOX_MEMORY=0):
        assert client.get("/readyz").json()["sandbox"] == {
            "on": True,
            "limits": {
                "processes": {"max": settings.TOOLCORE_SANDBOX_PROCESSES, "by": "cgroup"},
                "memory": {"max": None, "by": None},
                "fileSize": {"max": settings.TOOLCORE_SANDBOX_FILE_SIZE, "by": "rlimit"},
            },
        }
    with override_settings(TOOLCORE_SANDBOX="off"):
        assert client.get("/readyz").json()["sandbox"] == {
            "on": False,
            "why": "TOOLCORE_SANDBOX=off",
        }


@pytest.mark.django_db
def test_pages_and_the_admin_say_when_commands_run_unsandboxed(without_bwrap, settings):
    from tests.factories import StaffFactory

    settings.DEBUG = True
    assert sandbox_for(Path("/tmp")) is None and sandbox_state() == "unavailable"
    staff = StaffFactory()
    from django.test import Client

    browser = Client()
    browser.force_login(staff)
    readyz = browser.get("/readyz").json()["sandbox"]
    assert readyz["on"] is False and readyz["why"].startswith("bwrap is not installed")
    for url in ("/", "/admin/"):
        page = browser.get(url).content.decode()
        assert 'class="sandbox-off" role="status"' in page, url
        assert "Commands run unsandboxed</strong>: bwrap is not installed" in page, url
    bwrap_problem.cache_clear()


@pytest.mark.django_db
def test_pages_say_nothing_while_commands_are_sandboxed(client):
    from tests.factories import StaffFactory

    client.force_login(StaffFactory())
    for url in ("/", "/admin/"):
        assert "Commands run unsandboxed" not in client.get(url).content.decode(), url
