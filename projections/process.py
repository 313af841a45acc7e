"""Process results: the spec's process contract (``compact_diagnostic``, spec projections.md).

``project_process`` is the model text of a process result whose interleaved output is the file it
is handed: the output itself when it fits the ``process_diagnostics`` inline budget, otherwise a
summary of at most 16 lines and 4,000 UTF-8 bytes naming the file's absolute path.
``projections.result`` re-exports it (the module the model projection is exported from).

``project_process`` reads its file once, in ``CHUNK_BYTES`` chunks, keeping the line count, the
size, the first 2 lines, the last 11 lines and the last 11 diagnostic lines (each as its first
``LINE_KEEP_BYTES`` raw bytes: an entry never shows more than 1,000), and the raw bytes only
while the file is inline-sized (≤ 12,000 bytes). Diagnostics are found per chunk from its end:
``rfind`` of keyword stems in the lower-cased chunk gives candidates, ``\\n`` counts give their
line numbers, the word-boundary regex confirms each candidate line; a line still open at the end
of a chunk is carried as its start plus a 32-byte window, so a keyword cut by a boundary (or deep
in a 64 MiB line) is still matched. Memory: about two chunks, whatever the file's size.

Rules resolved where the contract leaves room (docs/projections.md):

* Lines follow docs/architecture.md ("Conventions"): ``k`` newlines make ``k`` lines when the text ends with ``\\n``,
  else ``k + 1``; the empty text has 0 lines; a lone ``\\r`` is no break.
* "A trailing ``\\r`` is removed" removes one ``\\r`` (``a\\r\\r\\n`` shows ``a\\r``).
* The diagnostic regex runs on the lower-cased raw bytes of each line; with ``re.ASCII`` this is
  the same test as the contract's ``re.IGNORECASE | re.ASCII`` search on the decoded line (ASCII
  bytes decode to themselves, every other byte or code point is a non-word character either
  way).
* ``Output: 1 lines`` keeps the contract's fixed wording. ``timeout_seconds``, ``signal`` and
  ``exit_code`` are printed as given.
* If dropping every line in the contract's order still does not fit (a path of ~3,800 bytes), the
  file's last line goes too; the path is never cut, so only such a path can make the summary
  pass 4,000 bytes.

``project_log_page`` is the same ``process_diagnostics`` profile applied to one page of a log
(``async_bash_logs``, docs/projections.md "Log pages"): a page whose lines fit 84 lines and
12,000 bytes is shown whole, followed by its footer; a larger one is summarised within 16 lines
and 4,000 bytes by the contract's selection and cuts, its lines numbered by their 0-based
offsets, naming the file and the offset/limit that read the lines not shown next.
"""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Sequence
from typing import Any, NamedTuple

from projections.units import (
    ELLIPSIS,
    clean_text,
    line_count,
    path_text,
    size_words,
    utf8_len,
    utf8_prefix,
)

CHUNK_BYTES = 1024 * 1024  # read size of the streaming pass; tests monkeypatch it
LINE_KEEP_BYTES = 4096  # raw start kept of a shown line: an entry never shows more than 1,000
PROCESS_INLINE_LINES = 84
PROCESS_INLINE_BYTES = 12_000
SUMMARY_MAX_BYTES = 4_000
ENTRY_MAX_BYTES = 1_000
ENTRY_MIN_BYTES = 40
HEAD_LINES = 2
DIAGNOSTIC_LINES = 8
TAIL_LINES = 3
_KEPT_LINES = TAIL_LINES + DIAGNOSTIC_LINES  # last lines, and last matches, worth keeping
_WINDOW_BYTES = 32  # > the longest keyword (18) + 1 byte of context before it
# Keyword substrings without word boundaries per chunk before one regex pass takes over: a
# reject costs a few microseconds, the regex pass ~30 ms per MiB, so they break even near here.
_REJECTS_BEFORE_REGEX = 2048

# The contract's regex, run on lower-cased bytes (see the module docstring).
_DIAGNOSTIC = re.compile(
    rb"\b(?:error|errors|warn|warning|fatal|fail|failed|failure|exception|traceback|panic"
    rb"|denied|timeout|timed out|segmentation fault)\b"
)
# Every keyword starts with one of these: cheap candidates, confirmed by the regex.
_NEEDLES = (
    b"error",
    b"warn",
    b"fail",
    b"fatal",
    b"exception",
    b"traceback",
    b"panic",
    b"denied",
    b"timeout",
    b"timed out",
    b"segmentation fault",
)


class _Line(NamedTuple):
    number: int
    raw: bytes  # the line's first LINE_KEEP_BYTES bytes, trailing "\r" removed
    truncated: bool  # the line is longer than ``raw``


class _Scan:
    """One streaming pass: line count, size, first lines, last lines, last diagnostic lines.

    Memory is bounded: a chunk, its lower-cased copy, and a few KiB per kept line. A line that
    spans chunks (or is 64 MiB long) is held as its first ``LINE_KEEP_BYTES`` bytes plus a
    window of its last bytes, so a keyword cut by a chunk boundary is still seen whole.
    """

    def __init__(self) -> None:
        self.size = 0
        self.lines = 0  # lines ended by a newline so far
        self.small: list[bytes] | None = []  # every byte, while the file is inline-sized
        self.head: list[_Line] = []
        self.tail: deque[_Line] = deque(maxlen=_KEPT_LINES)
        self.diagnostics: deque[_Line] = deque(maxlen=_KEPT_LINES)
        self._reset_current()

    def _reset_current(self) -> None:
        self.cur_len = 0
        self.cur_start = b""
        self.cur_window = b""  # last _WINDOW_BYTES bytes, lower-cased
        self.cur_hit = False

    def feed(self, data: bytes) -> None:
        self.size += len(data)
        if self.small is not None:
            self.small = self.small + [data] if self.size <= PROCESS_INLINE_BYTES else None
        low = data.lower()
        first = data.find(b"\n")
        if first < 0:
            self._extend(data, low, 0, len(data), final=False)
            return
        self._extend(data, low, 0, first, final=True)
        self._finish_current()
        last = data.rfind(b"\n")
        if last > first:
            self._block(data, low, first + 1, last + 1)
        self._extend(data, low, last + 1, len(data), final=False)

    def close(self) -> None:
        if self.cur_len:
            self._finish_current()

    # The current line: the one the last chunk left open.
    def _extend(self, data: bytes, low: bytes, start: int, end: int, *, final: bool) -> None:
        room = LINE_KEEP_BYTES - len(self.cur_start)
        if room > 0:
            self.cur_start += data[start : min(end, start + room)]
        if not self.cur_hit and self.lines + 1 > HEAD_LINES:
            self.cur_hit = self._current_matches(low, start, end, final)
        if end - start >= _WINDOW_BYTES:
            self.cur_window = low[end - _WINDOW_BYTES : end]
        else:
            self.cur_window = (self.cur_window + low[start:end])[-_WINDOW_BYTES:]
        self.cur_len += end - start

    def _current_matches(self, low: bytes, start: int, end: int, final: bool) -> bool:
        # Matches across the boundary: the window gives the context the chunk lacks. A match
        # that ends where the known bytes end is decided later, when its next byte is known.
        edge = self.cur_window + low[start : min(end, start + _WINDOW_BYTES)]
        m = _DIAGNOSTIC.search(edge, 1 if self.cur_len > len(self.cur_window) else 0)
        if m and (m.end() < len(edge) or (final and end - start <= _WINDOW_BYTES)):
            return True
        if end - start < 2 or not any(low.find(n, start + 1, end) >= 0 for n in _NEEDLES):
            return False
        m = _DIAGNOSTIC.search(low, start + 1, end)
        return m is not None and (final or m.end() < end)

    def _finish_current(self) -> None:
        length = self.cur_len - (1 if self.cur_window.endswith(b"\r") else 0)
        line = _Line(self.lines + 1, self.cur_start[:length], length > LINE_KEEP_BYTES)
        if line.number <= HEAD_LINES:
            self.head.append(line)
        elif self.cur_hit:
            self.diagnostics.append(line)
        self.tail.append(line)
        self.lines += 1
        self._reset_current()

    # Whole lines inside one chunk: data[start:end] ends with a newline.
    def _block(self, data: bytes, low: bytes, start: int, end: int) -> None:
        first_number = self.lines + 1
        count = data.count(b"\n", start, end)
        pos = start
        while len(self.head) < HEAD_LINES and pos < end:
            stop = data.find(b"\n", pos, end)
            self.head.append(_line_at(data, pos, stop, len(self.head) + 1))
            pos = stop + 1
        self.diagnostics.extend(_block_diagnostics(data, low, start, end, first_number, count))
        kept: list[_Line] = []
        stop = end - 1
        for k in range(min(_KEPT_LINES, count)):
            begin = data.rfind(b"\n", start, stop) + 1 or start
            kept.append(_line_at(data, begin, stop, first_number + count - 1 - k))
            stop = begin - 1
        self.tail.extend(reversed(kept))
        self.lines += count


def _line_at(data: bytes, start: int, stop: int, number: int) -> _Line:
    """The line ``data[start:stop]`` (``stop`` is its newline or the end of the data)."""
    if stop > start and data[stop - 1] == 13:  # "\r"
        stop -= 1
    return _Line(
        number, data[start : min(stop, start + LINE_KEEP_BYTES)], stop - start > LINE_KEEP_BYTES
    )


def _block_diagnostics(
    data: bytes, low: bytes, start: int, end: int, first_number: int, count: int
) -> list[_Line]:
    """The last ``_KEPT_LINES`` matching lines numbered past the head, in file order.

    Searches backwards from the end of the block: the nearest keyword candidate (a cached
    ``rfind`` per needle, so each needle scans the block once) is confirmed on its line by the
    regex. Only the last few matches of a chunk can matter, so dense logs stop early.
    """
    found: list[_Line] = []
    positions = [low.rfind(n, start, end) for n in _NEEDLES]
    counted_to, newlines_after = end, 0
    rejects = 0
    while len(found) < _KEPT_LINES:
        pos = max(positions)
        if pos < 0:
            break
        begin = low.rfind(b"\n", start, pos) + 1 or start
        stop = low.find(b"\n", pos, end)
        newlines_after += low.count(b"\n", stop, counted_to)
        counted_to = stop
        number = first_number + count - newlines_after
        if number <= HEAD_LINES:
            break
        if _DIAGNOSTIC.search(low, begin, stop):
            found.append(_line_at(data, begin, stop, number))
        else:
            rejects += 1
            if rejects > _REJECTS_BEFORE_REGEX:  # many near misses: one regex pass is cheaper
                earlier = _forward_diagnostics(data, low, start, begin, first_number)
                found.extend(reversed(earlier[-(_KEPT_LINES - len(found)) :]))
                break
        end = begin
        for i, p in enumerate(positions):
            if p >= end:
                positions[i] = low.rfind(_NEEDLES[i], start, end)
    found.reverse()
    return found


def _forward_diagnostics(
    data: bytes, low: bytes, start: int, end: int, first_number: int
) -> list[_Line]:
    """The last ``_KEPT_LINES`` matching lines of ``data[start:end]`` by one regex pass."""
    spans: deque[tuple[int, int]] = deque(maxlen=_KEPT_LINES)
    line_end = start
    for m in _DIAGNOSTIC.finditer(low, start, end):
        if m.start() < line_end:
            continue  # another match on a line already taken
        begin = low.rfind(b"\n", start, m.start()) + 1 or start
        line_end = low.find(b"\n", m.end(), end)
        spans.append((begin, line_end))
    lines = []
    for begin, stop in spans:
        number = first_number + low.count(b"\n", start, begin)
        if number > HEAD_LINES:
            lines.append(_line_at(data, begin, stop, number))
    return lines


def _scan_file(path: str | os.PathLike[str]) -> _Scan:
    scan = _Scan()
    with open(path, "rb", buffering=0) as f:
        while data := f.read(CHUNK_BYTES):
            scan.feed(data)
            del data
    scan.close()
    return scan


def _status(
    exit_code: Any, signal: str | None, timed_out: bool, timeout_seconds: Any
) -> tuple[str, bool]:
    """The status sentence and whether it is needed, by precedence timeout > signal > code."""
    if timed_out:
        return f"Process timed out after {timeout_seconds} s and was killed.", True
    if signal:
        return f"Process killed by signal {signal}.", True
    if exit_code != 0:
        return f"Process exit code {exit_code}.", True
    return "Process exit code 0.", False


def project_process(
    path: str | os.PathLike[str],
    *,
    exit_code: int | None,
    signal: str | None = None,
    timed_out: bool = False,
    timeout_seconds: float | int | None = None,
    not_stored_bytes: int = 0,
) -> str:
    """The model text of a process result whose interleaved output is the file at ``path``.

    Exactly the process contract of docs/projections.md: the output itself (plus the status sentence when one
    is needed) when it has ≤ 84 lines and ≤ 12,000 bytes and capture did not stop; otherwise a
    summary of ≤ 16 lines and ≤ 4,000 UTF-8 bytes naming ``path`` as given. One streaming pass,
    memory bounded whatever the file's size.
    """
    scan = _scan_file(path)
    status, needed = _status(exit_code, signal, timed_out, timeout_seconds)
    if scan.small is not None and not_stored_bytes <= 0:
        text = clean_text(b"".join(scan.small).decode("utf-8", "replace")) or "(no output)"
        if needed:
            text += ("" if text.endswith("\n") else "\n") + status
        if line_count(text) <= PROCESS_INLINE_LINES and utf8_len(text) <= PROCESS_INLINE_BYTES:
            return text
    total = scan.lines
    head = scan.head[: min(HEAD_LINES, total)]
    diagnostics = [d for d in scan.diagnostics if d.number <= total - TAIL_LINES]
    diagnostics = diagnostics[-DIAGNOSTIC_LINES:]
    shown = {line.number for line in head} | {line.number for line in diagnostics}
    rest = [line for line in scan.tail if line.number not in shown]
    tail = rest[len(rest) - min(len(rest), TAIL_LINES + DIAGNOSTIC_LINES - len(diagnostics)) :]
    first = f"{status} Output: {total} lines, {size_words(scan.size)}."
    if not_stored_bytes > 0:
        first += f" Capture stopped at 16 MiB; {size_words(not_stored_bytes)} not stored."
    last = (
        f"Full output: {path_text(path)} "
        "(read it with offset/limit or grep it; do not rerun the command)."
    )
    return _summary(first, last, total, head, diagnostics, tail)


def _entry(line: _Line) -> bytes:
    text = clean_text(line.raw.decode("utf-8", "replace"))
    return f"{line.number}: {text}".encode()


def _summary(
    first: str,
    last: str,
    total: int,
    head: list[_Line],
    diags: list[_Line],
    tail: list[_Line],
    *,
    final: int | None = None,
) -> str:
    """Lines 1-4 of the summary, with the entry cap ``C`` and the drop order of the contract.
    ``total``: the lines summarised; ``final``: the number of the last one (``total``)."""
    final = total if final is None else final
    kinds = {
        line.number: kind
        for kind, group in (("h", head), ("d", diags), ("t", tail))
        for line in group
    }
    drops = [line.number for line in reversed(head)]
    drops += [line.number for line in tail if line.number != final]
    drops += [line.number for line in diags]
    drops.append(final)  # the file's last line goes only as a last resort (module docstring)
    entries = {line.number: _entry(line) for line in (*head, *diags, *tail)}

    def fixed() -> tuple[bytes, int]:
        counts = [sum(1 for k in kinds.values() if k == c) for c in "hdt"]
        second = (
            f"Showing {sum(counts)} of {total} lines: "
            f"first {counts[0]}, {counts[1]} diagnostic, last {counts[2]}."
        )
        head_text = f"{first}\n{second}\n".encode()
        return head_text, len(head_text) + len(entries) + len(last.encode())

    cap = _entry_cap(list(entries.values()), fixed()[1])
    while cap is None and drops:
        number = drops.pop(0)
        if number in entries:
            del entries[number], kinds[number]
            cap = _entry_cap(list(entries.values()), fixed()[1])
    cap = cap or ENTRY_MIN_BYTES
    body = b"".join(
        (e if len(e) <= cap else utf8_prefix(e, cap - 3) + ELLIPSIS.encode()) + b"\n"
        for _, e in sorted(entries.items())
    )
    return (fixed()[0] + body).decode() + last


def _fits_inline(lines: Sequence[bytes]) -> bool:
    """Whether these lines, joined by newlines, fit the inline budget (84 lines, 12,000 bytes)."""
    size = sum(len(line) for line in lines) + max(0, len(lines) - 1)
    return len(lines) <= PROCESS_INLINE_LINES and size <= PROCESS_INLINE_BYTES


def page_where(offset: int, count: int, total_lines: int) -> str:
    """Which lines a log page holds, by 0-based offsets."""
    if not count:
        return f"No line at offset {offset} ({total_lines} lines)"
    return f"Lines at offsets {offset}-{offset + count - 1} of {total_lines}"


def project_log_page(
    lines: Sequence[str],
    *,
    offset: int,
    total_lines: int,
    next_offset: int | None,
    status: str,
    stream: str,
    run_id: str,
    path: str | os.PathLike[str],
) -> str:
    """The model text of one page of an async run's log (``async_bash_logs``).

    ``lines`` are the page's lines as ``projections.logpages.read_page`` gives them (decoded,
    clean), the first at 0-based ``offset`` of the ``total_lines`` of the file at ``path``.
    Lines that fit 84 lines and 12,000 UTF-8 bytes (joined by newlines) are shown whole, then
    the footer ``Lines at offsets A-B of T in the STREAM of async run ID (STATUS).`` (plus
    `` Continue with offset=N.`` when the file goes on). A larger page is summarised as the
    process contract says (≤ 16 lines, ≤ 4,000 bytes: head, diagnostics, the page's newest
    lines), entries numbered by offset::

        {footer's first sentence without its period}: {L} lines, {SIZE}.
        Showing S of L lines: first H, D diagnostic, last T.
        {offset}: {text}
        …
        Full {stream}: {path} (read the lines not shown from offset={X} with limit={K}, or grep
        it; do not rerun the command).[ Continue with offset={N}.]

    ``X`` is the offset after the head (the page's first offset when the page has no more than
    its head); ``K`` the most lines from ``X`` on that fit the inline budget (at least 1).
    """
    count = len(lines)
    where = f"{page_where(offset, count, total_lines)} in the {stream} of async run {run_id}"
    more = "" if next_offset is None else f" Continue with offset={next_offset}."
    raws = [line.encode("utf-8", "surrogatepass") for line in lines]
    if _fits_inline(raws):
        return "\n".join([*lines, f"{where} ({status}).{more}"])
    size = sum(len(raw) for raw in raws) + count - 1

    def line_at(i: int) -> _Line:
        raw = raws[i]
        return _Line(offset + i, raw[:LINE_KEEP_BYTES], len(raw) > LINE_KEEP_BYTES)

    held = min(HEAD_LINES, count)
    matches = [i for i in range(held, count - TAIL_LINES) if _DIAGNOSTIC.search(raws[i].lower())]
    matches = matches[-DIAGNOSTIC_LINES:]
    shown = set(range(held)) | set(matches)
    rest = [i for i in range(count) if i not in shown]
    tail = rest[len(rest) - min(len(rest), TAIL_LINES + DIAGNOSTIC_LINES - len(matches)) :]
    start = held if held < count else 0
    fitting = 1
    while start + fitting < count and _fits_inline(raws[start : start + fitting + 1]):
        fitting += 1
    first = f"{where} ({status}): {count} lines, {size_words(size)}."
    last = (
        f"Full {stream}: {path_text(path)} (read the lines not shown from offset="
        f"{offset + start} with limit={fitting}, or grep it; do not rerun the command).{more}"
    )
    return _summary(
        first,
        last,
        count,
        [line_at(i) for i in range(held)],
        [line_at(i) for i in matches],
        [line_at(i) for i in tail],
        final=offset + count - 1,
    )


def _entry_cap(entries: list[bytes], fixed: int) -> int | None:
    """The largest cap ``C`` ≤ 1,000 (and ≥ 40) keeping the summary ≤ 4,000 bytes, else None."""

    def size(cap: int) -> int:
        return fixed + sum(
            len(e) if len(e) <= cap else len(utf8_prefix(e, cap - 3)) + 3 for e in entries
        )

    if size(ENTRY_MAX_BYTES) <= SUMMARY_MAX_BYTES:
        return ENTRY_MAX_BYTES
    if size(ENTRY_MIN_BYTES) > SUMMARY_MAX_BYTES:
        return None
    fits, fails = ENTRY_MIN_BYTES, ENTRY_MAX_BYTES
    while fails - fits > 1:
        mid = (fits + fails) // 2
        if size(mid) <= SUMMARY_MAX_BYTES:
            fits = mid
        else:
            fails = mid
    return fits


# --- text helpers (UTF-8 bytes, README lines) ---------------------------------------------------
