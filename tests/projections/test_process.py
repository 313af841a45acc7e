"""The process contract of the model projection, shown by worked examples.

``project_process`` (exported by ``projections.result``) turns the captured output file of a
process into the text the model reads: the output itself when it is small, else a summary of at
most 16 lines and 4,000 UTF-8 bytes that names the file. Every expected text below was worked
out by hand from the contract's rules; each test quotes or paraphrases the rule it shows.
docs/projections.md describes the implementation and the points the contract leaves open.

The rules, in short:

* Lines: ``k`` newlines make ``k`` lines when the text ends with one, else ``k + 1``; ``\\r\\n``
  is one break and a lone ``\\r`` is none; a trailing ``\\r`` is removed from every line of a
  summary. Text is decoded as UTF-8 with replacement and U+0000 becomes U+FFFD.
* Inline: the decoded file (``(no output)`` when empty), then, when a status is needed (timed
  out, signalled, or exit code not 0), a newline unless the text ends with one and the status
  sentence. It is the result when capture did not stop and it has <= 84 lines and <= 12,000
  bytes.
* Summary: ``{status} Output: {L} lines, {SIZE}.`` (+ the capture sentence), ``Showing …``, the
  head (first 2 lines), the last <= 8 diagnostic lines among lines 3 … L-3, the last
  ``3 + (8 - D)`` lines not already shown, each ``N: text`` cut to a cap C (largest <= 1,000
  keeping the summary <= 4,000 bytes), then ``Full output: PATH (…).``.

The streaming pass is tuned (chunk size) by patching ``projections.process``.
"""

from __future__ import annotations

import os
import re
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections import process
from projections.result import project_process

MIB = 1024 * 1024
FULL = "(read it with offset/limit or grep it; do not rerun the command)."
# The summary's last line is "Full output: " (13) + path + " " + FULL (1 + 65): 79 + path bytes.
PATH_CHARS = 200  # so with the default path the last line is 279 bytes


def write(tmp_path: Path, data: bytes, length: int = PATH_CHARS, name: str = "output.txt") -> str:
    """Write ``data`` to an absolute path of exactly ``length`` (ASCII) characters; return it.

    The path's line shares the summary's 4,000 bytes, so a fixed length makes the budget, and
    with it every expected text, the same on every machine.
    """
    folder = str(tmp_path)
    room = length - len(folder) - len("/" + name)
    assert room >= 2 and folder.isascii(), folder
    while room:
        part = min(room - 1, 200)
        if room - 1 - part == 1:  # a 1-character remainder would be a "/" with no name
            part -= 1
        folder += "/" + "p" * part
        room -= part + 1
    os.makedirs(folder, exist_ok=True)
    path = f"{folder}/{name}"
    assert len(path) == length and os.path.isabs(path)
    Path(path).write_bytes(data)
    return path


def summary(path: str, *lines: str) -> str:
    """The summary's lines joined by ``\\n`` (no trailing newline), the path line last."""
    return "\n".join([*lines, f"Full output: {path} {FULL}"])


def numbered(first: int, last: int, text: str = "line {}") -> list[str]:
    """Entries ``N: text`` for lines ``first`` … ``last`` whose text is ``text.format(N)``."""
    return [f"{n}: {text.format(n)}" for n in range(first, last + 1)]


# --- inline results ---------------------------------------------------------------------------


def test_small_output_with_exit_code_0_is_returned_unchanged(tmp_path):
    """A result that fits inline is returned unchanged, without a path; exit code 0 needs no
    status sentence."""
    path = write(tmp_path, b"total 0\ndrwxr-xr-x 2 u u 40 .\n")
    assert project_process(path, exit_code=0) == "total 0\ndrwxr-xr-x 2 u u 40 .\n"
    path = write(tmp_path, b"no newline at the end")
    assert project_process(path, exit_code=0) == "no newline at the end"


def test_empty_output_reads_no_output(tmp_path):
    """The inline candidate is ``(no output)`` when the file is empty; a needed status still
    follows it on its own line."""
    path = write(tmp_path, b"")
    assert project_process(path, exit_code=0) == "(no output)"
    assert project_process(path, exit_code=3) == "(no output)\nProcess exit code 3."
    assert project_process(path, exit_code=None, signal="SIGKILL") == (
        "(no output)\nProcess killed by signal SIGKILL."
    )


def test_a_needed_status_follows_the_output_after_a_newline(tmp_path):
    """When a status is needed: a newline (unless the text already ends with one), then the
    status sentence ``Process exit code N.``."""
    path = write(tmp_path, b"make: *** [all] Error 2\n")
    assert project_process(path, exit_code=2) == "make: *** [all] Error 2\nProcess exit code 2."
    path = write(tmp_path, b"no newline")
    assert project_process(path, exit_code=1) == "no newline\nProcess exit code 1."
    assert project_process(path, exit_code=-1) == "no newline\nProcess exit code -1."


def test_status_precedence_is_timeout_then_signal_then_exit_code(tmp_path):
    """Precedence timeout > signal > exit code: ``Process timed out after {timeout_seconds} s
    and was killed.`` / ``Process killed by signal {signal}.`` (printed as given) /
    ``Process exit code {exit_code}.``; a signal makes a status needed even with exit code 0."""
    path = write(tmp_path, b"ok\n")
    both = {"exit_code": 137, "signal": "SIGKILL"}
    assert project_process(path, timed_out=True, timeout_seconds=120, **both) == (
        "ok\nProcess timed out after 120 s and was killed."
    )
    assert project_process(path, exit_code=None, timed_out=True, timeout_seconds=2.5) == (
        "ok\nProcess timed out after 2.5 s and was killed."
    )
    assert project_process(path, **both) == "ok\nProcess killed by signal SIGKILL."
    assert project_process(path, exit_code=0, signal="SIGTERM") == (
        "ok\nProcess killed by signal SIGTERM."
    )
    assert project_process(path, exit_code=137) == "ok\nProcess exit code 137."


# --- the inline threshold: 84 lines, 12,000 bytes -----------------------------------------------

LINES_84 = "".join(f"line {n}\n" for n in range(1, 85))  # 9 * 7 + 75 * 8 = 663 bytes


def test_84_lines_stay_inline_and_85_do_not(tmp_path):
    """The candidate is the result when it has <= 84 lines; 85 lines give the summary: the
    first 2 lines, no diagnostic, so the last 3 + 8 = 11 lines."""
    path = write(tmp_path, LINES_84.encode())
    assert project_process(path, exit_code=0) == LINES_84
    path = write(tmp_path, (LINES_84 + "line 85\n").encode())  # 671 bytes
    assert project_process(path, exit_code=0) == summary(
        path,
        "Process exit code 0. Output: 85 lines, 671 bytes.",
        "Showing 13 of 85 lines: first 2, 0 diagnostic, last 11.",
        "1: line 1",
        "2: line 2",
        *numbered(75, 85),
    )


def test_the_status_sentence_counts_toward_the_84_lines(tmp_path):
    """The status sentence is part of the candidate: 83 lines + status = 84 stay inline; 84
    lines + status = 85 do not (``Output:`` still counts the file's 84 lines)."""
    lines_83 = LINES_84[: LINES_84.index("line 84")]
    path = write(tmp_path, lines_83.encode())
    assert project_process(path, exit_code=1) == lines_83 + "Process exit code 1."
    path = write(tmp_path, LINES_84.encode())
    assert project_process(path, exit_code=1) == summary(
        path,
        "Process exit code 1. Output: 84 lines, 663 bytes.",
        "Showing 13 of 84 lines: first 2, 0 diagnostic, last 11.",
        "1: line 1",
        "2: line 2",
        *numbered(74, 84),
    )
    # Without the final newline the file is 662 bytes and still 84 lines: inline with exit
    # code 0, and 85 lines once "\nProcess exit code 1." is added.
    path = write(tmp_path, LINES_84[:-1].encode())
    assert project_process(path, exit_code=0) == LINES_84[:-1]
    assert project_process(path, exit_code=1) == summary(
        path,
        "Process exit code 1. Output: 84 lines, 662 bytes.",
        "Showing 13 of 84 lines: first 2, 0 diagnostic, last 11.",
        "1: line 1",
        "2: line 2",
        *numbered(74, 84),
    )


ROW = "x" * 199 + "\n"  # 200 bytes
X199 = "x" * 199


def test_12000_bytes_stay_inline_and_12001_do_not(tmp_path):
    """The candidate is the result when it has <= 12,000 UTF-8 bytes. 12,001 bytes are
    ``11.7 KiB`` (11.72 KiB, one decimal)."""
    path = write(tmp_path, (ROW * 60).encode())
    assert project_process(path, exit_code=0) == ROW * 60
    path = write(tmp_path, (ROW * 60 + "y").encode())
    assert project_process(path, exit_code=0) == summary(
        path,
        "Process exit code 0. Output: 61 lines, 11.7 KiB.",
        "Showing 13 of 61 lines: first 2, 0 diagnostic, last 11.",
        f"1: {X199}",
        f"2: {X199}",
        *numbered(51, 60, X199),
        "61: y",
    )


def test_the_status_sentence_counts_toward_the_12000_bytes(tmp_path):
    """11,980 bytes + ``Process exit code 1.`` (20 bytes) = 12,000: inline. One byte more in the
    file (11,981 bytes, 11.70 KiB) makes the candidate 12,001 bytes: the summary."""
    data = ROW * 59 + "x" * 179 + "\n"
    path = write(tmp_path, data.encode())
    assert project_process(path, exit_code=1) == data + "Process exit code 1."
    path = write(tmp_path, (ROW * 59 + "x" * 180 + "\n").encode())
    assert project_process(path, exit_code=1) == summary(
        path,
        "Process exit code 1. Output: 60 lines, 11.7 KiB.",
        "Showing 13 of 60 lines: first 2, 0 diagnostic, last 11.",
        f"1: {X199}",
        f"2: {X199}",
        *numbered(50, 59, X199),
        "60: " + "x" * 180,
    )


def test_the_byte_limit_counts_the_decoded_text(tmp_path):
    """The 12,000 bytes are UTF-8 bytes of the candidate, the *decoded* text: an invalid byte
    becomes U+FFFD, 3 bytes. 11,998 file bytes with one 0xFF decode to 12,000 (inline); 11,999
    decode to 12,001 (summary)."""
    data = (ROW * 59).encode() + b"\xff" + b"z" * 196 + b"\n"
    assert len(data) == 11_998
    path = write(tmp_path, data)
    assert project_process(path, exit_code=0) == ROW * 59 + "\ufffd" + "z" * 196 + "\n"
    path = write(tmp_path, (ROW * 59).encode() + b"\xff" + b"z" * 197 + b"\n")
    assert project_process(path, exit_code=0) == summary(
        path,
        "Process exit code 0. Output: 60 lines, 11.7 KiB.",
        "Showing 13 of 60 lines: first 2, 0 diagnostic, last 11.",
        f"1: {X199}",
        f"2: {X199}",
        *numbered(50, 59, X199),
        "60: \ufffd" + "z" * 197,
    )


# --- the summary's first line: status, size, capture ----------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "status"),
    [
        ({"exit_code": 0}, "Process exit code 0."),
        ({"exit_code": 2}, "Process exit code 2."),
        ({"exit_code": None, "signal": "SIGTERM"}, "Process killed by signal SIGTERM."),
        (
            {"exit_code": None, "signal": "SIGKILL", "timed_out": True, "timeout_seconds": 5},
            "Process timed out after 5 s and was killed.",
        ),
    ],
)
def test_a_summary_starts_with_the_status_sentence(tmp_path, kwargs, status):
    """Summary line 1 is ``{status sentence} Output: {L} lines, {SIZE}.``, the sentence being
    ``Process exit code 0.`` when no status is needed."""
    path = write(tmp_path, b"tick\n" * 100)  # 500 bytes
    assert project_process(path, **kwargs) == summary(
        path,
        f"{status} Output: 100 lines, 500 bytes.",
        "Showing 13 of 100 lines: first 2, 0 diagnostic, last 11.",
        "1: tick",
        "2: tick",
        *numbered(90, 100, "tick"),
    )


def test_capture_stopped_is_never_inline_and_says_what_was_not_stored(tmp_path):
    """With ``not_stored_bytes > 0`` the result is always the summary, its line 1 followed by
    `` Capture stopped at 16 MiB; {size words} not stored.`` (3 MiB + 100 bytes: ``3.0 MiB``)."""
    path = write(tmp_path, b"a\nb\n")
    out = project_process(path, exit_code=0, signal="SIGPIPE", not_stored_bytes=3 * MIB + 100)
    assert out == summary(
        path,
        "Process killed by signal SIGPIPE. Output: 2 lines, 4 bytes. "
        "Capture stopped at 16 MiB; 3.0 MiB not stored.",
        "Showing 2 of 2 lines: first 2, 0 diagnostic, last 0.",
        "1: a",
        "2: b",
    )
    assert project_process(path, exit_code=0, not_stored_bytes=1) == summary(
        path,
        "Process exit code 0. Output: 2 lines, 4 bytes. "
        "Capture stopped at 16 MiB; 1 byte not stored.",
        "Showing 2 of 2 lines: first 2, 0 diagnostic, last 0.",
        "1: a",
        "2: b",
    )
    path = write(tmp_path, b"")
    assert project_process(path, exit_code=0, not_stored_bytes=5) == summary(
        path,
        "Process exit code 0. Output: 0 lines, 0 bytes. "
        "Capture stopped at 16 MiB; 5 bytes not stored.",
        "Showing 0 of 0 lines: first 0, 0 diagnostic, last 0.",
    )


SIZE_WORDS = [
    (1, "1 byte"),
    (2, "2 bytes"),
    (1023, "1023 bytes"),
    (1024, "1.0 KiB"),
    (1126, "1.1 KiB"),  # 1.0996
    (1279, "1.2 KiB"),  # 1.2490
    (1280, "1.3 KiB"),  # exactly 1.25: half up
    (10_496, "10.3 KiB"),  # exactly 10.25
    (1_048_575, "1024.0 KiB"),  # the unit is chosen before rounding
    (1_048_576, "1.0 MiB"),
    (1_310_719, "1.2 MiB"),  # 1.2499990
    (1_310_720, "1.3 MiB"),  # exactly 1.25: half up
    (16 * MIB, "16.0 MiB"),
    (5 * 1024 * MIB, "5120.0 MiB"),  # MiB is the largest unit
]


@pytest.mark.parametrize(("n", "words"), SIZE_WORDS)
def test_size_words_of_what_was_not_stored(tmp_path, n, words):
    """Size words: ``1 byte``, ``N bytes`` below 1024, ``X.Y KiB`` below 1 MiB, else ``X.Y MiB``;
    one decimal, rounded half up, the unit chosen before rounding."""
    path = write(tmp_path, b"a\n")
    assert project_process(path, exit_code=0, not_stored_bytes=n) == summary(
        path,
        f"Process exit code 0. Output: 1 lines, 2 bytes. "
        f"Capture stopped at 16 MiB; {words} not stored.",
        "Showing 1 of 1 lines: first 1, 0 diagnostic, last 0.",
        "1: a",
    )


@pytest.mark.parametrize(("n", "words"), [sw for sw in SIZE_WORDS if sw[0] <= 1_310_720])
def test_size_words_of_the_file(tmp_path, n, words):
    """``Output: {L} lines, {SIZE}.``: SIZE is the size words of the file's byte size (``1 lines``
    is the contract's fixed wording)."""
    path = write(tmp_path, b"x" * n)
    out = project_process(path, exit_code=0, not_stored_bytes=1)
    assert out.split("\n")[0] == (
        f"Process exit code 0. Output: 1 lines, {words}. "
        "Capture stopped at 16 MiB; 1 byte not stored."
    )


# --- lines: CRLF, lone CR, invalid UTF-8, U+0000 ----------------------------------------------


def test_carriage_returns_are_kept_inline(tmp_path):
    """The inline candidate is the decoded file with nothing else changed (``\\r`` kept);
    ``\\r\\n`` is one line break and a lone ``\\r`` is none."""
    path = write(tmp_path, b"a\r\nb\r\n")
    assert project_process(path, exit_code=1) == "a\r\nb\r\nProcess exit code 1."
    crlf_84 = "".join(f"line {n}\r\n" for n in range(1, 85))  # 84 lines, not 168
    path = write(tmp_path, crlf_84.encode())
    assert project_process(path, exit_code=0) == crlf_84
    progress = "".join(f"{k}%\r" for k in range(100)) + "done\n"  # 1 line, not 101
    path = write(tmp_path, progress.encode())
    assert project_process(path, exit_code=0) == progress
    path = write(tmp_path, b"50%\r")  # a lone \r is no newline: one is added before the status
    assert project_process(path, exit_code=1) == "50%\r\nProcess exit code 1."


def test_summary_lines_lose_a_trailing_carriage_return(tmp_path):
    """In a summary a trailing ``\\r`` is removed from every line, the last one (no ``\\n``
    after it) included; a lone ``\\r`` inside a line is no break and stays."""
    data = "".join(f"line {n}\r\n" for n in range(1, 97)) + "10%\r50%\r100%\r\nend\r\nbye\r"
    assert len(data) == 9 * 8 + 87 * 9 + 14 + 5 + 4 == 878
    path = write(tmp_path, data.encode())
    assert project_process(path, exit_code=0) == summary(
        path,
        "Process exit code 0. Output: 99 lines, 878 bytes.",
        "Showing 13 of 99 lines: first 2, 0 diagnostic, last 11.",
        "1: line 1",
        "2: line 2",
        *numbered(89, 96),
        "97: 10%\r50%\r100%",
        "98: end",
        "99: bye",
    )


def test_a_carriage_return_before_crlf_loses_only_one(tmp_path):
    """``a\\r\\r\\n``: the contract says "a trailing ``\\r`` is removed from every line"; the
    repository reads it as one ``\\r`` removed, so the line shows ``a\\r`` (docs/projections.md,
    "Process contract")."""
    path = write(tmp_path, b"a\r\r\nb\r\n")
    assert project_process(path, exit_code=0, not_stored_bytes=1) == summary(
        path,
        "Process exit code 0. Output: 2 lines, 7 bytes. "
        "Capture stopped at 16 MiB; 1 byte not stored.",
        "Showing 2 of 2 lines: first 2, 0 diagnostic, last 0.",
        "1: a\r",
        "2: b",
    )


def test_invalid_utf8_and_nul_become_replacement_characters_inline(tmp_path):
    """The candidate is the file decoded as UTF-8 with replacement, U+0000 made U+FFFD: each
    invalid byte, or each incomplete sequence, is one U+FFFD."""
    path = write(tmp_path, b"\x00\xffx")
    assert project_process(path, exit_code=0) == "\ufffd\ufffdx"
    path = write(tmp_path, b"bad \xe2\x82 euro\n")
    assert project_process(path, exit_code=1) == "bad \ufffd euro\nProcess exit code 1."
    path = write(tmp_path, b"\xf0\x9f\x98")
    assert project_process(path, exit_code=0) == "\ufffd"


def test_invalid_utf8_and_nul_become_replacement_characters_in_a_summary(tmp_path):
    """Each summary line is decoded as UTF-8 with replacement, then U+0000 becomes U+FFFD; a
    keyword next to a replaced byte still marks a diagnostic."""
    rows = [b"ok"] * 90
    rows[0] = b"bad \xff\xfe byte \x00 nul"  # 17 bytes
    rows[50] = b"\xe2\x82 error: \x00 half a euro"  # 23 bytes
    rows[89] = b"\xf0\x9f\x98"  # 3 bytes
    data = b"\n".join(rows)
    assert len(data) == 17 + 23 + 3 + 87 * 2 + 89 == 306
    path = write(tmp_path, data)
    assert project_process(path, exit_code=1) == summary(
        path,
        "Process exit code 1. Output: 90 lines, 306 bytes.",
        "Showing 13 of 90 lines: first 2, 1 diagnostic, last 10.",
        "1: bad \ufffd\ufffd byte \ufffd nul",
        "2: ok",
        "51: \ufffd error: \ufffd half a euro",
        *numbered(81, 89, "ok"),
        "90: \ufffd",
    )


# --- head, diagnostics, tail ------------------------------------------------------------------


def test_the_last_eight_diagnostics_before_the_last_three_lines(tmp_path):
    """Diagnostics are the last D <= 8 matching lines among lines H+1 … L-3; the tail is the last
    3 + (8 - D) lines not already shown. Matches in the head (1, 2) and in the last 3 lines
    (98-100) are shown there, not counted as diagnostics. Lines 10-30 also match but are not
    among the last 8."""
    rows = [f"row {n}" for n in range(1, 101)]
    for n in (1, 2, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 98, 99, 100):
        rows[n - 1] += ": ERROR here"
    rows[96] += ": Warnings are not warning-s"  # "warning" matches, "Warnings" does not
    data = "\n".join(rows)  # no newline at the end
    assert len(data) == (9 * 5 + 90 * 6 + 7) + 15 * 12 + 28 + 99 == 899
    path = write(tmp_path, data.encode())
    assert project_process(path, exit_code=1) == summary(
        path,
        "Process exit code 1. Output: 100 lines, 899 bytes.",
        "Showing 13 of 100 lines: first 2, 8 diagnostic, last 3.",
        "1: row 1: ERROR here",
        "2: row 2: ERROR here",
        "40: row 40: ERROR here",
        "50: row 50: ERROR here",
        "60: row 60: ERROR here",
        "70: row 70: ERROR here",
        "80: row 80: ERROR here",
        "90: row 90: ERROR here",
        "95: row 95: ERROR here",
        "97: row 97: Warnings are not warning-s",
        "98: row 98: ERROR here",
        "99: row 99: ERROR here",
        "100: row 100: ERROR here",
    )


def test_fewer_diagnostics_give_a_longer_tail(tmp_path):
    """With D = 2 the tail is the last 3 + (8 - 2) = 9 lines not already shown: it skips the
    diagnostic on line 95 instead of showing it twice. ``error`` on line 1 (head) and ``Error``
    on line 99 (last 3 lines) are not diagnostics."""
    rows = [f"step {n}" for n in range(1, 101)]
    rows[0] = "error: in the head"
    rows[39] = "warning: unused variable"
    rows[94] = "fatal: cannot link"
    rows[98] = "make: *** Error 2"
    data = "".join(row + "\n" for row in rows)
    assert len(data) == (9 * 7 + 90 * 8 + 9) + 12 + 17 + 11 + 10 == 842
    path = write(tmp_path, data.encode())
    assert project_process(path, exit_code=2) == summary(
        path,
        "Process exit code 2. Output: 100 lines, 842 bytes.",
        "Showing 13 of 100 lines: first 2, 2 diagnostic, last 9.",
        "1: error: in the head",
        "2: step 2",
        "40: warning: unused variable",
        *numbered(91, 94, "step {}"),
        "95: fatal: cannot link",
        *numbered(96, 98, "step {}"),
        "99: make: *** Error 2",
        "100: step 100",
    )


def test_short_files_head_is_min_2_lines_and_diagnostics_need_room(tmp_path):
    """H = min(2, L); diagnostics come only from lines H+1 … L-3, so in a 4-line file the
    ``error`` on line 3 is a tail line."""
    path = write(tmp_path, b"only\n")
    assert project_process(path, exit_code=0, not_stored_bytes=1) == summary(
        path,
        "Process exit code 0. Output: 1 lines, 5 bytes. "
        "Capture stopped at 16 MiB; 1 byte not stored.",
        "Showing 1 of 1 lines: first 1, 0 diagnostic, last 0.",
        "1: only",
    )
    path = write(tmp_path, b"a\nb\nerror: c\nd\n")
    assert project_process(path, exit_code=0, not_stored_bytes=1) == summary(
        path,
        "Process exit code 0. Output: 4 lines, 15 bytes. "
        "Capture stopped at 16 MiB; 1 byte not stored.",
        "Showing 4 of 4 lines: first 2, 0 diagnostic, last 2.",
        "1: a",
        "2: b",
        "3: error: c",
        "4: d",
    )


def six_lines(path: str, size: int, third: str, diagnostic: bool) -> str:
    """The summary of ``a b THIRD d e f`` (capture stopped): line 3 is the only line in the
    diagnostic range 3 … L-3; when it does not match, the tail takes it (last 4 instead of 3)."""
    return summary(
        path,
        f"Process exit code 0. Output: 6 lines, {size} bytes. "
        "Capture stopped at 16 MiB; 1 byte not stored.",
        "Showing 6 of 6 lines: first 2, {} diagnostic, last {}.".format(
            *((1, 3) if diagnostic else (0, 4))
        ),
        "1: a",
        "2: b",
        f"3: {third}",
        "4: d",
        "5: e",
        "6: f",
    )


@pytest.mark.parametrize(
    "line",
    [
        "error",
        "ERROR: disk full",
        "2 errors generated.",
        "warn: deprecated",
        "WARNING",
        "Fatal: not a git repository",
        "test_x ... FAIL",
        "FAILED (failures=1)",
        "Failure: expected 1",
        "Exception: boom",
        "Traceback (most recent call last):",
        "panic: runtime error",
        "Permission denied",
        "Timeout",
        "Connection timed out",
        "Segmentation fault (core dumped)",
        "SEGMENTATION FAULT",
        "error_x error",  # the second word matches
        "x-error-y",  # "-" is no word character
        "(fail)",
        "caf\u00e9error",  # with re.ASCII "é" is no word character
    ],
)
def test_each_keyword_matches_in_any_case(tmp_path, line):
    """A diagnostic line matches, with ``re.IGNORECASE | re.ASCII``, ``\\b(error|errors|warn|
    warning|fatal|fail|failed|failure|exception|traceback|panic|denied|timeout|timed out|
    segmentation fault)\\b``."""
    data = f"a\nb\n{line}\nd\ne\nf\n".encode()
    path = write(tmp_path, data)
    out = project_process(path, exit_code=0, not_stored_bytes=1)
    assert out == six_lines(path, len(data), line, diagnostic=True)


@pytest.mark.parametrize(
    "line",
    [
        "errorless",
        "terror",
        "failing",
        "warned",
        "Warnings",
        "panicked",
        "timeouts",
        "exceptions",
        "RuntimeException",  # "m" before "e" is a word character: no boundary
        "error_x",  # "_" is a word character
        "x_fail",
        "fail2",
        "2fail",
        "timed  out",  # two spaces
        "time out",
        "segmentation  fault",
        "segmentationfault",
        "deny",
        "TRACEBAC\u212a",  # KELVIN SIGN: IGNORECASE with re.ASCII folds ASCII letters only
        "\u017fegmentation fault",  # LONG S, likewise
    ],
)
def test_words_that_only_contain_a_keyword_do_not_match(tmp_path, line):
    """``\\b`` on both sides: a keyword inside a longer word (letters, digits, ``_``) is not a
    diagnostic; case folding is ASCII only."""
    data = f"a\nb\n{line}\nd\ne\nf\n".encode()
    path = write(tmp_path, data)
    out = project_process(path, exit_code=0, not_stored_bytes=1)
    assert out == six_lines(path, len(data), line, diagnostic=False)


# --- entry caps and the 4,000-byte budget ---------------------------------------------------


def test_an_entry_is_cut_to_1000_bytes_with_an_ellipsis(tmp_path):
    """An entry ``{N}: {text}`` longer than C = 1,000 UTF-8 bytes (number, colon and space
    included) keeps its longest prefix of <= 997 bytes plus ``…``; an entry of exactly 1,000
    bytes stays whole."""
    rows = ["ok"] * 90
    rows[49] = "error: " + "x" * 2000  # entry 11 + 2000 bytes
    rows[87] = "z" * 997  # entry 1001 bytes
    rows[88] = "y" * 996  # entry 1000 bytes
    data = "".join(row + "\n" for row in rows)
    assert len(data) == 87 * 2 + 2007 + 997 + 996 + 90 == 4264  # 4.164 KiB
    path = write(tmp_path, data.encode())
    assert project_process(path, exit_code=1) == summary(
        path,
        "Process exit code 1. Output: 90 lines, 4.2 KiB.",
        "Showing 13 of 90 lines: first 2, 1 diagnostic, last 10.",
        "1: ok",
        "2: ok",
        "50: error: " + "x" * 986 + "…",
        *numbered(81, 87, "ok"),
        "88: " + "z" * 993 + "…",
        "89: " + "y" * 996,
        "90: ok",
    )


def test_a_cut_never_splits_a_code_point(tmp_path):
    """The kept prefix never splits a code point, so a cut entry may be shorter than C: ``2: a``
    (4 bytes) + 496 ``é`` (992) = 996 <= 997, one more ``é`` would be 998; decoded U+FFFD counts
    3 bytes: ``90: `` + 331 of them = 997."""
    rows = [b"ok"] * 90
    rows[1] = b"a" + "é".encode() * 1000
    rows[89] = b"\xff" * 2000
    data = b"\n".join(rows)
    assert len(data) == 88 * 2 + 2001 + 2000 + 89 == 4266  # 4.166 KiB
    path = write(tmp_path, data)
    out = project_process(path, exit_code=0)
    assert out == summary(
        path,
        "Process exit code 0. Output: 90 lines, 4.2 KiB.",
        "Showing 13 of 90 lines: first 2, 0 diagnostic, last 11.",
        "1: ok",
        "2: a" + "é" * 496 + "…",
        *numbered(80, 89, "ok"),
        "90: " + "\ufffd" * 331 + "…",
    )
    assert [len(e.encode()) for e in out.split("\n")[3:15:11]] == [999, 1000]


def test_the_cap_shrinks_to_keep_the_summary_within_4000_bytes(tmp_path):
    """C is the largest value <= 1,000 for which the summary is <= 4,000 UTF-8 bytes. Here 13
    long ASCII entries are C bytes each: 48 + 1 + 55 + 1 (lines 1, 2) + 13 (newlines after the
    entries) + 279 (path line) + 13 * C <= 4000 gives C = 277 (3,998 bytes)."""
    data = ("a" * 1000 + "\n") * 20  # 20,020 bytes = 19.55 KiB
    path = write(tmp_path, data.encode())
    out = project_process(path, exit_code=0)
    assert out == summary(
        path,
        "Process exit code 0. Output: 20 lines, 19.6 KiB.",
        "Showing 13 of 20 lines: first 2, 0 diagnostic, last 11.",
        "1: " + "a" * 271 + "…",
        "2: " + "a" * 271 + "…",
        *numbered(10, 20, "a" * 270 + "…"),
    )
    assert len(out.encode()) == 3998


def test_short_entries_stay_whole_and_long_ones_share_the_room(tmp_path):
    """Many short lines stay whole and long ones share the room evenly. Lines 1 + 2 (49 + 56
    bytes, + 2 newlines), 13 entry newlines, the 279-byte path line and the 9 short entries
    (95 bytes) leave 3,506 bytes for 4 long entries: C = 877 needs 4 * 877 = 3,508. C = 876 fits
    because the ``é`` entry cannot use its last byte (``99: `` + 434 ``é`` = 872 <= 873, then
    ``…``: 875 bytes): 3 * 876 + 875 = 3,503."""
    rows = [f"step {n}" for n in range(1, 101)]
    rows[49] = "error: " + "e" * 3000
    rows[97] = "b" * 3000
    rows[98] = "é" * 2000
    rows[99] = "b" * 3000
    data = "".join(row + "\n" for row in rows).encode()
    assert len(data) == (9 * 6 + 87 * 7) + 3007 + 3000 + 4000 + 3000 + 100 == 13_770
    path = write(tmp_path, data)  # 13.45 KiB
    out = project_process(path, exit_code=1)
    assert out == summary(
        path,
        "Process exit code 1. Output: 100 lines, 13.4 KiB.",
        "Showing 13 of 100 lines: first 2, 1 diagnostic, last 10.",
        "1: step 1",
        "2: step 2",
        "50: error: " + "e" * 862 + "…",
        *numbered(91, 97, "step {}"),
        "98: " + "b" * 869 + "…",
        "99: " + "é" * 434 + "…",
        "100: " + "b" * 868 + "…",
    )
    assert len(out.encode()) == 3997


def drop_rows() -> bytes:
    """20 lines of ~1,000 bytes (20,169 bytes, 19.70 KiB); lines 5 and 6 are diagnostics, so the
    summary shows lines 1, 2 (head), 5, 6 (diagnostics) and 12-20 (tail, 3 + 6 = 9)."""
    rows = [f"line {n} " + "q" * 1000 for n in range(1, 21)]
    rows[4] = "error " + "q" * 1000
    rows[5] = "fatal " + "q" * 1000
    data = "".join(row + "\n" for row in rows).encode()
    assert len(data) == 7 * 1007 + 2 * 1006 + 11 * 1008 + 20 == 20_169
    return data


def test_head_lines_are_dropped_first_the_last_one_first(tmp_path):
    """Only when even C = 40 does not fit are lines dropped, one at a time, head lines first
    (last first), and then C is chosen again.

    A 3,300-byte path (3,379-byte last line): 13 entries at C = 40 (41 bytes with the newline)
    need 104 (lines 1-2 and their newlines) + 533 + 3379 = 4,016; without line 2, 12 need
    104 + 492 + 3379 = 3,975. Then C = 42: 104 + 12 * 43 + 3379 = 3,999."""
    path = write(tmp_path, drop_rows(), length=3300)
    out = project_process(path, exit_code=1)
    assert out == summary(
        path,
        "Process exit code 1. Output: 20 lines, 19.7 KiB.",
        "Showing 12 of 20 lines: first 1, 2 diagnostic, last 9.",
        "1: line 1 " + "q" * 29 + "…",
        "5: error " + "q" * 30 + "…",
        "6: fatal " + "q" * 30 + "…",
        *(f"{n}: line {n} " + "q" * 27 + "…" for n in range(12, 21)),
    )
    assert len(out.encode()) == 3999


def test_lines_are_dropped_when_even_40_bytes_per_entry_do_not_fit(tmp_path):
    """Only when even C = 40 does not fit are lines dropped, one at a time: head lines (last
    first), then tail lines except the file's last line (oldest first), then diagnostics; then C
    is chosen again. Line 2 counts what is finally shown.

    A 3,500-byte path (3,579-byte last line); lines 1-2 and their newlines take 104 bytes while
    line 2 reads "Showing 1x …", 103 after; each entry at C = 40 costs 41. 13 entries need
    104 + 533 + 3579 = 4,216; dropping 2, 1, 12, 13, 14, 15 leaves 7 (103 + 287 + 3579 =
    3,969); then C = 44: 103 + 7 * 45 + 3579 = 3,997."""
    path = write(tmp_path, drop_rows(), length=3500)
    out = project_process(path, exit_code=1)
    assert out == summary(
        path,
        "Process exit code 1. Output: 20 lines, 19.7 KiB.",
        "Showing 7 of 20 lines: first 0, 2 diagnostic, last 5.",
        "5: error " + "q" * 32 + "…",
        "6: fatal " + "q" * 32 + "…",
        *(f"{n}: line {n} " + "q" * 29 + "…" for n in range(16, 21)),
    )
    assert len(out.encode()) == 3997


def test_diagnostics_are_dropped_after_the_tail_oldest_first(tmp_path):
    """Continuing the drop order: once the head and the tail (but its last line) are gone,
    diagnostics go oldest first. A 3,720-byte path (3,799-byte last line): 3 entries at C = 40
    need 103 + 123 + 3799 = 4,025; dropping line 5 leaves 6 and 20 (3,984); then C = 48 gives
    exactly 4,000 bytes."""
    path = write(tmp_path, drop_rows(), length=3720)
    out = project_process(path, exit_code=1)
    assert out == summary(
        path,
        "Process exit code 1. Output: 20 lines, 19.7 KiB.",
        "Showing 2 of 20 lines: first 0, 1 diagnostic, last 1.",
        "6: fatal " + "q" * 36 + "…",
        "20: line 20 " + "q" * 33 + "…",
    )
    assert len(out.encode()) == 4000


def test_a_path_too_long_for_any_entry_drops_the_last_line_too(tmp_path):
    """The contract's drop order ends with the diagnostics; when the file's last line alone still
    does not fit (a 3,800-byte path: 103 + 41 + 3879 = 4,023), the repository drops it too
    (docs/projections.md, "Process contract"): 103 + 3879 = 3,982 bytes."""
    path = write(tmp_path, drop_rows(), length=3800)
    assert project_process(path, exit_code=1) == summary(
        path,
        "Process exit code 1. Output: 20 lines, 19.7 KiB.",
        "Showing 0 of 20 lines: first 0, 0 diagnostic, last 0.",
    )


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
    example above; the ``\\r`` never shows."""
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


# --- properties: chunk-size invariance and the budgets ---------------------------------------

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
def test_the_streamed_pass_does_not_depend_on_the_chunk_size(
    tmp_path, data, kwargs, chunk, rejects
):
    """The projection is a function of the file: reading it in chunks of any size (and
    switching to one regex pass after any number of near misses) gives the same text as reading
    it whole."""
    path = write(tmp_path, data)
    whole = project_process(path, **kwargs)
    saved = process.CHUNK_BYTES, process._REJECTS_BEFORE_REGEX
    process.CHUNK_BYTES, process._REJECTS_BEFORE_REGEX = chunk, rejects
    try:
        out = project_process(path, **kwargs)
    finally:
        process.CHUNK_BYTES, process._REJECTS_BEFORE_REGEX = saved
    assert out == whole


SHOWING = re.compile(r"Showing (\d+) of (\d+) lines: first (\d+), (\d+) diagnostic, last (\d+)\.")


@SETTINGS
@given(
    rows=st.lists(
        st.tuples(st.sampled_from(TOKENS), st.integers(0, 3000)).map(lambda t: t[0] * t[1]),
        min_size=1,
        max_size=120,
    ),
    kwargs=kwargs_st,
)
def test_budgets_are_never_exceeded(tmp_path, rows, kwargs):
    """Whatever the output: an inline result has <= 84 lines and <= 12,000 bytes and starts with
    the decoded file; a summary has <= 16 lines and <= 4,000 bytes, entries of <= 1,000 bytes in
    file order, line 2 counting them, and ends with the path line. No U+0000 ever."""
    data = b"\n".join(rows)
    path = write(tmp_path, data)
    out = project_process(path, **kwargs)
    out.encode()  # valid UTF-8: no lone surrogate
    assert "\x00" not in out
    if kwargs["timed_out"]:
        status = f"Process timed out after {kwargs['timeout_seconds']} s and was killed."
    elif kwargs["signal"]:
        status = f"Process killed by signal {kwargs['signal']}."
    else:
        status = f"Process exit code {kwargs['exit_code']}."
    needed = status != "Process exit code 0."
    if out.endswith(f"Full output: {path} {FULL}"):
        lines = out.split("\n")
        assert len(out.encode()) <= 4000 and len(lines) <= 16
        assert lines[0].startswith(f"{status} Output: ")
        assert ("Capture stopped at 16 MiB;" in lines[0]) == (kwargs["not_stored_bytes"] > 0)
        shown, total, h, d, t = map(int, SHOWING.fullmatch(lines[1]).groups())
        assert shown == h + d + t == len(lines) - 3
        assert h <= 2 and d <= 8 and t <= 3 + 8 - d
        entries = lines[2:-1]
        numbers = [int(e.split(": ", 1)[0]) for e in entries]
        assert numbers == sorted(set(numbers)) and all(1 <= n <= total for n in numbers)
        assert all(len(e.encode()) <= 1000 for e in entries)
        assert total == 0 or numbers[-1] == total  # short path: the last line always shows
    else:
        assert kwargs["not_stored_bytes"] == 0
        assert out.count("\n") + (0 if out.endswith("\n") else 1) <= 84
        assert len(out.encode()) <= 12000
        text = data.decode("utf-8", "replace").replace("\x00", "\ufffd") or "(no output)"
        assert out.startswith(text)
        assert out.endswith(status) if needed else out == text
    # A candidate that surely fits (<= 83 lines with the status, <= 3 bytes per byte + 60 for
    # the status) is inline.
    if kwargs["not_stored_bytes"] == 0 and data.count(b"\n") <= 81 and 3 * len(data) <= 11_900:
        assert not out.endswith(FULL)


# --- a log page (async_bash_logs): the same profile on one page -------------------------------

PAGE = {
    "offset": 0,
    "total_lines": 100,
    "next_offset": None,
    "status": "exited",
    "stream": "output",
    "run_id": "r1",
    "path": "/data/c1/output.txt",
}


def test_a_page_that_fits_is_shown_whole_with_its_footer():
    """84 lines and 12,000 bytes (the lines joined by newlines): shown whole, then the footer."""
    lines = [f"line {n}" for n in range(50)]
    page = {**PAGE, "offset": 10, "total_lines": 300, "next_offset": 60, "status": "running"}
    assert process.project_log_page(lines, **page) == "\n".join(
        [
            *lines,
            "Lines at offsets 10-59 of 300 in the output of async run r1 (running). "
            "Continue with offset=60.",
        ]
    )
    # Exactly at the budget: 84 lines of 141 bytes and 83 newlines are 11,927 bytes; 80 lines
    # of 149 bytes and 79 newlines are 12,000.
    for count, width in ((84, 141), (80, 149)):
        lines = ["x" * width] * count
        text = process.project_log_page(lines, **{**PAGE, "total_lines": count})
        assert text.splitlines()[:-1] == lines
    assert process.project_log_page([], **{**PAGE, "offset": 7, "total_lines": 7}) == (
        "No line at offset 7 (7 lines) in the output of async run r1 (exited)."
    )


def test_a_page_past_the_budget_is_summarised_by_the_process_contract():
    """The reported case: 100 lines of 600 characters (60,099 bytes) reached the model as the
    first 39 lines of the page, 23,956 bytes, naming result.json. Now: at most 16 lines and
    4,000 bytes, head 2, no diagnostic, the page's last 11 lines, each entry cut to the cap C,
    then the file and the offset/limit that read the lines not shown (19 of these lines fit
    12,000 bytes: 19 x 600 + 18 = 11,418)."""
    lines = [f"{n:03d} " + "y" * 596 for n in range(100)]
    text = process.project_log_page(lines, **PAGE)
    first = (
        "Lines at offsets 0-99 of 100 in the output of async run r1 (exited): 100 lines, 58.7 KiB."
    )
    second = "Showing 13 of 100 lines: first 2, 0 diagnostic, last 11."
    last = (
        "Full output: /data/c1/output.txt (read the lines not shown from offset=2 with "
        "limit=19, or grep it; do not rerun the command)."
    )
    # Every entry is longer than the cap, so each is cut to exactly C bytes (C - 3 and "…").
    cap = (4000 - len(first) - len(second) - len(last) - 2 - 13) // 13
    assert cap == 285  # 4,000 - 89 - 56 - 126 - 2 - 13 = 3,714 bytes for 13 entries
    entries = [(f"{n}: " + lines[n])[: cap - 3] + "…" for n in (0, 1, *range(89, 100))]
    assert text == "\n".join([first, second, *entries, last])
    assert len(text.encode()) <= 4000 and len(text.splitlines()) == 16


def test_a_summarised_page_shows_its_diagnostics_and_its_newest_lines():
    """Diagnostics among the page's lines 3 … L-3 (the last 8 at most), the tail the last
    3 + (8 - D) lines not shown; numbered by offset; the continuation when the file goes on.
    18,423 bytes: 10 lines of 207, 78 of 208, 25 + 15, 89 newlines. From offset 402, 58 lines
    fit 12,000 bytes (11,930 with the short line 440; one more is 12,139)."""
    lines = [f"step {n} " + "." * 200 for n in range(90)]
    lines[40] = "warning: disk almost full"
    lines[88] = "ERROR: it broke"  # in the last 3 lines: the tail's, not a diagnostic
    page = {**PAGE, "offset": 400, "total_lines": 1000, "next_offset": 490, "status": "running"}
    text = process.project_log_page(lines, **page)
    rows = text.splitlines()
    assert rows[0] == (
        "Lines at offsets 400-489 of 1000 in the output of async run r1 (running): 90 lines, "
        "18.0 KiB."
    )
    assert rows[1] == "Showing 13 of 90 lines: first 2, 1 diagnostic, last 10."
    numbers = [int(row.split(":", 1)[0]) for row in rows[2:-1]]
    assert numbers == [400, 401, 440, *range(480, 490)]
    assert "440: warning: disk almost full" in rows and "488: ERROR: it broke" in rows
    assert rows[-1] == (
        "Full output: /data/c1/output.txt (read the lines not shown from offset=402 with "
        "limit=58, or grep it; do not rerun the command). Continue with offset=490."
    )
    assert len(text.encode()) <= 4000 and len(rows) <= 16


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=900), max_size=150
    )
)
def test_a_page_is_whole_or_within_16_lines_and_4000_bytes(raw_lines):
    lines = [
        line.replace("\n", " ").replace("\r", " ").replace("\x00", "\ufffd") for line in raw_lines
    ]
    text = process.project_log_page(lines, **{**PAGE, "total_lines": len(lines)})
    joined = "\n".join(lines)
    if len(lines) <= 84 and len(joined.encode()) <= 12_000:
        assert text.startswith(joined)
    else:
        assert len(text.encode()) <= 4000 and len(text.split("\n")) <= 16
