"""Reading assets: owner checked by the caller, SHA-256 checked by the asset store before a
byte is served (``storage/local.py`` ``asset_verify`` remembers a verified file's stat,
``storage/s3.py`` ``S3Store.verify`` a verified object's ETag), and the one ``Range`` header
the asset endpoint honours.
"""

from __future__ import annotations

import re
from typing import Any

from .storage import asset_store


def asset_verify(asset: Any, *, force: bool = False) -> Any:
    """A handle to read the asset by (its absolute path in ``DATA_DIR``, or its object), once
    its bytes match the recorded size and SHA-256.

    Raises ``AssetCorrupt`` (409) for a missing, resized or altered file.
    """
    return asset_store().verify(asset, force=force)


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
