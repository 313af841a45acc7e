"""Process groups: is one still ours, is it alive, kill it (docs/execution.md).

A command runs in its own process group whose id is its leader's pid. A pid is reused once its
process is reaped, so a group is known by its id *and* its leader's start time (clock ticks
since boot, ``/proc/<pid>/stat`` field 22): signals go to a group only while its leader pid
still has that start time. A sweep on the same host can so kill what a dead worker left,
and never a stranger that got the pid since.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator

KILL_GRACE_SECONDS = 5.0
GROUP_POLL_SECONDS = 0.05

OURS, GONE, OTHER = "ours", "gone", "other"

PR_SET_DUMPABLE, PR_GET_DUMPABLE = 4, 3  # <linux/prctl.h>


def environment_protect() -> bool:
    """Make this process not dumpable, so a command it starts cannot read its secrets.

    A command runs as the worker's own OS user, and with an environment of its own
    (``capture.tool_environment``); but ``/proc/<worker pid>/environ`` would still show it
    the worker's (``DATABASE_URL``, ``SECRET_KEY``), and ``ptrace`` its memory. A process that
    is not dumpable has its ``/proc`` files owned by root and refuses ``ptrace`` to users
    without ``CAP_SYS_PTRACE``. The commands themselves are dumpable again after their
    ``exec``. True when set; False where ``prctl`` does not exist (not Linux).
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def is_dumpable() -> bool | None:
    """This process's dumpable flag; None where ``prctl`` does not exist."""
    try:
        import ctypes

        return bool(ctypes.CDLL(None).prctl(PR_GET_DUMPABLE, 0, 0, 0, 0))
    except (OSError, AttributeError):
        return None


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` from field 3 (state) on, or None without the process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ")".
    return raw[raw.rindex(b")") + 2 :].decode("ascii").split()


def start_ticks_of(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks after boot (``/proc/<pid>/stat`` field 22)."""
    fields = _proc_stat(pid)
    return int(fields[19]) if fields else None


def leader_state(pgid: int, start_ticks: int | None) -> str:
    """Whether ``pgid``'s leader is the process that started at ``start_ticks`` (a zombie
    counts: it still holds the pid), gone, or another process that reused the pid."""
    fields = _proc_stat(pgid)
    if fields is None:
        return GONE
    return OURS if start_ticks is not None and int(fields[19]) == start_ticks else OTHER


def group_has_live_member(pgid: int) -> bool:
    """Whether a process of group ``pgid`` is still running (zombies do not count)."""
    if not os.path.isdir("/proc"):  # pragma: no cover - not Linux
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    return next(live_members(pgid), None) is not None


def live_members(pgid: int) -> Iterator[int]:
    """The running processes of group ``pgid``, from ``/proc`` (zombies do not count)."""
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir("/proc"):
            if name.isdigit():
                fields = _proc_stat(int(name))
                if fields and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                    yield int(name)


def killpg(pgid: int, sig: int) -> None:
    """``sig`` to the group. A sandboxed group's leader is bubblewrap (``tools/sandbox.py``),
    which a signal would end at once, and with it, through ``--die-with-parent``, everything
    in the sandbox: every signal but SIGKILL goes to the other members instead, so a command
    gets its grace (a trap runs, its exit status is its own) and bubblewrap ends with it. Before
    the command started (only bubblewrap's processes in the group) the group gets SIGKILL."""
    if sig != signal.SIGKILL and _command_name(pgid) == SANDBOX_LEADER:
        others = [pid for pid in live_members(pgid) if pid != pgid]
        if any(_command_name(pid) != SANDBOX_LEADER for pid in others):
            for pid in others:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            return
        # Only bubblewrap yet (the sandbox being made) or still (it ends): no command to give
        # a grace to, and one about to start must not run on. The whole group ends now.
        sig = signal.SIGKILL
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


SANDBOX_LEADER = "bwrap"


def _command_name(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as comm:
            return comm.read().strip()
    except OSError:
        return None


def group_is_alive(pgid: int, start_ticks: int) -> bool:
    """True while the group's leader is the process that started at ``start_ticks`` and a
    member of the group still runs. A leader pid now held by another process, or gone, is not
    ours: a later sweep cannot tell a stranger's group from ours then, and answers False."""
    fields = _proc_stat(pgid)
    if fields is None or int(fields[19]) != start_ticks:
        return False
    return fields[0] not in ("Z", "X") or group_has_live_member(pgid)


async def kill_group(pgid: int, start_ticks: int, grace: float = KILL_GRACE_SECONDS) -> bool:
    """SIGTERM to the group, SIGKILL after ``grace`` if a member still runs; only when the
    leader pid still has ``start_ticks`` (else nothing is sent: False).

    During the grace the leader may exit and be reaped; its pid then stays free of reuse while
    any member of its group lives, so the SIGKILL is still sent when the pid is gone, never when
    another process holds it.
    """
    if leader_state(pgid, start_ticks) != OURS:
        return False
    killpg(pgid, signal.SIGTERM)
    await await_group_end(pgid, grace)
    if leader_state(pgid, start_ticks) != OTHER and group_has_live_member(pgid):
        killpg(pgid, signal.SIGKILL)
    return True


async def await_group_end(pgid: int, timeout: float, exited: asyncio.Event | None = None) -> None:
    """Return once no member of the group runs (and ``exited`` is set), or after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    if exited is not None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(exited.wait(), timeout)
    while group_has_live_member(pgid) and loop.time() < deadline:
        await asyncio.sleep(min(GROUP_POLL_SECONDS, max(0.0, deadline - loop.time())))


def signal_name(number: int) -> str:
    """``SIGTERM`` for 15; real-time signals as ``SIGRTMIN+N``."""
    try:
        return signal.Signals(number).name
    except ValueError:
        low = getattr(signal, "SIGRTMIN", None)
        if low is not None and number > low:
            return f"SIGRTMIN+{number - low}"
        return f"SIG{number}"
