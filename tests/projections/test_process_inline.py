"""The process contract: inline results, and the inline budget of 84 lines and 12,000 bytes.

The status sentence (timeout > signal > exit code) follows the output when it is needed, and
counts toward both limits. The contract's rules in short: tests/projections/process_helpers.py.
"""

from __future__ import annotations

from projections.result import project_process

from .process_helpers import numbered, summary, write

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
