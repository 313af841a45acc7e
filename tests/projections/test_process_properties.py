"""The process contract by property: the text does not depend on the chunk size, and the
budgets (inline 84 lines / 12,000 bytes; summary 16 lines / 4,000 bytes) always hold. The rules
in short: tests/projections/process_helpers.py.
"""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections import process
from projections.result import project_process

from .process_helpers import FULL, write

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
