"""The process contract: a summary's first line (status sentence, line count, size words, the
capture sentence when capture stopped). The rules in short: tests/projections/process_helpers.py.
"""

from __future__ import annotations

import pytest

from projections.result import project_process

from .process_helpers import MIB, numbered, summary, write

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
