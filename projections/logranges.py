"""Log paging over ranged reads: a page of an immutable text kept elsewhere than in a local file
(an object in an S3-compatible store), seeking as ``logpages.py`` seeks in a file.

Django-free and the standard library only: the caller hands in two byte-range readers, one of
the text and one of its line index (the sidecar object kept beside it), and a writer of that
index. The index has ``logpages.py``'s sidecar format (header, then 8-byte little-endian
offsets), stamped with the text's size and the first 16 bytes of its SHA-256 in place of a
file's mtime, inode and tail: the text never changes (its digest is checked before any page),
so an index with the same stamp is the index of these bytes, whoever wrote it.

A page costs a few ranged reads whatever the size of the text: the index's header and the last
offset, the offsets of the page's lines, then the lines themselves (read ahead in growing
windows, so a page of short lines is one read). The index is built once, on the first page
of a text without one, in one streaming pass of 1 MiB reads.
"""

from __future__ import annotations

import contextlib
import threading
import zlib
from array import array
from collections import OrderedDict
from collections.abc import Callable

from .logpages import (
    _HEADER,
    _MAGIC,
    _SWAP,
    DEFAULT_LIMIT,
    INDEX_CHUNK_BYTES,
    _add_newlines,
    _check_params,
    _page,
    _View,
    page_answer,
)

RangeReader = Callable[[int, int], bytes]  # (start, length) -> those bytes (fewer at the end)
READ_AHEAD_BYTES = 64 * 1024  # the first read of a page's lines; each further one doubles
# What a stored index holds of a text, remembered per text (by its identity): its count and its
# last offset, so that a page after the first reads only its own offsets and lines (an index
# never changes for the same bytes).
_KNOWN: OrderedDict[bytes, tuple[int, int]] = OrderedDict()
_KNOWN_MAX = 4096
_KNOWN_LOCK = threading.Lock()


class RangedFile:
    """A read-only, seekable view of ``size`` bytes fetched by ``read_at``, in growing windows."""

    def __init__(self, read_at: RangeReader, size: int, name: str = "") -> None:
        self._read_at, self.size, self.name = read_at, size, name
        self._pos = self._start = 0
        self._buffer = b""
        self._window = READ_AHEAD_BYTES

    def seek(self, pos: int) -> int:
        self._pos = pos
        return pos

    def tell(self) -> int:
        return self._pos

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            n = self.size - self._pos
        n = max(0, min(n, self.size - self._pos))
        offset = self._pos - self._start
        if not (offset >= 0 and offset + n <= len(self._buffer)):
            want = min(max(n, self._window), self.size - self._pos)
            self._window = min(self._window * 2, 8 * INDEX_CHUNK_BYTES)
            self._buffer, self._start, offset = self._read_at(self._pos, want), self._pos, 0
        data = self._buffer[offset : offset + n]
        self._pos += len(data)
        return data


def _stamp_fields(size: int, identity: bytes) -> tuple:
    return (_MAGIC, size, 0, 0, 0, 0, identity[:16])


def index_build(read_at: RangeReader, size: int, identity: bytes) -> tuple[bytes, array]:
    """The sidecar bytes of a text (header then offsets) and its offsets, in one pass."""
    ends = array("Q")
    pos = 0
    while pos < size:
        chunk = read_at(pos, min(INDEX_CHUNK_BYTES, size - pos))
        if not chunk:
            raise OSError("the text ended before its recorded size")
        _add_newlines(ends, chunk, pos)
        pos += len(chunk)
    magic, covered, _, mtime, ino, dev, tail = _stamp_fields(size, identity)
    body = _HEADER.pack(magic, covered, len(ends), mtime, ino, dev, tail, 0)[: _HEADER.size - 8]
    header = _HEADER.pack(magic, covered, len(ends), mtime, ino, dev, tail, zlib.crc32(body))
    stored = array("Q", ends)
    if _SWAP:
        stored.byteswap()
    return header + stored.tobytes(), ends


def _index_count(header: bytes | None, size: int, identity: bytes) -> int | None:
    """The number of offsets of a stored index that matches the text, else None."""
    if header is None or len(header) != _HEADER.size:
        return None
    magic, covered, count, mtime, ino, dev, tail, crc = _HEADER.unpack(header)
    if magic != _MAGIC or crc != zlib.crc32(header[: _HEADER.size - 8]):
        return None
    if (covered, tail, mtime, ino, dev) != (size, identity[:16], 0, 0, 0):
        return None
    return count


class _IndexBroken(OSError):
    """A stored index shorter than its header says (damaged, or replaced meanwhile)."""


def _stored_view(key: bytes, size: int, identity: bytes, index_at: Callable) -> _View | None:
    """A view of the stored index of the text, or None when it has none that matches: the
    header read once per process and text (``_KNOWN``), then only the offsets a page needs."""
    with _KNOWN_LOCK:
        known = _KNOWN.get(key)
    count = known[0] if known else _index_count(index_at(0, _HEADER.size), size, identity)
    if count is None:
        return None
    seen: dict[int, int] = {}

    def read_ends(lo: int, hi: int) -> array:
        if known is not None and (lo, hi) == (count - 1, count):
            return array("Q", [known[1]])
        found = array("Q", index_at(_HEADER.size + lo * 8, (hi - lo) * 8) or b"")
        if _SWAP:
            found.byteswap()
        if len(found) != hi - lo or any(e > size for e in found[-1:]):
            raise _IndexBroken("the line index ended before its count")
        if hi == count:
            seen[count] = found[-1]
        return found

    view = _View(size, count, read_ends)
    if known is None and count:
        with _KNOWN_LOCK:
            _KNOWN[key] = (count, seen[count])
            while len(_KNOWN) > _KNOWN_MAX:
                _KNOWN.popitem(last=False)
    return view


def read_page_ranged(
    read_at: RangeReader,
    size: int,
    *,
    identity: bytes,
    index_at: Callable[[int, int], bytes | None],
    index_put: Callable[[bytes], None],
    name: str,
    offset: int | None = None,
    limit: int = DEFAULT_LIMIT,
    status: str | None = None,
    truncated: bool = False,
) -> dict:
    """``logpages.read_page`` of a text read by ranges: the same page, the same fields.

    ``identity``: the text's SHA-256 (its index is valid only for those bytes); ``index_at``
    reads a range of its stored index (None when there is none); ``index_put`` stores a new one
    (a failure there only means the next page builds it again); ``name`` is the page's
    ``path`` when the page does not hold every line.
    """
    _check_params(offset, limit)
    key = identity[:16] + size.to_bytes(8, "little")

    def built() -> _View:
        with _KNOWN_LOCK:
            _KNOWN.pop(key, None)
        data, ends = index_build(read_at, size, identity)
        with contextlib.suppress(OSError):  # served from memory now; built again next time
            index_put(data)
        return _View(size, len(ends), lambda lo, hi, a=ends: a[lo:hi])

    def page(view: _View) -> tuple[int, list[str], int]:
        return _page(RangedFile(read_at, size, name), view, offset, limit)  # type: ignore[arg-type]

    try:
        view = _stored_view(key, size, identity, index_at) or built()
        first, lines, stop = page(view)
    except _IndexBroken:  # damaged or cut short since it was read: not trusted, rebuilt
        view = built()
        first, lines, stop = page(view)
    return page_answer(
        first, lines, stop, view.total, limit=limit, status=status, truncated=truncated, path=name
    )
