"""The command sandbox: what a process started for a tool may see and reach (docs/security.md,
"The command sandbox").

Every command Toolcore starts for a tool (a ``bash`` call in the foreground or background, a
launch) runs in a bubblewrap sandbox (``bwrap``, Debian's ``bubblewrap``) when
``TOOLCORE_SANDBOX=bwrap``, the default:

* the whole system **read-only** (``--ro-bind / /``), a fresh ``/dev`` and a private ``/tmp``;
* its **workspace** the one writable place (bound read-write over the rest);
* **hidden** (an empty tmpfs over each folder, ``/dev/null`` over each file): ``DATA_DIR`` (the
  assets, captures and the SQLite database), the workspace root (every other workspace), the
  checkout, the SQLite database's folder, ``/run`` (the Unix sockets of PostgreSQL, Redis and
  the other local services) and every path of ``TOOLCORE_SANDBOX_HIDE``; the workspace is
  bound again after them, so a hidden folder that holds it hides everything but it;
* its own PID namespace and ``/proc`` (it sees none of the server's processes, and every
  process it started ends when it ends), its own IPC and host name namespaces, no capability;
* **no network** (a network namespace of its own with only loopback, on which nothing listens)
  unless ``TOOLCORE_SANDBOX_NETWORK=on``, with which it shares the host's network (and sees the
  host's ``/etc/resolv.conf`` target when that lies in ``/run``);
* ``--die-with-parent``: a worker that dies takes its commands with it;
* **resource limits** (processes, memory, file size: ``tools/sandbox_limits.py``), set by a
  prelude that runs before bubblewrap and ``exec``s it.

This module is the policy (which paths, which options) and the check that bubblewrap works
here; the runtime's process capture (``tools/runtime/capture.py``) puts ``Sandbox.argv()`` in
front of the command and keeps the process group semantics (docs/execution.md). It sits with
the tool declarations, below the durable core, so ``/readyz`` and the pages can say whether
commands are sandboxed without importing the runtime.

``TOOLCORE_SANDBOX=off`` runs commands as before: as the server's OS user, seeing what it sees.
It is an explicit choice, logged at every worker start. With ``bwrap`` and no usable
bubblewrap, a worker refuses to start unless ``DEBUG`` is on (``make run``), where it starts
unsandboxed and says so on the pages, in the admin and at ``/readyz``.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .sandbox_limits import Limits
from .sandbox_limits import configured as configured_limits
from .sandbox_limits import describe as describe_limits
from .sandbox_limits import enforced as enforced_limits
from .sandbox_limits import sweep as sweep_limits

logger = logging.getLogger(__name__)

BWRAP = "bwrap"
# What the probe and every sandbox share: if these work, a sandbox can be made here.
NAMESPACES = (
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--die-with-parent",
    "--cap-drop",
    "ALL",
)
PROBE_SECONDS = 10.0
# System folders hidden from every command: local services' Unix sockets live there.
SYSTEM_HIDDEN = (Path("/run"), Path("/var/run"))
RESOLV_CONF = Path("/etc/resolv.conf")


@dataclass(frozen=True)
class Sandbox:
    """One command's sandbox: its writable workspace, the paths hidden from it, its network."""

    workspace: Path
    hide: tuple[Path, ...] = ()
    network: bool = False
    bwrap: str = BWRAP
    limits: Limits = Limits()

    def argv(self, command: Sequence[str], *, cwd: Path | None = None) -> list[str]:
        """``command`` (an argv) as bubblewrap runs it in this sandbox, in ``cwd`` (default
        the workspace)."""
        workspace = Path(os.path.realpath(self.workspace))
        args = [self.bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        args += ["--tmpfs", "/tmp"]
        inside: list[Path] = []
        outside: list[Path] = []
        for path in _hidden(self.hide):
            if path == workspace:
                continue  # never the workspace itself
            if _is_below(path, workspace):
                inside.append(path)  # inside the workspace: hidden after its bind
            elif not any(folder in path.parents for folder in outside):
                # (one inside a folder hidden already needs no mount of its own: one less for
                # every command); a folder holding the workspace is bound again below
                outside.append(path)
                args += _hiding(path)
        if self.network and _is_below(Path(os.path.realpath(RESOLV_CONF)), Path("/run")):
            real = os.path.realpath(RESOLV_CONF)
            args += ["--ro-bind", real, real]
        args += ["--bind", str(workspace), str(workspace)]
        for path in inside:
            args += _hiding(path)
        args += [*NAMESPACES]
        if not self.network:
            args.append("--unshare-net")
        args += ["--chdir", str(cwd or workspace), "--", *command]
        return args


def _is_below(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or inside it."""
    return path == folder or folder in path.parents


def _hidden(paths: Iterable[Path]) -> list[Path]:
    """The paths to hide, real and existing, each once, parents first (``/`` is never one)."""
    found: set[Path] = set()
    for raw in paths:
        real = Path(os.path.realpath(raw))
        if real != Path("/") and real.exists():
            found.add(real)
    return sorted(found, key=lambda p: len(p.parts))


def _hiding(path: Path) -> list[str]:
    if path.is_dir():
        return ["--tmpfs", str(path)]
    return ["--ro-bind", "/dev/null", str(path)]


# --- the settings -------------------------------------------------------------------------------


def sandbox_mode() -> str:
    """``bwrap`` or ``off`` (``TOOLCORE_SANDBOX``)."""
    from django.conf import settings

    return settings.TOOLCORE_SANDBOX


def hidden_paths() -> tuple[Path, ...]:
    """Every path a command may not see, by the settings (see the module)."""
    from django.conf import settings

    paths: list[Path] = [
        Path(settings.DATA_DIR),
        Path(settings.TOOLCORE_WORKSPACE_ROOT),
        Path(settings.BASE_DIR),
        *SYSTEM_HIDDEN,
    ]
    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("sqlite3") and str(database.get("NAME", "")).startswith("/"):
        paths.append(Path(database["NAME"]).parent)
    paths += settings.TOOLCORE_SANDBOX_HIDE
    return tuple(paths)


def sandbox_for(workspace: Path) -> Sandbox | None:
    """The sandbox of a command working in ``workspace``; None when commands run unsandboxed
    (``off``, or ``DEBUG`` on without a usable bubblewrap)."""
    from django.conf import settings

    if sandbox_mode() == "off" or sandbox_problem() is not None:
        return None
    return Sandbox(
        workspace=Path(workspace),
        hide=hidden_paths(),
        network=settings.TOOLCORE_SANDBOX_NETWORK,
        bwrap=shutil.which(BWRAP) or BWRAP,  # found by the worker's PATH, not the command's
        limits=configured_limits(),
    )


# --- the check ----------------------------------------------------------------------------------


@functools.cache
def bwrap_problem(bwrap: str = BWRAP) -> str | None:
    """Why bubblewrap cannot make a sandbox on this machine, or None when it can: a small
    sandbox with every namespace the real ones use runs ``true`` (once per process)."""
    found = shutil.which(bwrap)
    if found is None:
        return f"{bwrap} is not installed (Debian's package bubblewrap)"
    probe = [found, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", *NAMESPACES]
    probe += ["--unshare-net", "--", "/bin/true"]
    try:
        done = subprocess.run(
            probe, capture_output=True, text=True, timeout=PROBE_SECONDS, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{bwrap} could not run: {exc}"
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return f"{bwrap} cannot make a sandbox here: {detail[:200]}"
    return None


def sandbox_problem() -> str | None:
    """Why commands would run unsandboxed although ``TOOLCORE_SANDBOX=bwrap``; None when they
    run sandboxed or the sandbox is off by choice."""
    if sandbox_mode() == "off":
        return None
    return bwrap_problem()


def sandbox_state() -> str:
    """What the pages, the admin and ``/readyz`` say: ``bwrap`` (commands are sandboxed),
    ``off`` (by choice) or ``unavailable`` (``DEBUG`` on, no usable bubblewrap)."""
    if sandbox_mode() == "off":
        return "off"
    return "unavailable" if sandbox_problem() is not None else "bwrap"


def sandbox_report() -> dict[str, object]:
    """``/readyz``'s ``sandbox``: ``{"on": true, "limits": …}`` (each limit and how it is
    enforced on this host: ``tools/sandbox_limits.py``), or ``{"on": false, "why": …}``."""
    state = sandbox_state()
    if state == "bwrap":
        limits = configured_limits()
        how = enforced_limits(limits)
        return {
            "on": True,
            "limits": {
                name: {"max": value or None, "by": how[name]}
                for name, value in limits.by_name().items()
            },
        }
    if state == "off":
        return {"on": False, "why": "TOOLCORE_SANDBOX=off"}
    return {"on": False, "why": f"{sandbox_problem()} (DEBUG is on: commands run unsandboxed)"}


def sandbox_require() -> None:
    """At every worker start: refuse to start without a usable sandbox (unless ``DEBUG``), and
    log a sandbox that is off or unavailable. Raises ``SystemExit`` with one line naming the
    setting."""
    from django.conf import settings

    if sandbox_mode() == "off":
        logger.warning(
            "TOOLCORE_SANDBOX=off: commands run unsandboxed, as the server's OS user, and see "
            "everything it sees"
        )
        return
    problem = sandbox_problem()
    if problem is None:
        swept = sweep_limits()
        logger.info(
            "sandbox: bubblewrap; limits of each command: %s%s",
            describe_limits(),
            f" ({swept} empty cgroups of earlier workers removed)" if swept else "",
        )
        return
    if not settings.DEBUG:
        raise SystemExit(
            f"TOOLCORE_SANDBOX: {problem}; install it, or set TOOLCORE_SANDBOX=off to run "
            "commands unsandboxed"
        )
    logger.warning(
        "TOOLCORE_SANDBOX=bwrap, but %s: with DEBUG on, commands run unsandboxed", problem
    )
