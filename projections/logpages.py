"""Log paging: a text file read by lines, one page at a time (docs/subsystems/api.md, "Log pages").

Django-free and the standard library only, so the API views of assets, async runs and
launches can all call :func:`read_page` with plain arguments.

Lines follow docs/architecture.md ("Conventions"): a text with k ``\\n`` has k lines when it
ends with ``\\n``, else k + 1; the empty text has 0 lines; ``\\r\\n`` is one break whose ``\\r``
is not part of the line; a lone ``\\r`` stays in its line. Lines leave decoded as UTF-8 with
replacement and U+0000 replaced by U+FFFD. Both budgets count that decoded text, the text that
leaves: a page holds at most ``PAGE_MAX_BYTES`` of UTF-8 in its lines, and a line whose decoded
UTF-8 passes ``LINE_MAX_BYTES`` (invalid bytes grow threefold as U+FFFD) keeps its longest prefix
of at most ``LINE_KEEP_BYTES`` that ends on a whole character, plus ``…`` (so ≤ 64 KiB in all).
Only the head of such a line is read from disk, never the whole of a 10 MiB line.

Paging seeks. The index of a file is the array of the offsets just past each ``\\n`` (the start
of every line but the first), built in one streaming pass of 1 MiB chunks and then kept:

* with ``index_dir``, in a sidecar file ``<sha256 of the absolute path>.lines``: a header
  (bytes covered, count, mtime, inode, digest of the covered tail) then 8-byte little-endian
  offsets. It is read by seeking too: a page costs the header and the ≤ 501 offsets it needs.
* without, in a bounded in-process LRU keyed by the absolute path.

Either way the stored size, mtime, inode and tail digest decide what to do on the next call:
use as is, extend from the covered size (a file that grew: an async run still writing), or
rebuild (a file replaced, shrunk or rewritten). Validating in the header instead of naming the
sidecar by size and mtime lets a growing file extend its one sidecar instead of leaving one
per size behind.

A process capture builds the sidecar while it writes the file (:class:`LineIndexWriter`), so
even the first page of a capture, running or finished, seeks instead of scanning.
"""

from __future__ import annotations

import hashlib
import os
import struct
import sys
import threading
import zlib
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO

try:  # Advisory locks between web processes sharing a sidecar; POSIX only.
    import fcntl
except ImportError:  # pragma: no cover - not a deployment target
    fcntl = None  # type: ignore[assignment]

DEFAULT_LIMIT = 100
MAX_LIMIT = 500
PAGE_MAX_BYTES = 512 * 1024
LINE_MAX_BYTES = 65536
LINE_KEEP_BYTES = 65533
ELLIPSIS = "\u2026"

INDEX_CHUNK_BYTES = 1024 * 1024
# A line longer than this on disk is read only this far: its decoded text is then surely longer
# than LINE_MAX_BYTES (decoding never shrinks), and the 4 extra bytes keep the kept prefix clear
# of a multi-byte sequence cut by the read.
LINE_READ_BYTES = LINE_MAX_BYTES + 4
TAIL_CHECK_BYTES = 64
CACHE_MAX_FILES = 64
CACHE_MAX_OFFSETS = 4 * 1024 * 1024  # 32 MiB of offsets in the in-process LRU

_HEADER = struct.Struct("<8sQQqQQ16sI4x")
_MAGIC = b"TCLNIDX1"
_SWAP = sys.byteorder != "little"


class PageParamError(ValueError):
    """A paging parameter out of range; ``field`` names it so the API answers 422."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


def read_page(
    path: str | os.PathLike[str],
    *,
    offset: int | None = None,
    limit: int = DEFAULT_LIMIT,
    status: str | None = None,
    truncated: bool = False,
    index_dir: str | os.PathLike[str] | None = None,
) -> dict:
    """One page of ``path``'s lines, reading only the bytes of those lines (once indexed).

    ``offset`` is the 0-based index of the first line; without it the page holds the last
    ``limit`` lines. The page stops early rather than pass ``PAGE_MAX_BYTES`` of UTF-8 (its
    first line always goes in); ``nextOffset`` is then the first line not returned, and null
    once the page reaches the end (an offset at or past the end answers an empty page with a
    null ``nextOffset``). ``path`` is null when the page holds every line of the file.
    """
    _check_params(offset, limit)
    abspath = os.path.abspath(os.fspath(path))
    with _open_log(abspath) as log, _index_view(log, abspath, index_dir) as view:
        first, lines, stop = _page(log, view, offset, limit)
    return page_answer(
        first,
        lines,
        stop,
        view.total,
        limit=limit,
        status=status,
        truncated=truncated,
        path=abspath,
    )


def _page(log: BinaryIO, view: _View, offset: int | None, limit: int) -> tuple[int, list[str], int]:
    """The page's first line, its lines and the first line after it (``offset`` None: the last
    ``limit`` lines)."""
    first = max(0, view.total - limit) if offset is None else offset
    lines, stop = _page_lines(log, view, first, min(first + limit, view.total))
    return first, lines, stop


def page_answer(
    first: int,
    lines: list[str],
    stop: int,
    total: int,
    *,
    limit: int,
    status: str | None,
    truncated: bool,
    path: str,
) -> dict:
    """The fields of a page (local or read by ranges): ``path`` is null when the page holds
    every line, ``nextOffset`` null once the page reaches the end."""
    return {
        "lines": lines,
        "offset": first,
        "limit": limit,
        "totalLines": total,
        "nextOffset": stop if stop < total else None,
        "status": status,
        "path": None if len(lines) == total else path,
        "truncated": bool(truncated),
    }


def _open_log(abspath: str) -> BinaryIO:
    """The one place a log is opened (a test seam to count the bytes paging reads)."""
    return open(abspath, "rb")


def clear_index_cache() -> None:
    """Forget every in-process index (the sidecars stay)."""
    with _CACHE_LOCK:
        _CACHE.clear()


def _check_params(offset: int | None, limit: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise PageParamError(f"limit must be an integer from 1 to {MAX_LIMIT}", field="limit")
    if offset is not None and (
        isinstance(offset, bool) or not isinstance(offset, int) or offset < 0
    ):
        raise PageParamError("offset must be an integer ≥ 0", field="offset")


# --- lines ------------------------------------------------------------------------------------


def _page_lines(log: BinaryIO, view: _View, first: int, stop: int) -> tuple[list[str], int]:
    """Lines ``first``…``stop - 1`` within the page budget, and the index of the first not taken."""
    if first >= stop:
        return [], first
    count, covered = view.count, view.covered
    lo = first - 1 if first > 0 else 0
    ends = view.ends(lo, min(stop, count))
    start = ends[0] if first > 0 else 0
    log.seek(start)
    lines: list[str] = []
    used = 0
    for i in range(first, stop):
        end = ends[i - lo] if i < count else covered
        text, size = _read_line(log, end - start, terminated=i < count)
        if lines and used + size > PAGE_MAX_BYTES:
            return lines, i
        lines.append(text)
        used += size
        if end - start > LINE_READ_BYTES:  # only its head was read
            log.seek(end)
        start = end
    return lines, stop


def _read_line(log: BinaryIO, length: int, *, terminated: bool) -> tuple[str, int]:
    """The line of ``length`` bytes at the current position, decoded and capped, and its size."""
    if length > LINE_READ_BYTES:
        raw = log.read(LINE_READ_BYTES)
    else:
        raw = log.read(length)
        if terminated and raw.endswith(b"\n"):
            raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
    text = raw.decode("utf-8", "replace").replace("\x00", "\ufffd")
    data = text.encode("utf-8")
    if len(data) <= LINE_MAX_BYTES:
        return text, len(data)
    keep = LINE_KEEP_BYTES
    while data[keep] & 0xC0 == 0x80:  # never keep part of a multi-byte sequence
        keep -= 1
    return data[:keep].decode("utf-8") + ELLIPSIS, keep + len(ELLIPSIS.encode("utf-8"))


# --- index: scanning ----------------------------------------------------------------------------


def _scan_newlines(log: BinaryIO, start: int, stop: int) -> Iterator[array]:
    """Offsets just past each ``\\n`` in ``[start, stop)``, one array per 1 MiB chunk."""
    log.seek(start)
    pos = start
    while pos < stop:
        chunk = log.read(min(INDEX_CHUNK_BYTES, stop - pos))
        if not chunk:
            raise OSError(f"{log.name}: shrank while indexed")
        found = array("Q")
        _add_newlines(found, chunk, pos)
        pos += len(chunk)
        yield found


def _add_newlines(found: array, chunk: bytes, pos: int) -> None:
    """Append to ``found`` the offsets just past each ``\\n`` of ``chunk``, which starts at ``pos``."""
    if chunk.count(b"\n"):
        find, append = chunk.find, found.append
        i = find(b"\n")
        while i >= 0:
            append(pos + i + 1)
            i = find(b"\n", i + 1)


def _tail_digest(log: BinaryIO, covered: int) -> bytes:
    """Digest of the last bytes indexed: what must not have changed for an extension."""
    start = max(0, covered - TAIL_CHECK_BYTES)
    log.seek(start)
    return hashlib.blake2b(log.read(covered - start), digest_size=16).digest()


def _decide(stored: _Stamp | None, log: BinaryIO, st: os.stat_result) -> str:
    """``"fresh"``, ``"extend"`` or ``"rebuild"`` for an index stamped ``stored``."""
    if stored is None or (stored.ino, stored.dev) != (st.st_ino, st.st_dev):
        return "rebuild"
    if st.st_size == stored.covered:
        return "fresh" if st.st_mtime_ns == stored.mtime_ns else "rebuild"
    if st.st_size > stored.covered and _tail_digest(log, stored.covered) == stored.tail:
        return "extend"
    return "rebuild"


@dataclass(frozen=True, slots=True)
class _Stamp:
    """What an index covers: ``covered`` bytes of the file with this identity and tail."""

    covered: int
    mtime_ns: int
    ino: int
    dev: int
    tail: bytes

    @classmethod
    def of(cls, log: BinaryIO, st: os.stat_result, covered: int) -> _Stamp:
        return cls(covered, st.st_mtime_ns, st.st_ino, st.st_dev, _tail_digest(log, covered))


class _View:
    """A consistent index of the file's first ``covered`` bytes: ``count`` breaks."""

    def __init__(
        self, covered: int, count: int, read_ends: Callable[[int, int], Sequence[int]]
    ) -> None:
        self.covered, self.count, self._read_ends = covered, count, read_ends
        last_end = read_ends(count - 1, count)[0] if count else 0
        # The final line counts even without its "\n".
        self.total = count + (1 if covered > last_end else 0)

    def ends(self, lo: int, hi: int) -> Sequence[int]:
        """Offsets ``lo``…``hi - 1`` of the index."""
        return self._read_ends(lo, hi) if hi > lo else ()


# --- index: in-process LRU --------------------------------------------------------------------


class _MemoryIndex:
    __slots__ = ("stamp", "ends", "lock")

    def __init__(self, stamp: _Stamp | None, ends: array) -> None:
        self.stamp, self.ends, self.lock = stamp, ends, threading.Lock()


_CACHE: OrderedDict[str, _MemoryIndex] = OrderedDict()
_CACHE_LOCK = threading.Lock()


@contextmanager
def _index_view(
    log: BinaryIO, abspath: str, index_dir: str | os.PathLike[str] | None
) -> Iterator[_View]:
    if index_dir is not None:
        with _sidecar_view(log, abspath, os.fspath(index_dir)) as view:
            yield view
        return
    with _CACHE_LOCK:
        entry = _CACHE.get(abspath) or _MemoryIndex(None, array("Q"))
    with entry.lock:
        st = os.fstat(log.fileno())
        decision = _decide(entry.stamp, log, st)
        if decision == "rebuild":
            entry = _MemoryIndex(None, array("Q"))
        if decision != "fresh":
            start = entry.stamp.covered if entry.stamp else 0
            added = array("Q")
            for found in _scan_newlines(log, start, st.st_size):
                added.extend(found)
            # Only appends, and only once the scan succeeded: a view taken earlier keeps
            # reading its own prefix, and a failed scan leaves the entry as it was.
            entry.ends.extend(added)
            entry.stamp = _Stamp.of(log, st, st.st_size)
        view = _View(entry.stamp.covered, len(entry.ends), lambda lo, hi, a=entry.ends: a[lo:hi])
    with _CACHE_LOCK:
        _CACHE[abspath] = entry
        _CACHE.move_to_end(abspath)
        held = sum(len(e.ends) for e in _CACHE.values())
        while len(_CACHE) > 1 and (len(_CACHE) > CACHE_MAX_FILES or held > CACHE_MAX_OFFSETS):
            _, old = _CACHE.popitem(last=False)
            held -= len(old.ends)
    yield view


# --- index: sidecar file ----------------------------------------------------------------------


def sidecar_path(path: str | os.PathLike[str], index_dir: str | os.PathLike[str]) -> str:
    """Where the index of ``path`` is kept in ``index_dir``."""
    key = hashlib.sha256(os.fsencode(os.path.abspath(os.fspath(path)))).hexdigest()
    return os.path.join(os.fspath(index_dir), f"{key[:40]}.lines")


@contextmanager
def _sidecar_view(log: BinaryIO, abspath: str, index_dir: str) -> Iterator[_View]:
    """A view of the sidecar, held under an advisory lock (shared when fresh) while in use."""
    os.makedirs(index_dir, exist_ok=True)
    fd = os.open(sidecar_path(abspath, index_dir), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _lock(fd, fcntl.LOCK_SH if fcntl else 0)
        stored, count = _read_header(fd)
        st = os.fstat(log.fileno())
        if _decide(stored, log, st) != "fresh":
            # Not atomic (flock drops the shared lock first): decide again once exclusive.
            _lock(fd, fcntl.LOCK_EX if fcntl else 0)
            stored, count = _read_header(fd)
            st = os.fstat(log.fileno())
            decision = _decide(stored, log, st)
            if decision == "rebuild":
                os.pwrite(fd, bytes(_HEADER.size), 0)  # a crash from here leaves it invalid
                stored, count = None, 0
            if decision != "fresh":
                count = _sidecar_extend(fd, log, stored, count, st)
                stored = _Stamp.of(log, st, st.st_size)
                _write_header(fd, stored, count)

        def read_ends(lo: int, hi: int) -> array:
            found = array("Q", os.pread(fd, (hi - lo) * 8, _HEADER.size + lo * 8))
            if _SWAP:
                found.byteswap()
            return found

        yield _View(stored.covered, count, read_ends)
    finally:
        os.close(fd)  # releases the lock


def _sidecar_extend(
    fd: int, log: BinaryIO, stored: _Stamp | None, count: int, st: os.stat_result
) -> int:
    """Append the offsets of ``[stored.covered, size)`` to the sidecar; the new count."""
    pos = _HEADER.size + count * 8
    os.ftruncate(fd, pos)  # drop what a crashed extension may have left
    for found in _scan_newlines(log, stored.covered if stored else 0, st.st_size):
        if _SWAP:
            found.byteswap()
        _pwrite_all(fd, found.tobytes(), pos)
        pos += len(found) * 8
        count += len(found)
    return count


def _read_header(fd: int) -> tuple[_Stamp | None, int]:
    raw = os.pread(fd, _HEADER.size, 0)
    if len(raw) != _HEADER.size:
        return None, 0
    magic, covered, count, mtime_ns, ino, dev, tail, crc = _HEADER.unpack(raw)
    if magic != _MAGIC or crc != zlib.crc32(raw[: _HEADER.size - 8]):
        return None, 0
    if os.fstat(fd).st_size < _HEADER.size + count * 8:
        return None, 0
    return _Stamp(covered, mtime_ns, ino, dev, tail), count


def _write_header(fd: int, stamp: _Stamp, count: int) -> None:
    fields = (_MAGIC, stamp.covered, count, stamp.mtime_ns, stamp.ino, stamp.dev, stamp.tail)
    body = _HEADER.pack(*fields, 0)[: _HEADER.size - 8]
    os.pwrite(fd, _HEADER.pack(*fields, zlib.crc32(body)), 0)


def _lock(fd: int, mode: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, mode)


# --- index: written while the file is written ---------------------------------------------------

# A writer publishes its offsets at least this often, so a page of a growing file scans at most
# this many bytes past the sidecar's header (and extends the sidecar with them).
WRITER_FLUSH_BYTES = INDEX_CHUNK_BYTES
# ... and holds at most this many offsets in memory (512 KiB) between two flushes.
WRITER_FLUSH_OFFSETS = 64 * 1024


class LineIndexWriter:
    """The sidecar index of a file, kept by the one process that appends to the file.

    Feed it the bytes appended to ``path``, in order, each time *after* they are written. Their
    offsets go to the sidecar that :func:`read_page` reads with the same ``index_dir``: appended
    after the ones already there, then the header rewritten (bytes covered, count, the file's
    mtime and inode, the digest of the covered tail), under the sidecar's exclusive lock, once
    every ``WRITER_FLUSH_BYTES`` fed and on :meth:`flush` and :meth:`close`. A page of the file
    while it grows scans at most the bytes fed since the last flush (and extends the sidecar
    with them, which the writer accepts: offsets depend only on the bytes); a page of the
    finished file finds the index fresh and reads no byte of the file to serve it but its lines.

    Memory stays flat: offsets wait in memory only until the next flush. The file must be empty
    when the writer starts. A sidecar found in a state this writer did not leave (rebuilt by a
    reader, damaged, naming another file) or a file that does not hold exactly the bytes fed
    stops the writer: readers then scan as they do for any file, slower and never wrong.
    """

    def __init__(self, path: str | os.PathLike[str], index_dir: str | os.PathLike[str]) -> None:
        self.path = os.path.abspath(os.fspath(path))
        st = os.stat(self.path)
        if st.st_size:
            raise ValueError(f"{self.path} is not empty: a writer indexes a file from its start")
        self._ident = (st.st_ino, st.st_dev)
        self._covered = self._flushed_covered = self._flushed_count = 0
        self._pending = array("Q")
        self._tail = b""
        os.makedirs(index_dir, exist_ok=True)
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        self._fd: int | None = os.open(sidecar_path(self.path, index_dir), flags, 0o644)
        try:
            _lock(self._fd, fcntl.LOCK_EX if fcntl else 0)
            os.ftruncate(self._fd, 0)  # whatever an earlier file of this path left
            _write_header(self._fd, self._stamp(st), 0)
        except BaseException:
            self._stop()
            raise
        _lock(self._fd, fcntl.LOCK_UN if fcntl else 0)

    @property
    def active(self) -> bool:
        """Whether the sidecar is still kept by this writer."""
        return self._fd is not None

    def feed(self, data: bytes) -> None:
        """Index ``data``, the bytes just appended to the file (already written)."""
        if self._fd is None or not data:
            return
        _add_newlines(self._pending, data, self._covered)
        self._covered += len(data)
        self._tail = (self._tail + data[-TAIL_CHECK_BYTES:])[-TAIL_CHECK_BYTES:]
        if (
            self._covered - self._flushed_covered >= WRITER_FLUSH_BYTES
            or len(self._pending) >= WRITER_FLUSH_OFFSETS
        ):
            self.flush()

    def flush(self) -> None:
        """Publish every byte fed so far: the offsets, then the header that counts them."""
        if self._fd is None or self._covered == self._flushed_covered:
            return
        st = os.stat(self.path)
        if (st.st_ino, st.st_dev) != self._ident or st.st_size != self._covered:
            self._stop()  # not the bytes we were fed: leave the file to readers
            return
        fd = self._fd
        try:
            _lock(fd, fcntl.LOCK_EX if fcntl else 0)
            stored, _ = _read_header(fd)
            if (
                stored is None
                or (stored.ino, stored.dev) != self._ident
                or stored.covered < self._flushed_covered
            ):
                self._stop()
                return
            if stored.covered <= self._covered:  # else a reader already indexed further
                found = self._pending
                if _SWAP:
                    found.byteswap()
                _pwrite_all(fd, found.tobytes(), _HEADER.size + self._flushed_count * 8)
                _write_header(fd, self._stamp(st), self._flushed_count + len(self._pending))
        except OSError:
            self._stop()  # a header is written last: what is on disk stays consistent
            raise
        finally:
            if self._fd is not None:
                _lock(fd, fcntl.LOCK_UN if fcntl else 0)
        self._flushed_count += len(self._pending)
        self._flushed_covered = self._covered
        self._pending = array("Q")

    def close(self) -> None:
        """Flush and let go of the sidecar (idempotent)."""
        try:
            self.flush()
        finally:
            self._stop()

    def _stamp(self, st: os.stat_result) -> _Stamp:
        tail = hashlib.blake2b(self._tail, digest_size=16).digest()
        return _Stamp(self._covered, st.st_mtime_ns, st.st_ino, st.st_dev, tail)

    def _stop(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            self._pending = array("Q")
            os.close(fd)  # releases a lock still held


def _pwrite_all(fd: int, data: bytes, pos: int) -> None:
    view = memoryview(data)
    while view:  # a regular file rarely writes short, but it may
        written = os.pwrite(fd, view, pos)
        view, pos = view[written:], pos + written
