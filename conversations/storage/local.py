"""Managed files under ``DATA_DIR`` and workspaces under ``TOOLCORE_WORKSPACE_ROOT``; the local
asset store (:class:`LocalStore`, the default of ``base.py`` ``AssetStore``).

Layout (docs/subsystems/settlement.md): ``conversations/<cid>/tool-calls/<call id>/g<generation>/`` holds
one execution attempt. Files there are created exclusively: a file that exists is never
replaced, so a late writer of a lost attempt can never overwrite what a winner hashed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

from django.conf import settings

from projections.logpages import read_page
from tools.workspaces import WorkspaceRefused, owner_workspace_root, workspace_checked

from ..errors import AssetCorrupt, ValidationFailed

# A process's capture files in its attempt folder (kind of asset each), each capped at
# CAPTURE_MAX_BYTES: bytes past the cap are counted, not stored.
CAPTURE_FILES = (("stdout.txt", "stdout"), ("stderr.txt", "stderr"), ("output.txt", "output"))
CAPTURE_MAX_BYTES = 16 * 1024 * 1024
CAPTURE_MEDIA_TYPE = "text/plain; charset=utf-8"


def data_dir() -> Path:
    return Path(settings.DATA_DIR)


def conversation_dir(conversation_id: UUID | str) -> Path:
    return data_dir() / "conversations" / str(conversation_id)


def attempt_relative(conversation_id: UUID | str, call_id: UUID | str, generation: int) -> str:
    """The attempt folder's path under ``DATA_DIR``, as stored in ``Asset.path``."""
    return f"conversations/{conversation_id}/tool-calls/{call_id}/g{generation}"


def attempt_dir(conversation_id: UUID | str, call_id: UUID | str, generation: int) -> Path:
    return data_dir() / attempt_relative(conversation_id, call_id, generation)


def relative_to_data(path: Path) -> str:
    return str(path.relative_to(data_dir()))


def absolute_from_data(relative: str) -> Path:
    path = (data_dir() / relative).resolve()
    if not path.is_relative_to(data_dir().resolve()):
        raise ValueError("asset path outside DATA_DIR")
    return path


class FileExistsDifferent(Exception):
    """An attempt file already exists with other bytes: another writer got there first."""


def _make_folder(folder: str) -> None:
    """Create an attempt folder ``…/<call id>/g<generation>``: the call folder, then the
    attempt's (two ``mkdir``s, the common case), or the whole chain for a conversation's first
    files. Every ``mkdir`` is a journalled metadata write, so none is spent on a guess."""
    parent = os.path.dirname(folder)
    try:
        os.mkdir(parent)
    except FileExistsError:
        pass
    except FileNotFoundError:
        os.makedirs(parent, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder)


def _sync_folder(folder: str) -> None:
    """``fsync`` a folder, so the names created in it survive a power loss (on journalling file
    systems the same commit carries the folders just created above it)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_exclusive(path: Path, data: bytes) -> None:
    """Create ``path`` with ``data``, atomically, never replacing an existing file.

    Writes a private temporary file, flushes it to disk (``fdatasync``), hard-links it into
    place (``link`` fails when the name exists) and flushes the folder, so both the bytes and
    the name are durable before any transaction refers to them. An existing file with the same
    bytes is accepted (a retried settlement); other bytes raise ``FileExistsDifferent``.
    """
    folder = os.fspath(path.parent)
    _make_folder(folder)
    final = os.fspath(path)
    tmp = f"{folder}/.{path.name}.{uuid.uuid4().hex}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o640)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fdatasync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, final)
        except FileExistsError:
            if path.read_bytes() != data:
                raise FileExistsDifferent(final) from None
            return
        os.unlink(tmp)
        _sync_folder(folder)  # the new name is durable too, not only the bytes
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def copy_exclusive(source: Path, target: Path) -> None:
    """Make ``target`` a durable copy of ``source`` as it is now, unless ``target`` exists:
    then it is kept as it is (an earlier copy of the same source wins, so a retried caller
    hashes the bytes the first one copied).

    Copied to a private temporary file, flushed (``fdatasync``), hard-linked into place and the
    folder flushed, as :func:`write_exclusive` does. The source may still be growing (a process
    appending to it): the copy is the prefix that was there when it was read, and it never
    changes afterwards.
    """
    folder = os.fspath(target.parent)
    _make_folder(folder)
    if target.exists():
        return
    tmp = f"{folder}/.{target.name}.{uuid.uuid4().hex}.tmp"
    try:
        shutil.copyfile(source, tmp)  # copy_file_range / sendfile: no bytes through Python
        fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)
        with contextlib.suppress(FileExistsError):  # another copier linked first: keep it
            os.link(tmp, os.fspath(target))
            _sync_folder(folder)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def capture_found(folder: Path) -> list[tuple[Path, str, bool]]:
    """The capture files of an attempt folder as they are: ``(path, kind, truncated)`` for each
    of ``stdout.txt``, ``stderr.txt`` and ``output.txt`` that exists (a file at the cap may have
    lost bytes past it)."""
    found = []
    for name, kind in CAPTURE_FILES:
        path = folder / name
        with contextlib.suppress(FileNotFoundError):
            found.append((path, kind, path.stat().st_size >= CAPTURE_MAX_BYTES))
    return found


def capture_snapshot(folder: Path, into: str) -> list[tuple[Path, str, bool]]:
    """Fixed copies of the capture files of an attempt folder whose process may still be
    writing (a cancel of a running command, a worker that died), in ``folder/into/``: what was
    captured when they were read, as ``(path, kind, truncated)``. A copy made before (a retried
    settlement) is kept. The copies keep their digests whatever the process writes later
    (docs/decisions.md, "Settlement and files")."""
    snapshot = []
    for path, kind, _ in capture_found(folder):
        copy = folder / into / path.name
        try:
            copy_exclusive(path, copy)
        except FileNotFoundError:  # removed meanwhile (its conversation was deleted)
            continue
        snapshot.append((copy, kind, copy.stat().st_size >= CAPTURE_MAX_BYTES))
    return snapshot


def sha256_file(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def remove_conversation_files(conversation_id: UUID | str) -> None:
    shutil.rmtree(conversation_dir(conversation_id), ignore_errors=True)


def resolve_workspace(owner_id: int | str, workspace: str) -> Path:
    """The absolute workspace directory; refuses one that resolves outside the owner's root,
    or that is (or lies below) a symlink there: the check every use of it makes again
    (``tools/workspaces.py``)."""
    if not workspace or "\x00" in workspace or os.path.isabs(workspace):
        raise ValidationFailed(
            "The workspace must be a relative directory inside your workspace root.",
            field="workspace",
        )
    try:
        return workspace_checked(owner_workspace_root(owner_id) / workspace, owner_id=owner_id)
    except WorkspaceRefused:
        raise ValidationFailed(
            "The workspace resolves outside your workspace root.", field="workspace"
        ) from None


# --- the local asset store ----------------------------------------------------------------------
#
# Reading assets: SHA-256 checked before a byte is served. A verified ``(size, mtime, ctime,
# inode)`` is remembered per asset, so a range read does not rehash a file that has not changed
# since it was verified. The change time is part of it because the modification time is not
# proof: anyone who can write the file can set its mtime back (``touch -r``, ``os.utime``), while
# the kernel moves the ctime on every write and every such reset; the inode catches a file
# replaced by another (``mv``). A file changed within the last ``RACY_SECONDS`` is not
# remembered (git's "racily clean" rule): a write in the same clock tick as the check would
# leave both times as they were.

_VERIFIED: OrderedDict[str, tuple[int, int, int, int]] = OrderedDict()
_VERIFIED_MAX = 4096
_LOCK = threading.Lock()
RACY_SECONDS = 2  # timestamps are kept at the kernel's tick; a newer change is hashed again


def asset_verify(asset: Any, *, force: bool = False) -> Path:
    """The asset's absolute path once its bytes match the recorded size and SHA-256.

    Raises ``AssetCorrupt`` (409) for a missing, resized or altered file.
    """
    try:
        path = absolute_from_data(asset.path)
        stat = path.stat()
    except (OSError, ValueError) as exc:
        raise AssetCorrupt("The asset's file is missing.") from exc
    key = str(asset.pk)
    mark = (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino)
    with _LOCK:
        if not force and _VERIFIED.get(key) == mark:
            _VERIFIED.move_to_end(key)
            return path
    if stat.st_size != asset.size or sha256_file(path) != asset.sha256:
        with _LOCK:
            _VERIFIED.pop(key, None)
        raise AssetCorrupt("The asset's bytes do not match its SHA-256.")
    if time.time_ns() - stat.st_ctime_ns < RACY_SECONDS * 1_000_000_000:
        return path  # changed just now: a write in the same tick would keep this mark
    with _LOCK:
        _VERIFIED[key] = mark
        while len(_VERIFIED) > _VERIFIED_MAX:
            _VERIFIED.popitem(last=False)
    return path


def iter_file(path: Path, start: int, length: int, chunk: int = 64 * 1024) -> Iterator[bytes]:
    with open(path, "rb") as handle:
        handle.seek(start)
        left = length
        while left > 0:
            data = handle.read(min(chunk, left))
            if not data:
                break
            left -= len(data)
            yield data


def asset_fault(path: str, size: int, sha256: str, hashes: bool) -> str | None:
    """What is wrong with an asset's file under ``DATA_DIR`` (``check_integrity``), or None."""
    try:
        absolute = absolute_from_data(path)
        actual = absolute.stat().st_size
    except ValueError:
        return "its path leads outside DATA_DIR"
    except OSError as exc:
        return f"its file is missing ({exc.strerror})"
    if actual != size:
        return f"its file has {actual} bytes, {size} recorded"
    if hashes:
        try:
            digest = sha256_file(absolute)
        except OSError as exc:
            return f"its file cannot be read ({exc.strerror})"
        if digest != sha256:
            return f"its file's SHA-256 is {digest}, {sha256} recorded"
    return None


class LocalStore:
    """Assets are the attempt files in ``DATA_DIR`` themselves: settlement's files are already
    durable there (``write_exclusive``, ``copy_exclusive``), so ``upload`` does nothing and the
    default costs what it always cost."""

    name = "local"

    def upload(self, assets: Sequence[Any]) -> None:
        return None

    def verify(self, asset: Any, *, force: bool = False) -> Path:
        return asset_verify(asset, force=force)

    def stream(self, asset: Any, handle: Path, start: int, length: int) -> Iterator[bytes]:
        return iter_file(handle, start, length)

    def read_page(self, asset: Any, handle: Path, *, offset: int | None, limit: int) -> dict:
        return read_page(
            handle,
            offset=offset,
            limit=limit,
            status=None,
            truncated=asset.truncated,
            index_dir=data_dir() / "index",
        )

    def location(self, path: str) -> str:
        return str(absolute_from_data(path))

    def fault(self, path: str, size: int, sha256: str, *, hashes: bool) -> str | None:
        return asset_fault(path, size, sha256, hashes)

    def attempts(self) -> Iterator[Any]:
        return iter(())  # the attempt folders of DATA_DIR: conversations/orphans.py walks them

    def remove(self, location: str) -> None:
        shutil.rmtree(location, ignore_errors=True)

    def remove_conversation(self, conversation_id: UUID | str) -> None:
        remove_conversation_files(conversation_id)
