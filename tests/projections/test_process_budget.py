"""The process contract: the entry cap C, the ellipsis cut, the 4,000-byte budget of a summary
and the order in which lines are dropped when even C = 40 does not fit. The rules in short:
tests/projections/process_helpers.py.
"""

from __future__ import annotations

from projections.result import project_process

from .process_helpers import numbered, summary, write

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
