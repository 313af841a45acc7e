"""``project_log_page`` (``async_bash_logs``): the process contract's profile applied to one page
of a log, shown whole with its footer or summarised with the offset/limit to read the rest.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections import process

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
