"""Where tools work: each owner's workspace root and a conversation's workspace in it.

Beside the catalog and the permission port (which resolves path rules against the workspace),
below the durable core, which stores a conversation's workspace as a path relative to its
owner's root.

A workspace is checked **at every use**, not only when its conversation is made: a command can
rename it (or its owner's folder) and put a symlink in its place at any time. The rule: below
the real ``TOOLCORE_WORKSPACE_ROOT`` (the root itself may be a symlink the operator made), no
folder on the way to the workspace may be a symlink, so the workspace's real path is exactly
``realpath(root)/<owner id>/<workspace>`` normalised. Anything else is ``WorkspaceRefused``.
Folders that do not exist yet are fine: they are created, one by one and never through a
symlink, on first use (``tools/runtime/paths.py``).

Paths that cannot be resolved at all (a symlink loop, a component that vanished while it was
followed) are ``PathUnresolvable``: a clear refusal of the one call that named them, wherever
it is met (supervision, a handler, recovery), never a server error.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

from django.conf import settings

from projections.units import cut_text, path_text

# How much of a refused path a message quotes (UTF-8 bytes, "…" included).
PATH_QUOTE_BYTES = 200


def quoted(raw: str | os.PathLike[str]) -> str:
    """A path as an error message may quote it: cleaned text, at most ``PATH_QUOTE_BYTES``."""
    return cut_text(path_text(raw), PATH_QUOTE_BYTES)


class PathRefused(Exception):
    """A path that cannot be used by the call that named it; the message names it (bounded)
    and ``field`` the argument it came from, when it came from one."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class WorkspaceRefused(PathRefused):
    """The workspace is (or has become) a symlink, or a folder above it is, or it lies outside
    the workspace root."""


class PathUnresolvable(PathRefused):
    """A path that cannot be resolved: a symlink loop, or a component that vanished."""


def owner_workspace_root(owner_id: int | str) -> Path:
    """``TOOLCORE_WORKSPACE_ROOT/<owner id>``: everything of one owner's conversations."""
    return Path(settings.TOOLCORE_WORKSPACE_ROOT) / str(owner_id)


def conversation_workspace(conversation: Any) -> Path:
    """The conversation's workspace directory (its ``workspace`` below its owner's root)."""
    return owner_workspace_root(conversation.owner_id) / conversation.workspace


def workspace_parts(
    path: str | os.PathLike[str], *, owner_id: int | str | None = None
) -> tuple[str, list[str]]:
    """``(real root, folders below it)`` of a workspace path built below
    ``TOOLCORE_WORKSPACE_ROOT`` (``owner_workspace_root(...) / name``), normalised.

    ``WorkspaceRefused`` when the path does not lie below the root as written (``..`` climbing
    out, an absolute name), or, with ``owner_id``, below (or at) that owner's folder."""
    root = os.path.abspath(settings.TOOLCORE_WORKSPACE_ROOT)
    relative = os.path.relpath(os.path.abspath(path), root)
    parts = [] if relative == os.curdir else relative.split(os.sep)
    if parts[:1] == [os.pardir] or (owner_id is not None and parts[:1] != [str(owner_id)]):
        raise _refused(path, "it is not below your workspace root")
    return os.path.realpath(root), parts


def workspace_checked(path: str | os.PathLike[str], *, owner_id: int | str | None = None) -> Path:
    """The real path of the workspace ``path`` (built below ``TOOLCORE_WORKSPACE_ROOT``), checked
    now: ``WorkspaceRefused`` when a folder on the way below the root is a symlink or the path
    leaves the root (or, with ``owner_id``, that owner's folder). Reads only; missing folders
    are fine (nothing can be a symlink there)."""
    root, parts = workspace_parts(path, owner_id=owner_id)
    expected = os.path.join(root, *parts)
    try:
        real = os.path.realpath(expected)
    except (OSError, ValueError):  # a link that vanished while followed, a NUL byte
        raise _refused(path, "it cannot be resolved") from None
    if real != expected:
        raise _refused(path, "it, or a folder above it, is a symlink")
    return Path(expected)


def _refused(path: str | os.PathLike[str], why: str) -> WorkspaceRefused:
    return WorkspaceRefused(
        f"Workspace refused: {quoted(path)} resolves outside the workspace root ({why}); "
        "nothing was read or run."
    )


def real_path(path: str, *, shown: str) -> str:
    """``path`` with every symlink followed; ``PathUnresolvable`` naming ``shown`` when it runs
    into a symlink loop or cannot be resolved.

    ``realpath(strict=True)`` first: it raises on a loop instead of leaving the looping part
    (and any ``..`` after it) unresolved, as the lenient form does. A path that does not exist
    yet resolves leniently, which is exact for the missing part (no symlink can be there).
    """
    try:
        real = os.path.realpath(path, strict=True)
    except ValueError:  # a NUL byte
        raise PathUnresolvable(
            f"Path refused: {quoted(shown)} cannot be resolved.", field="path"
        ) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PathUnresolvable(
                f"Path refused: {quoted(shown)} runs into a symlink loop.", field="path"
            ) from None
        try:
            real = os.path.realpath(path)
        except OSError:  # a link that vanished between being seen and being read
            raise PathUnresolvable(
                f"Path refused: {quoted(shown)} cannot be resolved (it changed while it was "
                "followed).",
                field="path",
            ) from None
    if os.pardir in real.split(os.sep):  # left unresolved: never trusted
        raise PathUnresolvable(f"Path refused: {quoted(shown)} cannot be resolved.", field="path")
    return real


def path_subject(workspace: Path, raw: str) -> str:
    """The resolved path a path rule is matched against: ``raw`` against the checked
    workspace, symlinks followed. ``PathRefused`` (a refused workspace, an unresolvable path)
    when there is none."""
    base = workspace_checked(workspace)
    return real_path(os.path.join(base, raw), shown=raw)
