"""``read``: one page of a text file's lines, numbered as the ``source_text`` profile expects.

The text is the page's lines as ``N\\ttext`` (1-based ``N``), joined by ``\\n``, then, when the
file has lines past the page, ``Range: lines S-E of T. Continue with offset=E+1.``: the line
the ``continuation_aware`` strategy reads back when it has to cut the page further
(docs/projections.md). Lines follow docs/architecture.md ("Conventions"): ``\\r\\n`` is one
break whose ``\\r`` is dropped, a lone ``\\r`` stays, a last line without ``\\n`` counts. Bytes are
decoded as UTF-8 with replacement, U+0000 shown as U+FFFD; a line longer than
``LINE_MAX_BYTES`` keeps its longest prefix of at most ``LINE_MAX_BYTES - 3`` bytes plus ``…``
(only that head is held; the rest of the line is skipped in ``CHUNK_BYTES`` pieces).

Choices:

* **Streaming, no index.** The file is read forward from its start: lines before ``offset`` are
  skipped by counting ``\\n`` in 1 MiB chunks (C speed, nothing kept), the page is read line by
  line, and nothing past it is decoded. Workspace files change under the model's edits and are
  mostly small, so a kept line index (``projections.logpages``) would be rebuilt often and leave
  sidecars nobody removes; a page at offset N costs reading up to N, at ~1 GB/s.
* **The total ``T``.** After the page, the rest of the file is counted in the same chunked way
  when it is at most ``COUNT_MAX_BYTES``: ``T`` is then exact. Past that (a log of gigabytes)
  only the page is read, ``T`` stays unknown, and the Range line says so:
  ``Range: lines S-E; more follow in this SIZE file (not counted). Continue with offset=E+1.``.
  That line is not one the projection can re-cut by, so such a page is kept within the profile's
  inline budget by the tool itself and always reaches the model unchanged.
* **Binary files** (a NUL byte in the first ``BINARY_SNIFF_BYTES``) are not shown: the call
  completes with a one-line description (size, and a hint to inspect it with ``bash``) rather
  than failing, because the path was right and the model learns what the file is.
* **Refusals** (``ToolError``): a directory (use ``ls``), anything not a regular file, a path
  outside the confinement (``paths.py``), a missing file. An ``offset`` past the end completes
  with a text saying how many lines the file has.

``result.json`` holds what the page is, not the lines again (the text has them):
``{path, offset, limit, returnedLines, totalLines, nextOffset, size, cutLines, binary}``, with
``path`` absolute and ``totalLines`` ``null`` when not counted.
"""

from __future__ import annotations

import io
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from projections.result import PROFILES
from projections.units import clean_text, size_words, utf8_len, utf8_prefix

from ..base import CallContext, HandlerResult, ToolError
from ..paths import Confinement, file_kind, quoted
from .blocking import in_thread

DEFAULT_LIMIT = 200
MAX_LIMIT = 2000
LINE_MAX_BYTES = 2000
# A line longer than this on disk is read only this far; decoding never shrinks, so its text
# is surely past LINE_MAX_BYTES, and the 4 spare bytes keep the kept prefix clear of a
# multi-byte sequence cut by the read.
LINE_READ_BYTES = LINE_MAX_BYTES + 4
BINARY_SNIFF_BYTES = 8192
CHUNK_BYTES = 1024 * 1024  # skipping and counting lines
BUFFER_BYTES = 64 * 1024  # reading the page
COUNT_MAX_BYTES = 64 * 1024 * 1024
ELLIPSIS = "\u2026"
_PROFILE = PROFILES["source_text"]


@dataclass
class _Page:
    offset: int
    lines: list[str] = field(default_factory=list)
    cut: list[bool] = field(default_factory=list)  # per line: kept only its head

    @property
    def cut_lines(self) -> int:
        return sum(self.cut)

    @property
    def last(self) -> int:
        return self.offset + len(self.lines) - 1


async def read(ctx: CallContext) -> HandlerResult:
    """The page of ``path`` from line ``offset`` (default 1), ``limit`` lines (default 200)."""
    arguments = ctx.arguments
    offset = _integer(arguments.get("offset", 1), "offset", 1, None)
    limit = _integer(arguments.get("limit", DEFAULT_LIMIT), "limit", 1, MAX_LIMIT)
    path = arguments.get("path")
    if not isinstance(path, str):
        raise ToolError("Missing required argument 'path'.", field="path")
    return await in_thread(lambda stop: _read(ctx, path, offset, limit, stop))


def _integer(value: Any, name: str, low: int, high: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ToolError(f"Invalid argument '{name}': must be an integer ≥ {low}.", field=name)
    if high is not None and value > high:
        raise ToolError(f"Invalid argument '{name}': must be at most {high}.", field=name)
    return value


def _read(
    ctx: CallContext, raw: str, offset: int, limit: int, stop: threading.Event
) -> HandlerResult:
    confinement = Confinement.ready(ctx)
    real = confinement.resolve(raw)
    fd, size = _open_regular(confinement, real)
    result: dict[str, Any] = {
        "path": str(real),
        "offset": offset,
        "limit": limit,
        "returnedLines": 0,
        "totalLines": None,
        "nextOffset": None,
        "size": size,
        "cutLines": 0,
        "binary": False,
    }
    with open(fd, "rb", buffering=BUFFER_BYTES) as file:
        if b"\x00" in os.pread(fd, BINARY_SNIFF_BYTES, 0):
            result["binary"] = True
            text = (
                f"Binary file ({size_words(size)}): its first bytes hold NUL bytes, so it "
                "is not shown as text. Inspect it with bash (for example `file` or `xxd`)."
            )
            return HandlerResult(outcome="completed", result=result, text=text)
        skipped = _skip_lines(file, offset - 1, stop)
        if skipped < offset - 1 or not (page := _read_page(file, offset, limit)).lines:
            result["totalLines"] = skipped
            return HandlerResult(
                outcome="completed", result=result, text=_past_end(offset, skipped)
            )
        total = _count_rest(file, page.last, size, stop) if file.peek(1) else page.last
    text, page = _numbered(page, total, size)
    more = total is None or page.last < total
    result.update(
        returnedLines=len(page.lines),
        totalLines=total,
        nextOffset=page.last + 1 if more else None,
        cutLines=page.cut_lines,
    )
    return HandlerResult(outcome="completed", result=result, text=text)


def _open_regular(confinement: Confinement, real: Path) -> tuple[int, int]:
    """A descriptor of the regular file ``real`` and its size; ``ToolError`` for anything else."""
    fd = confinement.open(real)
    try:
        st = os.fstat(fd)
        kind = file_kind(st.st_mode)
        shown = quoted(confinement.shown(str(real)))
        if kind == "directory":
            raise ToolError(f"Not a file: {shown} is a directory; list it with ls.", field="path")
        if kind != "file":
            raise ToolError(f"Not a regular file: {shown}.", field="path")
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def _past_end(offset: int, total: int) -> str:
    if total == 0:
        return "The file is empty (0 lines)."
    lines = "1 line" if total == 1 else f"{total} lines"
    return f"No lines to show: offset {offset} is past the end of the file, which has {lines}."


def _skip_lines(file: io.BufferedReader, count: int, stop: threading.Event) -> int:
    """Move past ``count`` lines; the number skipped (the file's line count if it has fewer)."""
    skipped, tail = 0, b"\n"
    while skipped < count:
        if stop.is_set():
            raise ToolError("Stopped: the call was cancelled.")
        start = file.tell()
        chunk = file.read(CHUNK_BYTES)
        if not chunk:  # the end: a last line without "\n" counts too
            return skipped + (0 if tail == b"\n" else 1)
        breaks = chunk.count(b"\n")
        if skipped + breaks < count:
            skipped += breaks
            tail = chunk[-1:]
            continue
        at = -1
        for _ in range(count - skipped):
            at = chunk.find(b"\n", at + 1)
        file.seek(start + at + 1)
        return count
    return skipped


def _read_page(file: io.BufferedReader, offset: int, limit: int) -> _Page:
    page = _Page(offset)
    for _ in range(limit):
        raw = file.readline(LINE_READ_BYTES)
        if not raw:
            break
        if raw.endswith(b"\n"):
            raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
        elif len(raw) == LINE_READ_BYTES:  # a long line: only its head is kept
            _skip_rest_of_line(file)
        text = clean_text(raw.decode("utf-8", "replace"))
        data = text.encode("utf-8")
        cut = len(data) > LINE_MAX_BYTES
        if cut:
            text = utf8_prefix(data, LINE_MAX_BYTES - 3).decode("utf-8") + ELLIPSIS
        page.lines.append(text)
        page.cut.append(cut)
    return page


def _skip_rest_of_line(file: io.BufferedReader) -> None:
    while True:
        rest = file.readline(CHUNK_BYTES)
        if not rest or rest.endswith(b"\n"):
            return


def _count_rest(file: io.BufferedReader, last: int, size: int, stop: threading.Event) -> int | None:
    """``last`` plus the lines after the current position, or None when more than
    ``COUNT_MAX_BYTES`` would have to be read to know."""
    if size - file.tell() > COUNT_MAX_BYTES:
        return None
    breaks, read, tail = 0, 0, b""
    while chunk := file.read(CHUNK_BYTES):
        if stop.is_set():
            raise ToolError("Stopped: the call was cancelled.")
        breaks += chunk.count(b"\n")
        read += len(chunk)
        tail = chunk[-1:]
        if read > COUNT_MAX_BYTES:  # it grew meanwhile
            return None
    return last + breaks + (1 if tail and tail != b"\n" else 0)


def _numbered(page: _Page, total: int | None, size: int) -> tuple[str, _Page]:
    """The page as ``N\\ttext`` lines and its Range line (see the module docstring)."""
    numbered = [f"{page.offset + i}\t{line}" for i, line in enumerate(page.lines)]
    if total is not None:
        if page.last < total:
            numbered.append(
                f"Range: lines {page.offset}-{page.last} of {total}. "
                f"Continue with offset={page.last + 1}."
            )
        return "\n".join(numbered), page

    def range_line(last: int) -> str:
        return (
            f"Range: lines {page.offset}-{last}; more follow in this {size_words(size)} file "
            f"(not counted). Continue with offset={last + 1}."
        )

    # Not re-cut by the projection: keep the page within the profile's inline budget.
    room_lines = _PROFILE.inline_lines - 1
    room_bytes = _PROFILE.inline_bytes - utf8_len(range_line(page.offset + len(numbered))) - 1
    kept: list[str] = []
    for line in numbered[:room_lines]:
        cost = utf8_len(line) + (1 if kept else 0)
        if cost > room_bytes:
            break
        kept.append(line)
        room_bytes -= cost
    page.lines, page.cut = page.lines[: max(len(kept), 1)], page.cut[: max(len(kept), 1)]
    if not kept:  # a single line within LINE_MAX_BYTES always fits
        kept = numbered[:1]
    return "\n".join([*kept, range_line(page.last)]), page
