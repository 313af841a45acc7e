"""The process contract of the model projection (spec projections.md, projections/process.py).

``project_process`` is imported from ``projections.result``, which the contract names as its
exporter; the streaming pass is tuned (chunk size) by patching ``projections.process``.
"""

from __future__ import annotations

import re
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections import process
from projections.result import project_process

KIB = 1024
MIB = 1024 * 1024
FULL = "(read it with offset/limit or grep it; do not rerun the command)."

# --- a slow, obviously correct reference: reads the whole (small) file -----------------------

KEYWORDS = re.compile(
    r"\b(error|errors|warn|warning|fatal|fail|failed|failure|exception|traceback|panic|denied"
    r"|timeout|timed out|segmentation fault)\b",
    re.IGNORECASE | re.ASCII,
)


def ref_size(n: int) -> str:
    if n == 1:
        return "1 byte"
    if n < 1024:
        return f"{n} bytes"
    value, unit = (n / 1024, "KiB") if n < 1024 * 1024 else (n / 1024 / 1024, "MiB")
    tenths = int(value * 10 + 0.5 + 1e-9)
    return f"{tenths // 10}.{tenths % 10} {unit}"


def ref_line_count(text: str) -> int:
    if text == "":
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def ref_cut(entry: str, cap: int) -> str:
    if len(entry.encode()) <= cap:
        return entry
    kept, used = [], 0
    for ch in entry[:cap]:
        if used + len(ch.encode()) > cap - 3:
            break
        kept.append(ch)
        used += len(ch.encode())
    return "".join(kept) + "…"


def ref_inline(raw: bytes, status: str, needed: bool, not_stored_bytes: int) -> str | None:
    text = raw.decode("utf-8", "replace").replace("\x00", "\ufffd") or "(no output)"
    if needed:
        text = text + ("" if text.endswith("\n") else "\n") + status
    if not_stored_bytes == 0 and ref_line_count(text) <= 84 and len(text.encode()) <= 12000:
        return text
    return None


def ref_status(exit_code, signal, timed_out, timeout_seconds) -> tuple[str, bool]:
    if timed_out:
        return f"Process timed out after {timeout_seconds} s and was killed.", True
    if signal:
        return f"Process killed by signal {signal}.", True
    if exit_code != 0:
        return f"Process exit code {exit_code}.", True
    return "Process exit code 0.", False


def reference_process(
    path, *, exit_code, signal=None, timed_out=False, timeout_seconds=None, not_stored_bytes=0
):
    raw = Path(path).read_bytes()
    status, needed = ref_status(exit_code, signal, timed_out, timeout_seconds)
    inline = ref_inline(raw, status, needed, not_stored_bytes)
    if inline is not None:
        return inline
    pieces = raw.split(b"\n")
    if raw.endswith(b"\n") or raw == b"":
        pieces.pop()
    lines = [
        (p[:-1] if p.endswith(b"\r") else p).decode("utf-8", "replace").replace("\x00", "\ufffd")
        for p in pieces
    ]
    total = len(lines)
    h = min(2, total)
    head = list(range(1, h + 1))
    diag = [n for n in range(h + 1, total - 3 + 1) if KEYWORDS.search(lines[n - 1])][-8:]
    shown = set(head) | set(diag)
    tail = [n for n in range(1, total + 1) if n not in shown][-(3 + 8 - len(diag)) :]
    first = f"{status} Output: {total} lines, {ref_size(len(raw))}."
    if not_stored_bytes > 0:
        first += f" Capture stopped at 16 MiB; {ref_size(not_stored_bytes)} not stored."
    last = f"Full output: {path} {FULL}"

    def render(cap):
        numbers = sorted(head + diag + tail)
        out = [
            first,
            f"Showing {len(numbers)} of {total} lines: first {len(head)}, {len(diag)} diagnostic,"
            f" last {len(tail)}.",
        ]
        out += [ref_cut(f"{n}: {lines[n - 1]}", cap) for n in numbers]
        return "\n".join([*out, last])

    def fits(cap):
        return len(render(cap).encode()) <= 4000

    def best():
        if fits(1000):
            return render(1000)
        if not fits(40):
            return None
        lo, hi = 40, 1000
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        return render(lo)

    order = [(head, n) for n in reversed(head)]
    order += [(tail, n) for n in tail if n != total]
    order += [(diag, n) for n in diag]
    order += [(group, total) for group in (head, tail) if total in group]
    out = best()
    while out is None and order:
        group, n = order.pop(0)
        if n in group:
            group.remove(n)
            out = best()
    return out if out is not None else render(40)


def check(path, **kwargs):
    out = project_process(path, **kwargs)
    assert out == reference_process(path, **kwargs)
    return out


def write(tmp_path: Path, data: bytes, name: str = "output.txt") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def assert_bounded(out: str, path) -> None:
    assert len(out.encode()) <= 4000
    assert out.count("\n") + 1 <= 16
    assert out.endswith(f"Full output: {path} {FULL}")


# --- golden tests -----------------------------------------------------------------------------


def build_log(lines: int, error_at: int) -> bytes:
    out = []
    for i in range(1, lines + 1):
        if i == error_at:
            out.append(b"src/parser.c:42:7: error: expected ';'\n")
        else:
            out.append(f"[{i:06d}/{lines}] CC src/m{i % 7}/f{i:06d}.o\n".encode())
    return b"".join(out)


def test_build_log_shows_its_only_error_with_its_line_number(tmp_path):
    data = build_log(200_000, 100_000)
    assert len(data) == 199_999 * 36 + 39  # 6.87 MiB
    path = write(tmp_path, data)
    out = project_process(str(path), exit_code=2)
    assert out == "\n".join(
        [
            "Process exit code 2. Output: 200000 lines, 6.9 MiB.",
            "Showing 13 of 200000 lines: first 2, 1 diagnostic, last 10.",
            "1: [000001/200000] CC src/m1/f000001.o",
            "2: [000002/200000] CC src/m2/f000002.o",
            "100000: src/parser.c:42:7: error: expected ';'",
            *(f"{i}: [{i:06d}/200000] CC src/m{i % 7}/f{i:06d}.o" for i in range(199_991, 200_001)),
            f"Full output: {path} {FULL}",
        ]
    )
    assert_bounded(out, path)
    assert Path(str(path)).is_absolute()


def test_84_lines_stay_inline_and_85_do_not(tmp_path):
    data = b"".join(f"line {i}\n".encode() for i in range(1, 85))
    path = write(tmp_path, data)
    assert check(path, exit_code=0) == data.decode()
    data85 = data + b"line 85\n"
    path85 = write(tmp_path, data85, "o85.txt")
    out = check(path85, exit_code=0)
    assert out.startswith("Process exit code 0. Output: 85 lines, 671 bytes.\n")
    assert "Showing 13 of 85 lines: first 2, 0 diagnostic, last 11.\n1: line 1\n2: line 2\n" in out
    assert out.split("\n")[4:15] == [f"{i}: line {i}" for i in range(75, 86)]


def test_inline_needs_12000_bytes_or_less(tmp_path):
    row = b"x" * 199 + b"\n"
    path = write(tmp_path, row * 60)  # 12,000 bytes
    assert check(path, exit_code=0) == (row * 60).decode()
    path = write(tmp_path, row * 60 + b"y", "more.txt")
    assert check(path, exit_code=0).startswith("Process exit code 0. Output: 61 lines, 11.7 KiB.")


def test_status_line_counts_against_the_inline_budget(tmp_path):
    data = b"".join(f"line {i}\n".encode() for i in range(1, 85))
    path = write(tmp_path, data)
    out = check(path, exit_code=1)  # 84 lines + the status line = 85
    assert out.startswith("Process exit code 1. Output: 84 lines, 663 bytes.\n")
    path = write(tmp_path, data[: data.index(b"line 84")], "o83.txt")
    assert check(path, exit_code=1).endswith("line 83\nProcess exit code 1.")


def test_failing_short_command_shows_its_status_inline(tmp_path):
    path = write(tmp_path, b"make: *** [all] Error 2\n")
    assert check(path, exit_code=2) == "make: *** [all] Error 2\nProcess exit code 2."
    path = write(tmp_path, b"no newline", "nl.txt")
    assert check(path, exit_code=1) == "no newline\nProcess exit code 1."
    assert check(path, exit_code=0) == "no newline"


def test_empty_output(tmp_path):
    path = write(tmp_path, b"")
    assert check(path, exit_code=0) == "(no output)"
    assert check(path, exit_code=3) == "(no output)\nProcess exit code 3."
    assert check(path, exit_code=0, not_stored_bytes=5) == "\n".join(
        [
            "Process exit code 0. Output: 0 lines, 0 bytes. Capture stopped at 16 MiB; "
            "5 bytes not stored.",
            "Showing 0 of 0 lines: first 0, 0 diagnostic, last 0.",
            f"Full output: {path} {FULL}",
        ]
    )


def test_status_precedence_timeout_then_signal_then_exit_code(tmp_path):
    path = write(tmp_path, b"ok\n")
    both = dict(exit_code=137, signal="SIGKILL")
    assert check(path, timed_out=True, timeout_seconds=120, **both) == (
        "ok\nProcess timed out after 120 s and was killed."
    )
    assert check(path, **both) == "ok\nProcess killed by signal SIGKILL."
    assert check(path, exit_code=137) == "ok\nProcess exit code 137."
    assert check(path, exit_code=0, signal="SIGTERM") == "ok\nProcess killed by signal SIGTERM."


def test_capture_stopped_is_never_inline_and_names_what_was_lost(tmp_path):
    path = write(tmp_path, b"a\nb\n")
    out = check(path, exit_code=0, signal="SIGPIPE", not_stored_bytes=3 * MIB + 100)
    assert out == "\n".join(
        [
            "Process killed by signal SIGPIPE. Output: 2 lines, 4 bytes. "
            "Capture stopped at 16 MiB; 3.0 MiB not stored.",
            "Showing 2 of 2 lines: first 2, 0 diagnostic, last 0.",
            "1: a",
            "2: b",
            f"Full output: {path} {FULL}",
        ]
    )


def test_timeout_status_in_a_summary(tmp_path):
    path = write(tmp_path, b"tick\n" * 100)
    out = check(path, exit_code=None, timed_out=True, timeout_seconds=5)
    assert out.startswith(
        "Process timed out after 5 s and was killed. Output: 100 lines, 500 bytes.\n"
    )


def test_diagnostics_are_the_last_eight_before_the_last_three_lines(tmp_path):
    rows = [f"row {i}" for i in range(1, 101)]
    for i in (1, 2, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 98, 99, 100):
        rows[i - 1] = f"row {i}: ERROR here"
    rows[96] = "row 97: Warnings are not warning-s"  # "warning" matches; "Warnings" does not
    path = write(tmp_path, "\n".join(rows).encode())  # no newline at the end
    out = check(path, exit_code=1)
    lines = out.split("\n")
    assert lines[1] == "Showing 13 of 100 lines: first 2, 8 diagnostic, last 3."
    numbers = [int(x.split(":")[0]) for x in lines[2:-1]]
    assert numbers == [1, 2, 40, 50, 60, 70, 80, 90, 95, 97, 98, 99, 100]
    assert lines[2] == "1: row 1: ERROR here"
    assert lines[13] == "99: row 99: ERROR here"


def test_words_that_only_contain_a_keyword_do_not_match(tmp_path):
    rows = [f"r{i}" for i in range(1, 31)]
    rows[9] = "errorless terror failing timeouts warned panicked error_x x_fail fail2"
    rows[10] = "timed  out; segmentation  fault; segmentationfault"
    rows[11] = "ok: Segmentation Fault (core dumped)"
    rows[12] = "ok: timed out"
    rows[13] = "caf\u00e9error \u00e9fatal\u00e9"  # non-ASCII letters are not word characters
    path = write(tmp_path, ("\n".join(rows) + "\n").encode())
    out = check(path, exit_code=0, not_stored_bytes=1)
    assert "first 2, 3 diagnostic, last 8." in out
    assert "\n12: ok: Segmentation Fault (core dumped)\n13: ok: timed out\n" in out
    assert "\n14: caf\u00e9error \u00e9fatal\u00e9\n" in out


def test_crlf_lines_lose_their_carriage_return(tmp_path):
    rows = b"".join(f"line {i}\r\n".encode() for i in range(1, 100))
    path = write(tmp_path, rows + b"end\r\r\n" + b"fail\r")
    out = check(path, exit_code=0)
    assert "\r" not in out.replace("100: end\r\n", "")
    assert out.endswith(f"\n100: end\r\n101: fail\nFull output: {path} {FULL}")
    small = write(tmp_path, b"a\r\nb\r\n", "small.txt")
    assert check(small, exit_code=1) == "a\r\nb\r\nProcess exit code 1."  # inline keeps \r


def test_invalid_utf8_and_nul_bytes_become_replacement_characters(tmp_path):
    rows = [b"ok"] * 90
    rows[0] = b"bad \xff\xfe byte \x00 nul"
    rows[50] = b"\xe2\x82 error: \x00 half a euro"
    rows[89] = b"\xf0\x9f\x98"
    path = write(tmp_path, b"\n".join(rows))
    out = check(path, exit_code=1)
    assert "\n1: bad \ufffd\ufffd byte \ufffd nul\n" in out
    assert "\n51: \ufffd error: \ufffd half a euro\n" in out
    assert "\n90: \ufffd\n" in out
    small = write(tmp_path, b"\x00\xffx", "small.txt")
    assert check(small, exit_code=0) == "\ufffd\ufffdx"
    out.encode("utf-8")  # valid UTF-8, no surrogates


def test_no_newline_at_the_end_counts_the_last_line(tmp_path):
    path = write(tmp_path, b"x\n" * 99 + b"last words")
    out = check(path, exit_code=0)
    assert out.startswith("Process exit code 0. Output: 100 lines, 208 bytes.")
    assert "\n100: last words\n" in out


def test_long_lines_share_the_room_evenly(tmp_path):
    rows = [("é" * 3000).encode()] * 40
    rows[20] = b"panic: " + b"z" * 5000
    path = write(tmp_path, b"\n".join(rows) + b"\n")
    out = check(path, exit_code=101)
    assert_bounded(out, path)
    entries = out.split("\n")[2:-1]
    assert len(entries) == 13 and all(e.endswith("…") for e in entries)
    assert "\n21: panic: zzz" in out
    sizes = {len(e.encode()) for e in entries}
    assert max(sizes) - min(sizes) <= 3  # one cap for all, minus a split code point


def test_many_short_lines_stay_whole(tmp_path):
    rows = [f"step {i} failed" if i % 10 == 0 else f"step {i}" for i in range(1, 5000)]
    path = write(tmp_path, "\n".join(rows).encode())
    out = check(path, exit_code=1)
    assert "…" not in out


def test_drop_order_when_even_40_bytes_per_entry_do_not_fit(tmp_path):
    rows = [b"%d " % i + b"q" * 900 for i in range(1, 21)]
    rows[4] = b"error " + b"q" * 900
    rows[5] = b"fatal " + b"q" * 900
    folder = tmp_path
    while len(str(folder)) < 3400:
        folder = folder / ("d" * 200)
    folder.mkdir(parents=True)
    path = write(folder, b"\n".join(rows))
    assert 3400 <= len(str(path)) < 3700
    out = check(path, exit_code=1)
    assert_bounded(out, path)
    lines = out.split("\n")
    shown = [int(x.split(":")[0]) for x in lines[2:-1]]
    # Dropped in order: head (2, 1), tail except the last line (12 … 19), diagnostics (5, 6).
    order = [2, 1, 12, 13, 14, 15, 16, 17, 18, 19, 5, 6, 20]
    assert 0 < len(shown) < 13
    assert shown == sorted(order[len(order) - len(shown) :])
    assert 20 in shown
    dia = len({5, 6} & set(shown))
    assert lines[1] == (
        f"Showing {len(shown)} of 20 lines: first 0, {dia} diagnostic, last {len(shown) - dia}."
    )


def test_a_path_too_long_for_any_entry_still_names_the_path(tmp_path):
    folder = tmp_path
    while len(str(folder)) < 3860:
        folder = folder / ("e" * 120)
    folder.mkdir(parents=True)
    path = write(folder, b"one\ntwo\n")
    out = check(path, exit_code=0, not_stored_bytes=1)
    assert out.split("\n")[1] == "Showing 0 of 2 lines: first 0, 0 diagnostic, last 0."
    assert out.endswith(f"Full output: {path} {FULL}")


# --- chunk boundaries -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        b"  segmentation fault (core dumped)",
        b"x timed out",
        b"x errors",
        b"x error",
        b"x errorz",
        b"Traceback (most recent call last):",
        b"fatal",
        b"ok\r",
    ],
)
def test_keyword_split_across_every_chunk_boundary(tmp_path, monkeypatch, line):
    prefix = b"".join(b"p%d\n" % i for i in range(1, 4))  # lines 1-3
    data = prefix + line + b"\n" + b"s1\ns2\ns3\n"
    path = write(tmp_path, data)
    expected = reference_process(path, exit_code=0, not_stored_bytes=1)
    for chunk in range(1, len(data) + 1):
        monkeypatch.setattr(process, "CHUNK_BYTES", chunk)
        assert project_process(path, exit_code=0, not_stored_bytes=1) == expected, chunk


def test_keyword_in_a_line_longer_than_a_chunk(tmp_path, monkeypatch):
    long_line = b"a" * 7000 + b" denied " + b"b" * 7000
    data = b"h1\nh2\n" + long_line + b"\nt1\nt2\nt3\n"
    path = write(tmp_path, data)
    expected = reference_process(path, exit_code=0)
    assert "Showing 6 of 6 lines: first 2, 1 diagnostic, last 3." in expected
    for chunk in (7, 64, 1000, 3503, 4096, *range(7002, 7016), 1 << 20):
        monkeypatch.setattr(process, "CHUNK_BYTES", chunk)
        assert project_process(path, exit_code=0) == expected, chunk


def test_keep_bytes_boundary_with_a_carriage_return(tmp_path, monkeypatch):
    keep = process.LINE_KEEP_BYTES
    rows = [b"a" * keep + b"\r", b"b" * (keep - 1) + b"\r", b"c" * (keep + 1) + b"\r"] * 5
    path = write(tmp_path, b"\n".join(rows) + b"\n")
    expected = reference_process(path, exit_code=0)
    for chunk in (100, keep, keep + 1, 1 << 20):
        monkeypatch.setattr(process, "CHUNK_BYTES", chunk)
        assert project_process(path, exit_code=0) == expected


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
    path = tmp_path / "output.txt"
    with path.open("wb") as f:
        block = b"0123456789abcdef" * 65536  # 1 MiB, no newline
        for i in range(64):
            f.write(block if i != 40 else block[:-20] + b" error: at 40 MiB  ")
    out, peak = peak_growth(lambda: project_process(path, exit_code=1))
    assert peak <= 4 * MIB
    assert out == "\n".join(
        [
            "Process exit code 1. Output: 1 lines, 64.0 MiB.",
            "Showing 1 of 1 lines: first 1, 0 diagnostic, last 0.",
            "1: " + "0123456789abcdef" * 62 + "01…",
            f"Full output: {path} {FULL}",
        ]
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
    assert_bounded(out, path)
    assert f"\n{count}: ld: error: undefined symbol: main\n" in out  # the last line, in the tail


def test_a_keyword_deep_inside_a_16_mib_line_is_a_diagnostic(tmp_path):
    path = tmp_path / "output.txt"
    with path.open("wb") as f:
        f.write(b"h1\nh2\n")
        for i in range(16):
            f.write(b"-" * MIB if i != 9 else b"-" * (MIB - 30) + b" Traceback: " + b"-" * 18)
        f.write(b"\nt1\nt2\nt3")
    out, peak = peak_growth(lambda: project_process(path, exit_code=1))
    assert peak <= 4 * MIB
    assert out.split("\n")[1] == "Showing 6 of 6 lines: first 2, 1 diagnostic, last 3."
    assert "\n3: ---" in out


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


# --- properties: budgets, and the streamed pass equals the reference --------------------------

TOKENS = [
    b"a",
    b"Z9_",
    b" ",
    b"\t",
    b"\r",
    b"\x00",
    b"\xff",
    b"\xe2\x82",
    "é".encode(),
    "€".encode(),
    "😀".encode(),
    b"error",
    b"ERRORS",
    b"warn",
    b"Warning",
    b"fail",
    b"failed",
    b"failure",
    b"fatal",
    b"exception",
    b"Traceback",
    b"panic",
    b"denied",
    b"timeout",
    b"timed out",
    b"Segmentation fault",
    b"x" * 700,
]
line_st = st.lists(st.tuples(st.sampled_from(TOKENS), st.integers(1, 8)), max_size=6).map(
    lambda parts: b"".join(tok * n for tok, n in parts)
)
file_st = st.tuples(st.lists(line_st, max_size=40), st.booleans()).map(
    lambda t: b"\n".join(t[0]) + (b"\n" if t[1] and t[0] else b"")
)
kwargs_st = st.fixed_dictionaries(
    {
        "exit_code": st.sampled_from([0, 1, 2, None]),
        "signal": st.sampled_from([None, "SIGKILL"]),
        "timed_out": st.booleans(),
        "timeout_seconds": st.sampled_from([1, 120]),
        "not_stored_bytes": st.sampled_from([0, 0, 1, 5000]),
    }
)
SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(
    data=file_st,
    kwargs=kwargs_st,
    chunk=st.integers(1, 300),
    rejects=st.sampled_from([0, 1, 64]),
)
def test_streamed_pass_equals_the_reference(tmp_path, data, kwargs, chunk, rejects):
    path = write(tmp_path, data)
    saved = process.CHUNK_BYTES, process._REJECTS_BEFORE_REGEX
    process.CHUNK_BYTES, process._REJECTS_BEFORE_REGEX = chunk, rejects
    try:
        out = project_process(path, **kwargs)
    finally:
        process.CHUNK_BYTES, process._REJECTS_BEFORE_REGEX = saved
    assert out == reference_process(path, **kwargs)


def test_many_near_misses_switch_to_one_regex_pass(tmp_path, monkeypatch):
    rows = [b"errorless terror_x %d failing" % i for i in range(1, 3001)]
    for i in (1, 2, 500, 1500, 2000, 2001, 2990, 2996, 2997, 2998, 2999, 3000):
        rows[i - 1] += b" [error]"
    path = write(tmp_path, b"\n".join(rows) + b"\n")
    expected = reference_process(path, exit_code=1)
    numbers = [int(x.split(":")[0]) for x in expected.split("\n")[2:-1]]
    assert numbers == [1, 2, 500, 1500, 2000, 2001, 2990, 2995, 2996, 2997, 2998, 2999, 3000]
    for chunk in (1000, 4096, 40_000, 1 << 20):
        monkeypatch.setattr(process, "CHUNK_BYTES", chunk)
        assert project_process(path, exit_code=1) == expected


@SETTINGS
@given(
    rows=st.lists(
        st.tuples(st.sampled_from(TOKENS), st.integers(0, 3000)).map(lambda t: t[0] * t[1]),
        min_size=1,
        max_size=120,
    ),
    kwargs=kwargs_st,
)
def test_a_summary_never_exceeds_16_lines_or_4000_bytes(tmp_path, rows, kwargs):
    data = b"\n".join(rows)
    path = write(tmp_path, data)
    out = project_process(path, **kwargs)
    status, needed = ref_status(
        kwargs["exit_code"], kwargs["signal"], kwargs["timed_out"], kwargs["timeout_seconds"]
    )
    inline = ref_inline(data, status, needed, kwargs["not_stored_bytes"])
    if inline is not None:
        assert out == inline
    else:
        assert_bounded(out, path)
        assert out.startswith(status if needed else "Process exit code 0.")
