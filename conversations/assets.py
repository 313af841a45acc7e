"""Reading assets: owner checked by the caller, SHA-256 checked here before a byte is served.

A verified ``(size, mtime, ctime, inode)`` is remembered per asset, so a range read does not
rehash a file that has not changed since it was verified. The change time is part of it because
the modification time is not proof: anyone who can write the file can set its mtime back
(``touch -r``, ``os.utime``), while the kernel moves the ctime on every write and every such
reset; the inode catches a file replaced by another (``mv``). A file changed within the last
``RACY_SECONDS`` is not remembered (git's "racily clean" rule): a write in the same clock tick
as the check would leave both times as they were.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from pathlib import Path

from .errors import AssetCorrupt
from .models import Asset
from .storage import absolute_from_data, sha256_file

_VERIFIED: OrderedDict[str, tuple[int, int, int, int]] = OrderedDict()
_VERIFIED_MAX = 4096
_LOCK = threading.Lock()
RACY_SECONDS = 2  # timestamps are kept at the kernel's tick; a newer change is hashed again


def asset_verify(asset: Asset, *, force: bool = False) -> Path:
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


_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


class RangeNotSatisfiable(Exception):
    pass


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``(start, end)`` inclusive for a single ``bytes=`` range; None to serve the whole file.

    Several ranges or another unit are ignored (the whole file is served, as RFC 9110 allows).
    """
    if not header:
        return None
    match = _RANGE.match(header.strip())
    if match is None:
        return None
    first, last = match.groups()
    if first == "" and last == "":
        raise RangeNotSatisfiable
    if first == "":
        length = int(last)
        if length == 0 or size == 0:
            raise RangeNotSatisfiable
        return max(0, size - length), size - 1
    start = int(first)
    end = size - 1 if last == "" else min(int(last), size - 1)
    if start >= size or (last != "" and int(last) < start):
        raise RangeNotSatisfiable
    return start, end


def iter_file(path: Path, start: int, length: int, chunk: int = 64 * 1024):
    with open(path, "rb") as handle:
        handle.seek(start)
        left = length
        while left > 0:
            data = handle.read(min(chunk, left))
            if not data:
                break
            left -= len(data)
            yield data
