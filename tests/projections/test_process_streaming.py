"""The process contract on the streamed pass: big logs, keywords cut by chunk boundaries or deep
in long lines, the switch to one regex pass, one read of each byte and bounded memory.

The streaming pass is tuned (chunk size) by patching ``projections.process``. The rules in
short: tests/projections/process_helpers.py.
"""

from __future__ import annotations

import re
import tracemalloc

import pytest

from projections import process
from projections.result import project_process

from .process_helpers import MIB, summary, write

# --- a big log --------------------------------------------------------------------------------


def test_a_build_log_shows_its_only_error_with_its_line_number(tmp_path):
    """200,000 lines (7,200,003 bytes, 6.87 MiB), one error at line 100,000: head 2, that
    diagnostic, and the last 3 + 7 = 10 lines."""
    rows = [f"[{n:06d}/200000] CC src/m{n % 7}/f{n:06d}.o\n" for n in range(1, 200_001)]
    rows[99_999] = "src/parser.c:42:7: error: expected ';'\n"
    data = "".join(rows).encode()
    assert len(data) == 199_999 * 36 + 39
    path = write(tmp_path, data)
    assert project_process(path, exit_code=2) == summary(
        path,
        "Process exit code 2. Output: 200000 lines, 6.9 MiB.",
        "Showing 13 of 200000 lines: first 2, 1 diagnostic, last 10.",
        "1: [000001/200000] CC src/m1/f000001.o",
        "2: [000002/200000] CC src/m2/f000002.o",
        "100000: src/parser.c:42:7: error: expected ';'",
        *(f"{n}: [{n:06d}/200000] CC src/m{n % 7}/f{n:06d}.o" for n in range(199_991, 200_001)),
    )


# --- chunk boundaries: the streamed pass gives the same text for every chunk size ------------

P3 = b"p1\np2\np3\n"
S3 = b"\ns1\ns2\ns3\n"


@pytest.mark.parametrize(
    ("line", "shown", "diagnostic"),
    [
        (b"  segmentation fault (core dumped)", "  segmentation fault (core dumped)", True),
        (b"x timed out", "x timed out", True),
        (b"x errors", "x errors", True),
        (b"x error", "x error", True),
        (b"x errorz", "x errorz", False),
        (b"Traceback (most recent call last):", "Traceback (most recent call last):", True),
        (b"fatal", "fatal", True),
        (b"fail\r", "fail", True),
        (b"terror", "terror", False),
        (b"ok\r", "ok", False),
    ],
)
def test_keyword_split_across_every_chunk_boundary(tmp_path, monkeypatch, line, shown, diagnostic):
    """Lines p1 p2 p3 LINE s1 s2 s3 (capture stopped). Line 4 is the only candidate (range
    3 … L-3 = 3 … 4): matched, D = 1 and the tail is the 4 lines left; not matched, the tail is
    5 lines. The same for every chunk size from 1 byte to the whole file."""
    data = P3 + line + S3
    path = write(tmp_path, data)
    expected = summary(
        path,
        f"Process exit code 0. Output: 7 lines, {19 + len(line)} bytes. "
        "Capture stopped at 16 MiB; 1 byte not stored.",
        "Showing 7 of 7 lines: first 2, {} diagnostic, last {}.".format(
            *((1, 4) if diagnostic else (0, 5))
        ),
        "1: p1",
        "2: p2",
        "3: p3",
        f"4: {shown}",
        "5: s1",
        "6: s2",
        "7: s3",
    )
    for chunk in range(1, len(data) + 1):
        monkeypatch.setattr(process, "CHUNK_BYTES", chunk)
        assert project_process(path, exit_code=0, not_stored_bytes=1) == expected, chunk


def test_keyword_in_a_line_longer_than_a_chunk(tmp_path, monkeypatch):
    """``denied`` 7,000 bytes into a 14,008-byte line 3 of 6 makes it a diagnostic (14,024 bytes,
    13.70 KiB); its entry is cut to 1,000 bytes: ``3: `` + 994 ``a`` + ``…``."""
    data = b"h1\nh2\n" + b"a" * 7000 + b" denied " + b"b" * 7000 + b"\nt1\nt2\nt3\n"
    assert len(data) == 14_024
    path = write(tmp_path, data)
    expected = summary(
        path,
        "Process exit code 0. Output: 6 lines, 13.7 KiB.",
        "Showing 6 of 6 lines: first 2, 1 diagnostic, last 3.",
        "1: h1",
        "2: h2",
        "3: " + "a" * 994 + "…",
        "4: t1",
        "5: t2",
        "6: t3",
    )
    for chunk in (7, 64, 1000, 3503, 4096, *range(7002, 7016), 1 << 20):
        monkeypatch.setattr(process, "CHUNK_BYTES", chunk)
        assert project_process(path, exit_code=0) == expected, chunk


def test_long_lines_ending_in_a_carriage_return_around_the_kept_bytes(tmp_path, monkeypatch):
    """Lines of about ``LINE_KEEP_BYTES`` (the bytes kept of a shown line) ending in ``\\r``:
    15 lines, 61,470 bytes (60.03 KiB), all 13 entries long, so C = 277 as in the budget
    example of test_process_budget.py; the ``\\r`` never shows."""
    keep = process.LINE_KEEP_BYTES
    rows = [b"a" * keep + b"\r", b"b" * (keep - 1) + b"\r", b"c" * (keep + 1) + b"\r"] * 5
    data = b"\n".join(rows) + b"\n"
    path = write(tmp_path, data)
    assert len(data) == 5 * (3 * keep + 3) + 15

    def entry(n: int) -> str:  # line n is a, b, c, a, b, c, …
        number = f"{n}: "
        return number + "abc"[(n - 1) % 3] * (277 - 3 - len(number)) + "…"

    expected = summary(
        path,
        "Process exit code 0. Output: 15 lines, 60.0 KiB.",
        "Showing 13 of 15 lines: first 2, 0 diagnostic, last 11.",
        *(entry(n) for n in (1, 2, *range(5, 16))),
    )
    if keep == 4096:
        assert entry(10) == "10: " + "a" * 270 + "…"
    for chunk in (100, keep, keep + 1, 1 << 20):
        monkeypatch.setattr(process, "CHUNK_BYTES", chunk)
        assert project_process(path, exit_code=0) == expected


def test_many_near_misses_switch_to_one_regex_pass(tmp_path, monkeypatch):
    """3,000 lines full of keyword stems that are not keywords (``errorless terror_x failing``);
    12 end in `` [error]``. Lines 1, 2 are the head; 2998-3000 the last 3; the 7 diagnostics in
    3 … 2997 leave a tail of 3 + 1 = 4 lines."""
    rows = [b"errorless terror_x %d failing" % n for n in range(1, 3001)]
    for n in (1, 2, 500, 1500, 2000, 2001, 2990, 2996, 2997, 2998, 2999, 3000):
        rows[n - 1] += b" [error]"
    data = b"\n".join(rows) + b"\n"
    assert len(data) == 3000 * 27 + (9 + 90 * 2 + 900 * 3 + 2001 * 4) + 12 * 8 + 3000 == 94_989
    path = write(tmp_path, data)

    def entry(n: int, error: bool) -> str:
        return f"{n}: errorless terror_x {n} failing" + (" [error]" if error else "")

    expected = summary(
        path,
        "Process exit code 1. Output: 3000 lines, 92.8 KiB.",
        "Showing 13 of 3000 lines: first 2, 7 diagnostic, last 4.",
        *(entry(n, True) for n in (1, 2, 500, 1500, 2000, 2001, 2990)),
        entry(2995, False),
        *(entry(n, True) for n in (2996, 2997, 2998, 2999, 3000)),
    )
    for chunk in (1000, 4096, 40_000, 1 << 20):
        monkeypatch.setattr(process, "CHUNK_BYTES", chunk)
        assert project_process(path, exit_code=1) == expected


# --- big files: one pass, bounded memory ------------------------------------------------------


def peak_growth(fn):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = fn()
        return out, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_a_64_mib_single_line(tmp_path):
    """One line of 64 MiB, read without loading it: ``Output: 1 lines, 64.0 MiB.``, the head is
    that line cut to 1,000 bytes (``1: `` + 994 bytes + ``…``). Its ``error`` sits in the head,
    so it is not a diagnostic."""
    path = tmp_path / "output.txt"
    with path.open("wb") as f:
        block = b"0123456789abcdef" * 65536  # 1 MiB, no newline
        for i in range(64):
            f.write(block if i != 40 else block[:-20] + b" error: at 40 MiB  ")
    out, peak = peak_growth(lambda: project_process(path, exit_code=1))
    assert peak <= 4 * MIB
    assert out == summary(
        str(path),
        "Process exit code 1. Output: 1 lines, 64.0 MiB.",
        "Showing 1 of 1 lines: first 1, 0 diagnostic, last 0.",
        "1: " + "0123456789abcdef" * 62 + "01…",
    )


@pytest.mark.parametrize("size_mib", [1, 16])
def test_memory_stays_bounded_on_big_logs(tmp_path, size_mib):
    line = b"[ 50%] Building CXX object src/core/CMakeFiles/core.dir/module.cpp.o\n"
    count = size_mib * MIB // len(line)
    data = line * (count - 1) + b"ld: error: undefined symbol: main\n"
    path = write(tmp_path, data)
    del data
    out, peak = peak_growth(lambda: project_process(path, exit_code=1))
    assert peak <= 4 * MIB
    assert len(out.encode()) <= 4000
    # The error is the file's last line: a tail line, not a diagnostic.
    assert out.split("\n")[1] == f"Showing 13 of {count} lines: first 2, 0 diagnostic, last 11."
    assert f"\n{count}: ld: error: undefined symbol: main\n" in out


def test_a_keyword_deep_inside_a_16_mib_line_is_a_diagnostic(tmp_path):
    path = tmp_path / "output.txt"
    with path.open("wb") as f:
        f.write(b"h1\nh2\n")
        for i in range(16):
            f.write(b"-" * MIB if i != 9 else b"-" * (MIB - 30) + b" Traceback: " + b"-" * 18)
        f.write(b"\nt1\nt2\nt3")
    out, peak = peak_growth(lambda: project_process(path, exit_code=1))
    assert peak <= 4 * MIB
    assert out == summary(
        str(path),
        "Process exit code 1. Output: 6 lines, 16.0 MiB.",  # 16 MiB + 15 bytes
        "Showing 6 of 6 lines: first 2, 1 diagnostic, last 3.",
        "1: h1",
        "2: h2",
        "3: " + "-" * 994 + "…",
        "4: t1",
        "5: t2",
        "6: t3",
    )


class CountingRegex:
    """The diagnostic regex, counting the bytes each ``search`` / ``finditer`` is given."""

    def __init__(self, pattern: re.Pattern[bytes]) -> None:
        self.pattern = pattern
        self.bytes = 0

    def _span(self, string: bytes, pos: int, endpos: int | None) -> tuple[int, int]:
        end = len(string) if endpos is None else min(endpos, len(string))
        self.bytes += max(0, end - pos)
        return pos, end

    def search(self, string: bytes, pos: int = 0, endpos: int | None = None):
        return self.pattern.search(string, *self._span(string, pos, endpos))

    def finditer(self, string: bytes, pos: int = 0, endpos: int | None = None):
        return self.pattern.finditer(string, *self._span(string, pos, endpos))


def test_one_pass_and_the_regex_only_on_candidate_lines(tmp_path, monkeypatch):
    # Throughput is measured in bench/projections.py, against the raw keyword scan. Here the
    # work that decides it is counted instead: every byte is read once, in CHUNK_BYTES chunks,
    # and the word-boundary regex sees candidate lines and chunk edges, never the whole log.
    words = b"the build of module src include object linking compiling target done cache".split()
    rows = [b" ".join(words[(i * 7 + k) % len(words)] for k in range(9)) for i in range(60_000)]
    rows[30_000] = b"main.c:1: error: boom"
    rows[45_000] = b"errorless terror_x failing"  # keyword stems, no keyword: rejected
    data = b"\n".join(rows)
    path = write(tmp_path, data)
    fed: list[int] = []
    real_feed = process._Scan.feed
    monkeypatch.setattr(
        process._Scan, "feed", lambda scan, d: fed.append(len(d)) or real_feed(scan, d)
    )
    regex = CountingRegex(process._DIAGNOSTIC)
    monkeypatch.setattr(process, "_DIAGNOSTIC", regex)
    out = project_process(path, exit_code=1)
    assert len(data) > 3 * MIB
    chunk = process.CHUNK_BYTES
    assert fed == [chunk] * (len(data) // chunk) + [len(data) % chunk]  # each byte once
    assert "\n30001: main.c:1: error: boom\n" in out
    assert "first 2, 1 diagnostic, last 10." in out
    # The two candidate lines once each, plus a window of at most 64 bytes at each chunk's
    # start (a line left open by the chunk before): ~300 bytes of 3.4 MB.
    edges = len(fed) * 2 * process._WINDOW_BYTES
    assert regex.bytes <= len(rows[30_000]) + len(rows[45_000]) + edges
