"""The process contract: what a line is (CRLF, lone CR, trailing CR) and how bytes decode
(invalid UTF-8 and U+0000 become U+FFFD), inline and in a summary. The rules in short:
tests/projections/process_helpers.py.
"""

from __future__ import annotations

from projections.result import project_process

from .process_helpers import numbered, summary, write

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
