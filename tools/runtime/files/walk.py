"""The confined tree walk of ``grep`` and ``find``: streamed, never listed whole first.

Depth first, one directory's listing at a time, names sorted within a directory (so answers are
stable). The walk holds one open directory descriptor per level and descends with
``openat(parent_fd, name, O_NOFOLLOW | O_DIRECTORY)``, so it can never pass through a
symlinked directory, whatever is renamed meanwhile.

* A symlink is yielded only when its target resolves inside the confinement (``paths.py``),
  with its resolved path; one leading outside is skipped and counted (``skipped_outside``),
  never followed. A symlinked directory is yielded (``find`` lists it) but not descended: its
  target, inside the workspace, is walked where it lives, and loops cannot arise.
* Version-control metadata (``.git``, ``.hg``, ``.svn``) is yielded but not descended: it is
  large and never what a search of the sources is after. Naming such a directory as the walk's
  root searches it.
* An unreadable directory is skipped and counted (``skipped_unreadable``).
* ``should_stop()`` is asked before each entry; once it answers true the walk ends.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ..base import ToolError
from ..paths import Confinement, link_target, quoted

NOT_DESCENDED = frozenset({".git", ".hg", ".svn"})
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK

FILE, DIRECTORY, LINK_FILE, LINK_DIRECTORY, OTHER = "file", "dir", "link-file", "link-dir", "other"


@dataclass
class WalkStats:
    directories: int = 0
    entries: int = 0
    skipped_outside: int = 0
    skipped_unreadable: int = 0

    def as_result(self) -> dict[str, int]:
        return {
            "directories": self.directories,
            "entries": self.entries,
            "skippedOutside": self.skipped_outside,
            "skippedUnreadable": self.skipped_unreadable,
        }


@dataclass(frozen=True, slots=True)
class Entry:
    """One thing found: ``relative`` to the walk's root (``/``-joined), the descriptor of the
    directory holding it (valid until the walk moves on), and for a symlink its target."""

    relative: str
    name: str
    kind: str
    dir_fd: int
    parent: str  # the real path of the directory holding it
    target: str | None = None  # a symlink's resolved target

    @property
    def real(self) -> str:
        """The entry's real path: a symlink's target, else its place in the tree."""
        return self.target if self.target is not None else os.path.join(self.parent, self.name)


@dataclass
class _Level:
    fd: int
    relative: str  # "" for the root, else "a/b/"
    real: str
    names: Iterator[tuple[str, str]]


@dataclass
class Walk:
    """Walk the directory ``root`` (a resolved path inside ``confinement``)."""

    confinement: Confinement
    root: str
    should_stop: Callable[[], bool]
    stats: WalkStats = field(default_factory=WalkStats)

    def __iter__(self) -> Iterator[Entry]:
        root_fd = self.confinement.open(self.root, directory=True)
        try:
            levels = [_Level(root_fd, "", self.root, self._listing(root_fd))]
        except OSError as exc:
            os.close(root_fd)
            shown = quoted(self.confinement.shown(self.root))
            raise ToolError(f"Cannot list {shown}: {exc.strerror}.", field="path") from None
        self.stats.directories += 1
        try:
            while levels:
                level = levels[-1]
                for name, kind in level.names:
                    if self.should_stop():
                        return
                    self.stats.entries += 1
                    if kind == "link":
                        entry = self._link(level, name)
                        if entry is not None:
                            yield entry
                        continue
                    yield Entry(level.relative + name, name, kind, level.fd, level.real)
                    if kind == DIRECTORY and name not in NOT_DESCENDED:
                        child = self._descend(level, name)
                        if child is not None:
                            levels.append(child)
                            break
                else:
                    os.close(levels.pop().fd)
        finally:
            for level in levels:
                os.close(level.fd)

    def _descend(self, level: _Level, name: str) -> _Level | None:
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=level.fd)
        except OSError:  # gone, replaced by a symlink, or unreadable
            self.stats.skipped_unreadable += 1
            return None
        try:
            names = self._listing(fd)
        except OSError:
            os.close(fd)
            self.stats.skipped_unreadable += 1
            return None
        self.stats.directories += 1
        return _Level(fd, f"{level.relative}{name}/", os.path.join(level.real, name), names)

    def _link(self, level: _Level, name: str) -> Entry | None:
        target = link_target(os.path.join(level.real, name))
        if target is None or not self.confinement.contains(target):
            self.stats.skipped_outside += 1
            return None
        try:
            is_dir = os.path.isdir(target)
        except OSError:
            is_dir = False
        kind = LINK_DIRECTORY if is_dir else LINK_FILE
        return Entry(level.relative + name, name, kind, level.fd, level.real, target)

    @staticmethod
    def _listing(fd: int) -> Iterator[tuple[str, str]]:
        """One directory's names and kinds, sorted; kinds from the directory entry itself
        (no ``stat`` per file where the file system records the type)."""
        found = []
        with os.scandir(fd) as scan:
            for entry in scan:
                if entry.is_symlink():
                    kind = "link"
                elif entry.is_dir(follow_symlinks=False):
                    kind = DIRECTORY
                elif entry.is_file(follow_symlinks=False):
                    kind = FILE
                else:
                    kind = OTHER
                found.append((entry.name, kind))
        found.sort()
        return iter(found)
