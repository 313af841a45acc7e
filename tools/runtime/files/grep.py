"""``grep``: the lines matching a Python regex, as ``path:line:text`` items.

* ``pattern`` is a Python regex (``re`` syntax), compiled once with the ``regex`` library in
  its ``re``-compatible mode (``VERSION0``), with ``MULTILINE`` (``^`` and ``$`` anchor at each
  line) and ``IGNORECASE`` when ``ignore_case``. ``regex`` rather than ``re`` because it lets go
  of the GIL while it matches and takes a timeout: a pathological pattern (``(a|aa)+b`` on a long
  line) can neither freeze the worker's other calls nor run past the time limit. A line matches when the regex finds a match within
  it; one item per matching line. Files are decoded as UTF-8 with replacement. A line is what
  lies between two ``\n``: the ``\r`` of a ``\r\n`` break is part of it for the regex (so
  ``x$`` misses ``x\r\n``, as with GNU grep) and is dropped from the item.
* ``path`` (default the workspace) is a directory, walked as ``walk.py`` says (streamed, sorted
  per directory, symlinks leading outside skipped, ``.git`` not entered), or one file.
* ``glob`` keeps the files whose name (a glob without ``/``) or path below ``path`` (with ``/``)
  matches (``globs.py``). It does not apply to a file named by ``path`` itself.
* Binary files (a NUL byte in the first ``BINARY_SNIFF_BYTES``) are skipped and counted.
* Files are read in ``CHUNK_BYTES`` pieces cut after a line break, never whole; a line longer
  than ``LONG_LINE_BYTES`` is searched in pieces of that size (a match across a piece boundary
  of such a line can be missed). The regex runs over a whole piece and each hit is confirmed
  within its own line, so a match never spans lines; lookarounds and ``\\Z`` that test for a line
  break see the piece, not the line.
* Every match found goes into ``result.json`` as it is found (``listing.py``: up to 16 MiB of
  matches, then ``truncated`` and a count of the rest); the model is shown what its
  ``search_matches`` profile fits, with the path of ``result.json``. The search **stops** at the
  end of the tree or at ``TIME_LIMIT_SECONDS``, which its closing note then says
  (``(Stopped at the 30 s time limit …)``). The limit is checked between files and between
  pieces, and bounds each search itself.

Items name files relative to the workspace (what ``read`` takes), absolute for the
conversation's managed files; a matching line keeps at most ``MATCH_TEXT_MAX_BYTES`` bytes.
``result.json``: ``{pattern, path, glob, ignoreCase, matches: [{path, line, text}], truncated,
notStored, matchCount, stopped, filesSearched, skipped: {binary, outside, unreadable},
timeLimitSeconds}``; ``matchCount`` counts every match found, stored or not.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

import regex

from projections.units import clean_text, cut_text

from ..base import CallContext, HandlerResult, ToolError
from ..paths import OPEN_FLAGS, Confinement, file_kind, quoted, shown_below
from . import walk
from .blocking import in_thread
from .globs import NamePattern
from .listing import Listing

TIME_LIMIT_SECONDS = 30.0
FIRST_READ_BYTES = 64 * 1024
CHUNK_BYTES = 1024 * 1024
LONG_LINE_BYTES = 4 * 1024 * 1024
BINARY_SNIFF_BYTES = 8192
MATCH_TEXT_MAX_BYTES = 300
ITEM_MAX_BYTES = 1000


async def grep(ctx: CallContext) -> HandlerResult:
    """Every matching line of the files under ``path``, within the time limit."""
    arguments = ctx.arguments
    pattern = arguments.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise ToolError("Missing required argument 'pattern'.", field="pattern")
    flags = regex.VERSION0 | regex.MULTILINE
    flags |= regex.IGNORECASE if arguments.get("ignore_case") else 0
    try:
        compiled = regex.compile(pattern, flags)
    except (regex.error, re.error, RecursionError, OverflowError, ValueError) as exc:
        detail = getattr(exc, "msg", None) or type(exc).__name__
        raise ToolError(
            cut_text(f"Invalid argument 'pattern': not a valid regular expression ({detail})."),
            field="pattern",
        ) from None
    glob = arguments.get("glob") or None
    names = NamePattern.compile(glob) if isinstance(glob, str) else None
    return await in_thread(
        lambda stop: _Search(ctx, compiled, names, stop).run(arguments.get("path"))
    )


@dataclass
class _Search:
    ctx: CallContext
    regex: regex.Pattern
    names: NamePattern | None
    stop_event: threading.Event
    listing: Listing | None = None
    files: int = 0
    binary: int = 0
    unreadable: int = 0
    stopped: str | None = None
    deadline: float = 0.0
    # The file being searched: (shown root, relative path, shown path once computed).
    _where: tuple[str, str | None, str | None] = ("", None, None)

    def should_stop(self) -> bool:
        if self.stopped is None:
            if self.stop_event.is_set():
                self.stopped = "cancelled"
            elif time.monotonic() > self.deadline:
                self.stopped = "time"
        return self.stopped is not None

    def run(self, raw: str | None) -> HandlerResult:
        self.deadline = time.monotonic() + TIME_LIMIT_SECONDS
        confinement = Confinement.ready(self.ctx)
        root = str(confinement.resolve(raw))
        shown_root = confinement.shown(root)
        head = {
            "pattern": self.regex.pattern,
            "path": root,
            "glob": self.names.text if self.names is not None else None,
            "ignoreCase": bool(self.regex.flags & regex.IGNORECASE),
        }
        with Listing(self.ctx, head=head, key="matches") as listing:
            self.listing = listing
            fd = confinement.open(root)
            try:
                kind = file_kind(os.fstat(fd).st_mode)
                if kind == "file":
                    self._file(fd, shown_root, None)
            except OSError as exc:
                raise ToolError(f"Cannot read {quoted(shown_root)}: {exc.strerror}.") from None
            finally:
                os.close(fd)
            tree = walk.Walk(confinement, root, self.should_stop) if kind == "directory" else None
            if tree is not None:
                self._tree(tree, shown_root)
            elif kind != "file":
                raise ToolError(f"Not a file or directory: {quoted(shown_root)}.", field="path")
            if self.stopped == "cancelled":  # nobody reads the answer: no result.json is left
                raise ToolError("Stopped: the call was cancelled.")
            return self._answer(listing, tree.stats if tree is not None else walk.WalkStats())

    def _tree(self, tree: walk.Walk, shown_root: str) -> None:
        names, confinement = self.names, tree.confinement
        for entry in tree:
            if entry.kind not in (walk.FILE, walk.LINK_FILE):
                continue
            if names is not None and not names.matches(entry.relative, entry.name):
                continue
            try:
                if entry.kind == walk.FILE:
                    fd = os.open(entry.name, OPEN_FLAGS, dir_fd=entry.dir_fd)
                else:
                    fd = confinement.open(entry.real)
            except (OSError, ToolError):
                self.unreadable += 1
                continue
            try:
                self._file(fd, shown_root, entry.relative)
            except OSError:
                self.unreadable += 1
            finally:
                os.close(fd)
            if self.stopped is not None:
                return

    def _file(self, fd: int, shown_root: str, relative: str | None) -> None:
        """Search one open file, in pieces cut after a line break. It is shown as
        ``relative`` below ``shown_root`` (or as ``shown_root`` itself), named only at its
        first match."""
        data = os.read(fd, FIRST_READ_BYTES)
        if b"\x00" in data[:BINARY_SNIFF_BYTES]:
            self.binary += 1
            return
        self.files += 1
        self._where = (shown_root, relative, None)
        if len(data) < FIRST_READ_BYTES:  # the whole file (a short read is the end)
            self._piece(data, 1)
            return
        pending, line, end = data, 1, False
        while True:
            if not end:
                more = os.read(fd, CHUNK_BYTES)
                end = not more
                pending += more
            if end:
                piece, pending = pending, b""
            else:
                cut = pending.rfind(b"\n") + 1
                if cut == 0 and len(pending) < LONG_LINE_BYTES:
                    continue
                cut = cut or len(pending)
                piece, pending = pending[:cut], pending[cut:]
            if piece and not self._piece(piece, line):
                return
            line += piece.count(b"\n")
            if end or self.should_stop():
                return

    def _shown(self) -> str:
        shown_root, relative, shown = self._where
        if shown is None:
            shown = shown_root if relative is None else shown_below(shown_root, relative)
            self._where = (shown_root, relative, shown)
        return shown

    def _piece(self, data: bytes, first_line: int) -> bool:
        """Add the matching lines of ``data`` (whole lines); False once the time is up."""
        text = data.decode("utf-8", "replace")
        size = len(text)

        def search(text: str, pos: int, endpos: int | None = None) -> Any:
            # Released GIL, and never past the time limit.
            left = max(0.0, self.deadline - time.monotonic())
            return self.regex.search(text, pos, endpos, concurrent=True, timeout=left)

        pos, line, counted = 0, first_line, 0
        while pos <= size:
            try:
                found = search(text, pos)
            except TimeoutError:
                self.stopped = "time"
                return False
            if found is None:
                return True
            start = found.start()
            if start == size and (size == 0 or text[-1] == "\n"):
                return True  # the empty place after the last line break is no line
            begin = text.rfind("\n", pos, start) + 1 or pos
            end = text.find("\n", start)
            end = size if end < 0 else end
            line += text.count("\n", counted, begin)
            counted = begin
            try:
                within = found.end() <= end or search(text, begin, end) is not None
            except TimeoutError:
                self.stopped = "time"
                return False
            if within:
                self._add(self._shown(), line, text[begin:end])
            pos = end + 1
        return True

    def _add(self, shown: str, line: int, text: str) -> None:
        text = cut_text(clean_text(text.removesuffix("\r")), MATCH_TEXT_MAX_BYTES)
        item = cut_text(f"{shown}:{line}:{text}", ITEM_MAX_BYTES)
        assert self.listing is not None
        self.listing.add({"path": shown, "line": line, "text": text}, item)

    def _answer(self, listing: Listing, stats: walk.WalkStats) -> HandlerResult:
        count = listing.found
        plural = "match" if count == 1 else "matches"
        note = None
        if self.stopped == "time":
            note = (
                f"(Stopped at the {TIME_LIMIT_SECONDS:g} s time limit after searching "
                f"{self.files} files; {count} {plural} so far. Narrow the path or glob to "
                "search the rest.)"
            )
        empty = f"(No matches in {self.files} {'file' if self.files == 1 else 'files'}"
        skipped = [
            f"{n} {what}"
            for n, what in (
                (self.binary, "binary"),
                (stats.skipped_outside, "leading outside the workspace"),
                (self.unreadable + stats.skipped_unreadable, "unreadable"),
            )
            if n
        ]
        empty += f"; skipped: {', '.join(skipped)}.)" if skipped else ".)"
        tail = {
            "matchCount": count,
            "stopped": self.stopped,
            "filesSearched": self.files,
            "skipped": {
                "binary": self.binary,
                "outside": stats.skipped_outside,
                "unreadable": self.unreadable + stats.skipped_unreadable,
            },
            "timeLimitSeconds": TIME_LIMIT_SECONDS,
        }
        return listing.answer(tail, note=note, empty=note or empty)
