"""Path confinement for the path tools (``read``, ``grep``, ``find``, ``ls``).

A path argument names something inside the conversation's **workspace**, or inside the
conversation's own **managed files** (``DATA_DIR/conversations/<this conversation>/``, readable
by absolute path so the model can follow the path a summary names). Anything else is refused
with a ``ToolError`` that names the refused path (cut to ``PATH_QUOTE_BYTES``).

* The workspace itself is checked at every use (``workspace_ready``, ``tools/workspaces.py``):
  a workspace that is, or has become, a symlink (or below a folder that has) is refused with
  ``Workspace refused: … resolves outside the workspace root``, and confinement is built on
  the checked real path, never on a fresh resolution of the workspace.
* A relative path resolves against the workspace; an absolute one is taken as is. Either way
  the path is resolved with every symlink followed (``os.path.realpath``) before it is checked,
  so ``../x``, ``/etc/passwd`` and a symlink in the workspace pointing outside are all refused.
  A NUL byte, a symlink loop and a path that cannot be resolved are refused too.
* Files are opened by their resolved path with ``O_NOFOLLOW`` (the last component may not have
  become a symlink since), and the opened descriptor's own path (``/proc/self/fd/N``) is checked
  again, so a directory swapped for a symlink between the check and the open is caught.
  Tree walks (``walk.py``) descend with ``openat(dir_fd, name, O_NOFOLLOW | O_DIRECTORY)``: they
  never pass through a symlinked directory, and a symlinked file found in the tree is read only
  when its target resolves inside (otherwise it is skipped and counted).

Remaining risk, accepted: where ``/proc`` is missing the re-check after opening falls back to
comparing the opened file's identity with the path's (no protection against a concurrent swap).
A directory moved out of the workspace while a walk holds it open is still read to its end.
Both need a concurrent writer, that is a program run by ``bash``, and programs are not confined
at all: they run as the server's OS user (the operator note in the README). Confinement here
keeps the path tools themselves from reading outside; isolation of programs is the OS user's.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from projections.units import path_text
from tools.workspaces import (
    PATH_QUOTE_BYTES,
    PathRefused,
    quoted,
    real_path,
    workspace_checked,
    workspace_parts,
)

from .base import CallContext, ToolError

__all__ = [
    "OPEN_FLAGS",
    "PATH_QUOTE_BYTES",
    "WORKSPACE_MODE",
    "Confinement",
    "NotADirectory",
    "file_kind",
    "link_target",
    "quoted",
    "refusal",
    "resolve_path",
    "shown_below",
    "workspace_ready",
]

WORKSPACE_MODE = 0o700
OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PROC_FD = "/proc/self/fd"


class NotADirectory(ToolError):
    """A path named as a directory (``ls``, ``find``, a walk's root) is something else."""


def refusal(exc: PathRefused) -> ToolError:
    """The ``ToolError`` of a refusal met below the runtime (the workspace, a path)."""
    return ToolError(exc.message, field=exc.field)


def workspace_ready(ctx: CallContext) -> Path:
    """The conversation's workspace, checked now (``tools/workspaces.py``: no symlink on the
    way below the workspace root) and created on first use, mode 0o700: its real path.

    Missing folders are made one at a time, each opened with ``O_NOFOLLOW`` from the one
    above, so a folder swapped for a symlink is never created through nor entered; the path is
    checked again once it exists. ``ToolError`` says what is wrong (``Workspace refused: …``).
    """
    try:
        root, parts = workspace_parts(ctx.workspace, owner_id=ctx.owner_id)
        _make_folders(root, parts)
        return workspace_checked(ctx.workspace, owner_id=ctx.owner_id)
    except PathRefused as exc:
        raise refusal(exc) from None


def _make_folders(root: str, parts: list[str]) -> None:
    try:
        os.makedirs(root, mode=WORKSPACE_MODE, exist_ok=True)
        fd = os.open(root, _DIR_FLAGS & ~os.O_NOFOLLOW)  # the root may be the operator's link
    except OSError as exc:
        raise ToolError(
            f"The conversation's workspace cannot be created ({exc.strerror})."
        ) from None
    try:
        for name in parts:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, WORKSPACE_MODE, dir_fd=fd)
            try:
                below = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                    # A symlink where a folder of the way should be (O_NOFOLLOW refuses it
                    # as not a directory) is refused as such; else it is a file.
                    workspace_checked(os.path.join(root, *parts))
                    raise ToolError(
                        "The conversation's workspace exists but is not a directory."
                    ) from None
                raise ToolError(
                    f"The conversation's workspace cannot be created ({exc.strerror})."
                ) from None
            os.close(fd)
            fd = below
    except OSError as exc:
        raise ToolError(
            f"The conversation's workspace cannot be created ({exc.strerror})."
        ) from None
    finally:
        os.close(fd)


def _is_within(path: str, root: str) -> bool:
    return path == root or path.startswith(root if root.endswith(os.sep) else root + os.sep)


@dataclass(frozen=True)
class Confinement:
    """Where the path tools may read: the workspace and the managed files, both real paths."""

    workspace: str
    managed: str

    @classmethod
    def of(cls, *, workspace: Path, managed_root: Path) -> Confinement:
        return cls(os.path.realpath(workspace), os.path.realpath(managed_root))

    @classmethod
    def ready(cls, ctx: CallContext) -> Confinement:
        """The confinement of a call: its workspace checked (and created) now, as
        ``workspace_ready`` does, and its managed files."""
        return cls(str(workspace_ready(ctx)), os.path.realpath(ctx.managed_root))

    def contains(self, real: str) -> bool:
        """Whether the resolved path ``real`` lies inside the workspace or the managed files."""
        return _is_within(real, self.workspace) or _is_within(real, self.managed)

    def resolve(self, raw: str | None, *, default: str = ".") -> Path:
        """The resolved path ``raw`` names; ``ToolError`` naming it when it leaves both roots."""
        text = default if raw is None else raw
        if "\x00" in text:
            raise ToolError("Path refused: it contains a NUL byte.", field="path")
        if not text:
            raise ToolError("Path refused: it is empty.", field="path")
        joined = text if os.path.isabs(text) else os.path.join(self.workspace, text)
        real = _realpath(joined, shown=text)
        if not self.contains(real):
            raise ToolError(
                f"Path refused: {quoted(text)} resolves outside the workspace "
                f"({quoted(self.workspace)}); the path tools read only inside it and the "
                "conversation's own files.",
                field="path",
            )
        return Path(real)

    def shown(self, real: str) -> str:
        """How a result names a resolved path: relative to the workspace when inside it (what
        ``read`` takes back), else absolute (the managed files). Line breaks are escaped so one
        entry stays one line."""
        if real == self.workspace:
            text = "."
        elif _is_within(real, self.workspace):
            text = os.path.relpath(real, self.workspace)
        else:
            text = real
        return path_text(text).replace("\n", "\\n").replace("\r", "\\r")

    def check_opened(self, fd: int, real: str) -> None:
        """Refuse a descriptor that, once open, is not what was checked (a swap in between)."""
        try:
            opened = os.readlink(f"{_PROC_FD}/{fd}")
        except OSError:  # no /proc: compare identities instead (see the module docstring)
            try:
                here, there = os.fstat(fd), os.stat(real, follow_symlinks=False)
            except OSError:
                raise ToolError(f"Path refused: {quoted(real)} changed while opened.") from None
            if (here.st_dev, here.st_ino) != (there.st_dev, there.st_ino):
                raise ToolError(f"Path refused: {quoted(real)} changed while opened.") from None
            return
        opened = opened.removesuffix(" (deleted)")
        if not self.contains(opened):
            raise ToolError(
                f"Path refused: {quoted(real)} moved outside the workspace while opened.",
                field="path",
            )

    def open(self, real: Path | str, *, directory: bool = False) -> int:
        """A read-only descriptor of the resolved path ``real``, checked again once open.

        ``ToolError`` says what is wrong (missing, a symlink loop, not readable). Non-blocking,
        so a FIFO in the workspace never hangs the call; callers check the file type.
        """
        flags = OPEN_FLAGS | (os.O_DIRECTORY if directory else 0)
        shown = self.shown(os.fspath(real))
        try:
            fd = os.open(real, flags)
        except FileNotFoundError:
            raise ToolError(f"Not found: {quoted(shown)}.", field="path") from None
        except NotADirectoryError:
            raise NotADirectory(f"Not a directory: {quoted(shown)}.", field="path") from None
        except PermissionError:
            raise ToolError(f"Permission denied: {quoted(shown)}.", field="path") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                # O_NOFOLLOW: the checked path is a symlink now (a loop, or swapped meanwhile).
                raise ToolError(
                    f"Path refused: {quoted(shown)} is a symlink that did not resolve (a loop, "
                    "or it changed after the check).",
                    field="path",
                ) from None
            raise ToolError(f"Cannot open {quoted(shown)}: {exc.strerror}.", field="path") from None
        try:
            self.check_opened(fd, os.fspath(real))
        except BaseException:
            os.close(fd)
            raise
        return fd


def _realpath(path: str, *, shown: str) -> str:
    """``path`` with every symlink followed (``tools/workspaces.py`` ``real_path``); a loop or a
    path that cannot be resolved is a ``ToolError`` naming ``shown``."""
    try:
        return real_path(path, shown=shown)
    except PathRefused as exc:
        raise refusal(exc) from None


def link_target(path: str) -> str | None:
    """The resolved target of a symlink found in a walk, or None when it cannot be resolved
    (a loop): such a link is skipped like one leading outside."""
    try:
        return real_path(path, shown=path)
    except PathRefused:
        return None


def resolve_path(
    raw: str | None, *, workspace: Path, managed_root: Path, default: str = "."
) -> Path:
    """The resolved path of a path argument, inside the workspace or the managed files.

    A relative ``raw`` resolves against ``workspace``; ``None`` means ``default``. Symlinks are
    followed before the check; ``ToolError`` (field ``path``) names what was refused.
    """
    return Confinement.of(workspace=workspace, managed_root=managed_root).resolve(
        raw, default=default
    )


def shown_below(shown_root: str, relative: str) -> str:
    """How a result names ``relative`` (``/``-joined) below a root shown as ``shown_root``."""
    below = path_text(relative).replace("\n", "\\n").replace("\r", "\\r")
    if shown_root == ".":
        return below
    return f"{shown_root.rstrip('/')}/{below}"


def file_kind(mode: int) -> str:
    """``file``, ``directory`` or ``other`` (a FIFO, a socket, a device) of a ``st_mode``."""
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    return "other"
