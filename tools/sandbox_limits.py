"""What a sandboxed command may use: processes, memory and file size (docs/security.md, "Resource
limits").

Each command gets a cgroup of its own for the controllers this process may use, made before it
starts and removed once it ended, and rlimits for the rest:

* **processes** (``TOOLCORE_SANDBOX_PROCESSES``, default 1,024): the ``pids`` controller's
  ``pids.max``. There is no rlimit to fall back on: ``RLIMIT_NPROC`` counts every process of the
  server's OS user, not the command's, and does not bind root. Without the controller the
  number is not limited (``/readyz`` and the worker's start-up line say so).
* **memory** (``TOOLCORE_SANDBOX_MEMORY``, default 4 GiB): the ``memory`` controller's limit
  (swap included where the kernel counts it), so a command over it is killed by the kernel's
  OOM killer (``SIGKILL``) and nothing else on the host is. Without the controller,
  ``RLIMIT_AS`` (address space, a cruder bound: a runtime that reserves more than it uses may
  fail to start under it).
* **file size** (``TOOLCORE_SANDBOX_FILE_SIZE``, default 8 GiB): ``RLIMIT_FSIZE``, for every
  process of the command (a write past it fails and the writer gets ``SIGXFSZ``).

A setting of 0 sets no limit of its kind.

The cgroups: on cgroup v1 (one hierarchy per controller), the worker's own cgroup of each
controller (``/proc/self/cgroup``), when it may make folders there; on cgroup v2 only a folder
delegated to Toolcore (``TOOLCORE_SANDBOX_CGROUP``: the worker may make cgroups in it and it
enables ``pids`` and ``memory`` for them; see docs/security.md). A command's cgroups are
``toolcore/<random>`` below each. The command joins them itself, before anything of it runs:
a ``/bin/sh`` prelude writes its own pid into each ``cgroup.procs``, sets the rlimits with
``ulimit`` and ``exec``s bubblewrap (so the group's leader is still bubblewrap, with the same
pid). Once its process group is gone the cgroups are removed; a worker that died leaves empty
ones, removed by the next worker's start (``sweep``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

CGROUP_MOUNT = Path("/sys/fs/cgroup")
FOLDER = "toolcore"
CONTROLLERS = ("pids", "memory")
# Files a cgroup has only where the kernel counts swap.
OPTIONAL = ("memory.memsw.limit_in_bytes", "memory.swap.max")
# The prelude: end at once if the worker that started it is gone already; join every cgroup
# named before ``--``, set the rlimits, become the sandbox.
PRELUDE = (
    '[ "$PPID" = {worker} ] || exit 125; '
    'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; {ulimits}exec "$@"'
)
# Sets the parent-death signal first thing, kept across the execs that follow, so the prelude
# dies with its worker as bubblewrap would (``--die-with-parent`` is set only once bubblewrap
# runs: a worker killed before that left the sandbox running, found by test_worker_crash).
SETPRIV = shutil.which("setpriv")
# How long a command's cgroup may take to empty once its group is gone, and a leftover's age
# before a start-up sweep removes it (a command joins its cgroups a moment after they are made).
REMOVE_SECONDS = 5.0
LEFTOVER_SECONDS = 60.0


@dataclass(frozen=True)
class Limits:
    """The bounds of every command (0: none of that kind)."""

    processes: int = 0
    memory: int = 0
    file_size: int = 0

    def by_name(self) -> dict[str, int]:
        """Each bound by the name ``/readyz`` and ``enforced`` give it."""
        return {"processes": self.processes, "memory": self.memory, "fileSize": self.file_size}


def configured() -> Limits:
    from django.conf import settings

    return Limits(
        processes=settings.TOOLCORE_SANDBOX_PROCESSES,
        memory=settings.TOOLCORE_SANDBOX_MEMORY,
        file_size=settings.TOOLCORE_SANDBOX_FILE_SIZE,
    )


# --- where the cgroups go ---------------------------------------------------------------------


@dataclass(frozen=True)
class Hierarchy:
    """A folder where this process may make command cgroups, and the controllers they have
    there: ``version`` 1 (one controller a hierarchy) or 2 (all in one)."""

    folder: Path
    controllers: tuple[str, ...]
    version: int

    def limit_files(self, limits: Limits) -> dict[str, int]:
        """The files of a command's cgroup here and what they get."""
        files: dict[str, int] = {}
        if "pids" in self.controllers and limits.processes:
            files["pids.max"] = limits.processes
        if "memory" in self.controllers and limits.memory:
            if self.version == 1:
                files["memory.limit_in_bytes"] = limits.memory
                files["memory.memsw.limit_in_bytes"] = limits.memory  # where swap is counted
            else:
                files["memory.max"] = limits.memory
                files["memory.swap.max"] = 0
        return files


def _own_cgroups(text: str) -> dict[str, str]:
    """``/proc/self/cgroup``: controller → this process's cgroup path ("" for v2's line)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for name in parts[1].split(",") if parts[1] else [""]:
                found[name] = parts[2]
    return found


def _usable(folder: Path) -> bool:
    """Whether a command cgroup can be made (and removed) in ``folder``/toolcore."""
    try:
        (folder / FOLDER).mkdir(exist_ok=True)
        probe = folder / FOLDER / f"probe-{secrets.token_hex(4)}"
        probe.mkdir()
        probe.rmdir()
    except OSError:
        return False
    return True


@functools.cache
def hierarchies() -> tuple[Hierarchy, ...]:
    """Where this process's commands get their cgroups (none: rlimits only)."""
    from django.conf import settings

    if settings.configured:
        delegated = settings.TOOLCORE_SANDBOX_CGROUP
    else:  # a script that runs commands without Django's settings (the benches' children)
        delegated = os.environ.get("TOOLCORE_SANDBOX_CGROUP", "").strip() or None
    if delegated is not None:
        return _delegated(Path(delegated))
    try:
        own = _own_cgroups(Path("/proc/self/cgroup").read_text())
    except OSError:
        return ()
    found = []
    for name in CONTROLLERS:
        if name not in own:
            continue
        folder = CGROUP_MOUNT / name / own[name].lstrip("/")
        if _usable(folder):
            found.append(Hierarchy(folder, (name,), 1))
    return tuple(found)


def _delegated(folder: Path) -> tuple[Hierarchy, ...]:
    """cgroup v2: the folder of ``TOOLCORE_SANDBOX_CGROUP``, with the controllers its
    ``cgroup.subtree_control`` gives its children (enabled here when the folder allows)."""
    control = folder / "cgroup.subtree_control"
    try:
        enabled = control.read_text().split()
        missing = [c for c in CONTROLLERS if c not in enabled]
        if missing:
            with contextlib.suppress(OSError):
                control.write_text(" ".join(f"+{c}" for c in missing))
            enabled = control.read_text().split()
    except OSError:
        logger.warning("TOOLCORE_SANDBOX_CGROUP: %s is not a cgroup v2 folder", folder)
        return ()
    controllers = tuple(c for c in CONTROLLERS if c in enabled)
    if not controllers or not _usable(folder):
        logger.warning("TOOLCORE_SANDBOX_CGROUP: no command cgroup can be made in %s", folder)
        return ()
    # The command cgroups sit one level below (``toolcore/<id>``): pass the controllers on.
    with contextlib.suppress(OSError):
        (folder / FOLDER / "cgroup.subtree_control").write_text(
            " ".join(f"+{c}" for c in controllers)
        )
    return (Hierarchy(folder, controllers, 2),)


def enforced(limits: Limits | None = None) -> dict[str, str | None]:
    """How each limit is enforced here: ``cgroup``, ``rlimit``, or None (not limited)."""
    limits = limits or configured()
    controllers = {c for h in hierarchies() for c in h.controllers}
    return {
        "processes": "cgroup" if limits.processes and "pids" in controllers else None,
        "memory": (
            None if not limits.memory else "cgroup" if "memory" in controllers else "rlimit"
        ),
        "fileSize": "rlimit" if limits.file_size else None,
    }


def describe(limits: Limits | None = None) -> str:
    """One line for the worker's start: each limit and how it is enforced."""
    limits = limits or configured()
    how = enforced(limits)
    parts = []
    for name, value in limits.by_name().items():
        label = {"processes": "processes", "memory": "memory", "fileSize": "file size"}[name]
        if not value:
            parts.append(f"{label} unlimited (set to 0)")
        elif how[name] is None:
            parts.append(f"{label} NOT limited (no {name} cgroup this process may use)")
        else:
            shown = value if name == "processes" else f"{value} bytes"
            parts.append(f"{label} {shown} ({how[name]})")
    return "; ".join(parts)


# --- one command ----------------------------------------------------------------------------


@dataclass
class CommandLimits:
    """One command's cgroups (made by ``make``), the prelude that puts it in them, and their
    removal (``remove``, once its process group is gone)."""

    limits: Limits
    folders: list[Path] = field(default_factory=list)

    def make(self) -> list[str]:
        """Make the cgroups; the argv prefix that joins them and sets the rlimits (prepended to
        bubblewrap's argv)."""
        if self.limits == Limits():
            return []  # nothing to hold it to: no prelude
        name = secrets.token_hex(8)
        procs: list[str] = []
        try:
            for hierarchy in hierarchies():
                files = hierarchy.limit_files(self.limits)
                if not files:
                    continue
                folder = hierarchy.folder / FOLDER / name
                folder.mkdir()
                self.folders.append(folder)
                for file, value in files.items():
                    target = folder / file
                    if file not in OPTIONAL or target.exists():
                        target.write_text(str(value))
                procs.append(str(folder / "cgroup.procs"))
        except OSError:
            self.remove(wait=0)
            raise
        # With setpriv, $PPID is read after the signal is set: a worker gone before that is
        # seen by the check, one gone after it kills the prelude. Without, the check alone
        # leaves the moment between it and bubblewrap's own.
        prelude = PRELUDE.format(worker=os.getpid(), ulimits=self._ulimits())
        pdeath = [SETPRIV, "--pdeathsig", "KILL", "--"] if SETPRIV else []
        return [*pdeath, "/bin/sh", "-c", prelude, "toolcore-limits", *procs, "--"]

    def _ulimits(self) -> str:
        how = enforced(self.limits)
        text = ""
        if how["fileSize"] == "rlimit":
            text += f"ulimit -f {max(1, self.limits.file_size // 512)} || exit 125; "
        if how["memory"] == "rlimit":
            text += f"ulimit -v {max(1, self.limits.memory // 1024)} || exit 125; "
        return text

    def remove(self, wait: float = REMOVE_SECONDS) -> None:
        """Remove the cgroups, waiting up to ``wait`` s for the last processes to leave."""
        deadline = time.monotonic() + wait
        for folder in self.folders:
            while True:
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() >= deadline:
                        logger.warning("sandbox: the cgroup %s is still in use; left", folder)
                        break
                    time.sleep(0.005)
        self.folders = []


def sweep() -> int:
    """Remove the empty command cgroups that workers which died left (older than a minute:
    a live worker's command joins its own at once); how many."""
    removed = 0
    for folder in _leftovers():
        with contextlib.suppress(OSError):
            folder.rmdir()
            removed += 1
    return removed


def _leftovers() -> Iterator[Path]:
    now = time.time()
    for hierarchy in hierarchies():
        with contextlib.suppress(OSError):
            for child in (hierarchy.folder / FOLDER).iterdir():
                with contextlib.suppress(OSError):
                    if child.is_dir() and now - child.stat().st_mtime > LEFTOVER_SECONDS:
                        yield child
