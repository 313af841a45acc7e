"""The process contract: which lines a summary shows (the head, the last diagnostics before
the last three lines, the tail) and the diagnostic keyword regex. The rules in short:
tests/projections/process_helpers.py.
"""

from __future__ import annotations

import pytest

from projections.result import project_process

from .process_helpers import numbered, summary, write

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
