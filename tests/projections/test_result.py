"""Model projection profiles, plain-text, item and terminal results (projections/result.py).

The process contract (``project_process``, in ``projections/process.py``, re-exported by
``projections.result``) is tested in ``test_process_*.py``.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections import process, result
from projections.result import (
    PROFILES,
    project_items,
    project_terminal,
    project_text,
)

PATH = "/data/conversations/c1/calls/k1/attempts/1/result.json"


def size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def line_count(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


# --- profiles ---------------------------------------------------------------------------------


def test_profiles_are_the_spec_table():
    table = {
        name: (p.inline_lines, p.inline_bytes, p.inline_items)
        + (p.overflow_lines, p.overflow_bytes, p.overflow_items, p.strategy)
        for name, p in PROFILES.items()
    }
    assert table == {
        "process_diagnostics": (84, 12_000, None, 16, 4_000, None, "compact_diagnostic"),
        "source_text": (202, 24_000, None, 202, 24_000, None, "continuation_aware"),
        "search_matches": (80, 16_000, None, 80, 16_000, None, "item_aware"),
        "file_listing": (120, 12_000, 120, 120, 12_000, 120, "item_aware"),
        "mutation_acknowledgement": (40, 4_000, None, 40, 4_000, None, "head"),
        "terminal_outcome": (40, 4_000, None, 40, 4_000, None, "tail"),
        "delegated_reports": (60, 6_000, None, 12, 3_000, None, "head"),
        "conservative_fallback": (200, 24_000, None, 200, 24_000, None, "head"),
    }
    assert [n for n, p in PROFILES.items() if p.artifact_index] == ["conservative_fallback"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        PROFILES["source_text"].inline_lines = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        PROFILES["new"] = PROFILES["source_text"]  # type: ignore[index]


def test_result_exports_the_process_contract():
    # result.py exports project_process; it lives in process.py.
    assert result.project_process is process.project_process
    assert (result.CHUNK_BYTES, result.LINE_KEEP_BYTES) == (
        process.CHUNK_BYTES,
        process.LINE_KEEP_BYTES,
    )
    assert set(result.__all__) >= {
        "PROFILES",
        "project_items",
        "project_process",
        "project_terminal",
        "project_text",
        "CHUNK_BYTES",
        "LINE_KEEP_BYTES",
    }


# --- project_text: head, tail, delegated_reports, conservative_fallback --------------------------


def numbered_rows(count: int, width: int = 0) -> list[str]:
    return [f"line {i}".ljust(width, ".") for i in range(1, count + 1)]


def test_inline_text_is_returned_unchanged_without_a_path():
    text = "\n".join(numbered_rows(40)) + "\n"
    assert line_count(text) == 40
    assert project_text(text, profile="mutation_acknowledgement", path=PATH) == text
    assert project_text("", profile="mutation_acknowledgement", path=PATH) == ""
    crlf = "a\r\nb\r\n"
    assert project_text(crlf, profile="terminal_outcome", path=PATH) == crlf


def test_head_keeps_whole_lines_within_the_overflow_lines():
    rows = numbered_rows(41)
    out = project_text("\n".join(rows), profile="mutation_acknowledgement", path=PATH)
    assert out == "\n".join([*rows[:39], f"Showing lines 1-39 of 41. Full result: {PATH}."])
    assert line_count(out) == 40


def test_head_keeps_whole_lines_within_the_overflow_bytes():
    rows = numbered_rows(60, width=150)  # 151 bytes a line with its newline
    out = project_text("\n".join(rows), profile="mutation_acknowledgement", path=PATH)
    footer = f"Showing lines 1-25 of 60. Full result: {PATH}."
    assert 25 * 151 + size(footer) <= 4000 < 26 * 151 + size(footer)
    assert out == "\n".join([*rows[:25], footer])


def test_tail_keeps_whole_lines_from_the_end():
    rows = numbered_rows(45)
    out = project_text("\n".join(rows) + "\n", profile="terminal_outcome", path=PATH)
    assert out == "\n".join([*rows[6:], f"Showing lines 7-45 of 45. Full result: {PATH}."])


def test_delegated_reports_show_a_short_head_and_name_the_report():
    rows = numbered_rows(61)
    report = "/data/conversations/c1/calls/k1/attempts/1/report.html"
    out = project_text("\n".join(rows), profile="delegated_reports", path=report)
    assert out == "\n".join([*rows[:11], f"Showing lines 1-11 of 61. Full result: {report}."])
    wide = numbered_rows(10, width=600)  # 10 lines but 6,010 bytes
    out = project_text("\n".join(wide), profile="delegated_reports", path=report)
    assert out == "\n".join([*wide[:4], f"Showing lines 1-4 of 10. Full result: {report}."])
    assert size(out) <= 3000


def test_crlf_breaks_are_not_shown_in_a_head():
    rows = numbered_rows(50)
    out = project_text("\r\n".join(rows) + "\r\n", profile="mutation_acknowledgement", path=PATH)
    assert out == "\n".join([*rows[:39], f"Showing lines 1-39 of 50. Full result: {PATH}."])


def test_a_first_line_too_long_for_the_budget_is_cut():
    text = "é" * 3000 + "\nsecond line"
    out = project_text(text, profile="mutation_acknowledgement", path=PATH)
    footer = f"Showing lines 1-1 of 2. Full result: {PATH}."
    first, shown_footer = out.split("\n")
    assert shown_footer == footer
    assert first.endswith("…") and set(first[:-1]) == {"é"}
    assert size(out) in (3999, 4000)  # a split "é" is never kept
    out = project_text("x" * 5000 + "\nlast " + "y" * 5000, profile="terminal_outcome", path=PATH)
    last, shown_footer = out.split("\n")
    assert shown_footer == f"Showing lines 2-2 of 2. Full result: {PATH}."
    assert last == "…" + "y" * (4000 - size(shown_footer) - 1 - 3)


ARTIFACTS = [
    {"label": "report.html", "kind": "report", "size": 1234, "path": "/data/a/report.html"},
    {"label": "shot.png", "kind": "image", "size": 1, "path": "/data/a/shot.png"},
]
INDEX = [
    "Artifacts:",
    "- report.html (report, 1.2 KiB): /data/a/report.html",
    "- shot.png (image, 1 byte): /data/a/shot.png",
    "Inspect them with read or grep; do not rerun the tool.",
]


def test_conservative_fallback_adds_the_artifact_index():
    rows = numbered_rows(250)
    out = project_text(
        "\n".join(rows), profile="conservative_fallback", path=PATH, artifacts=ARTIFACTS
    )
    assert out == "\n".join(
        [*rows[:195], f"Showing lines 1-195 of 250. Full result: {PATH}.", *INDEX]
    )
    assert line_count(out) == 200
    plain = project_text("\n".join(rows), profile="conservative_fallback", path=PATH)
    assert plain == "\n".join([*rows[:199], f"Showing lines 1-199 of 250. Full result: {PATH}."])


def test_conservative_fallback_inline_is_unchanged_even_with_artifacts():
    text = "done\n"
    assert (
        project_text(text, profile="conservative_fallback", path=PATH, artifacts=ARTIFACTS) == text
    )


def test_an_artifact_index_too_long_counts_what_it_does_not_list():
    many = [
        {"label": f"f{i}.png", "kind": "image", "size": 10, "path": f"/d/f{i}.png"}
        for i in range(500)
    ]
    rows = numbered_rows(300)
    out = project_text("\n".join(rows), profile="conservative_fallback", path=PATH, artifacts=many)
    lines = out.split("\n")
    assert line_count(out) <= 200 and size(out) <= 24_000
    assert lines[-1] == "Inspect them with read or grep; do not rerun the tool."
    listed = [x for x in lines if x.startswith("- f")]
    assert listed == [f"- f{i}.png (image, 10 bytes): /d/f{i}.png" for i in range(len(listed))]
    assert lines[-2] == f"- {500 - len(listed)} more artifacts not listed."
    assert lines[-len(listed) - 3] == "Artifacts:"
    assert lines[-len(listed) - 4].startswith("Showing lines 1-")


# --- project_text: continuation_aware -----------------------------------------------------------


def read_rows(first: int, last: int, width: int = 0) -> list[str]:
    return [f"{n}\t{'code = ' + str(n):{width}}" for n in range(first, last + 1)]


def test_source_text_continues_with_offset():
    rows = read_rows(1, 300)
    text = "\n".join([*rows, "Range: lines 1-300 of 1000. Continue with offset=301."])
    out = project_text(text, profile="source_text", path=PATH)
    assert out == "\n".join([*rows[:201], "Range: lines 1-201 of 1000. Continue with offset=202."])


def test_source_text_without_a_range_line_ends_at_the_last_line_number():
    rows = read_rows(500, 800)
    out = project_text("\n".join(rows) + "\n", profile="source_text", path=PATH)
    assert out == "\n".join([*rows[:201], "Range: lines 500-700 of 800. Continue with offset=701."])


def test_source_text_within_24000_bytes():
    rows = read_rows(1, 150, width=200)
    out = project_text("\n".join(rows), profile="source_text", path=PATH)
    closing = "Range: lines 1-117 of 150. Continue with offset=118."
    assert out == "\n".join([*rows[:117], closing])
    assert size(out) <= 24_000 < size(out) + size(rows[117]) + 1


def test_source_text_inline_keeps_the_tools_own_range_line():
    text = "1\ta\n2\tb\nRange: lines 1-2 of 9. Continue with offset=3."
    assert project_text(text, profile="source_text", path=PATH) == text


def test_source_text_that_is_not_numbered_uses_a_head():
    rows = [f"answer {i}" for i in range(1, 301)]  # an ask_user result
    out = project_text("\n".join(rows), profile="source_text", path=PATH)
    assert out == "\n".join([*rows[:201], f"Showing lines 1-201 of 300. Full result: {PATH}."])


def test_a_source_line_too_long_for_the_budget_is_cut():
    text = "7\t" + "x" * 30_000 + "\n8\ty\n9\tz"
    out = project_text(text, profile="source_text", path=PATH)
    first, closing = out.split("\n")
    assert closing == "Range: lines 7-7 of 9. Continue with offset=8."
    assert first.startswith("7\txxx") and first.endswith("…")
    assert size(out) == 24_000


@pytest.mark.parametrize("profile", ["process_diagnostics", "search_matches", "file_listing"])
def test_project_text_refuses_profiles_that_are_not_line_based(profile):
    with pytest.raises(ValueError):
        project_text("x\n" * 500, profile=profile, path=PATH)
    with pytest.raises(ValueError):
        project_text("x", profile="no_such_profile", path=PATH)


LINE_PROFILES = [
    "source_text",
    "mutation_acknowledgement",
    "terminal_outcome",
    "delegated_reports",
    "conservative_fallback",
]
text_st = st.lists(
    st.one_of(
        st.text(max_size=40),
        st.text(alphabet="ab\r€😀", max_size=3000),
        st.integers(1, 10**6).map(lambda n: f"{n}\tsource line {n}"),
    ),
    max_size=400,
).map("\n".join)


@settings(max_examples=150, deadline=None)
@given(text=text_st, profile=st.sampled_from(LINE_PROFILES), artifacts=st.booleans())
def test_text_results_respect_their_budgets(text, profile, artifacts):
    p = PROFILES[profile]
    out = project_text(text, profile=profile, path=PATH, artifacts=ARTIFACTS if artifacts else ())
    if line_count(text) <= p.inline_lines and size(text) <= p.inline_bytes:
        assert out == text
    else:
        assert line_count(out) <= p.overflow_lines
        assert size(out) <= p.overflow_bytes
        assert PATH in out or out.split("\n")[-1].startswith("Range: lines ")


# --- project_items ------------------------------------------------------------------------------


def test_items_inline_are_joined_unchanged():
    items = [f"src/a.py:{i}:match {i}" for i in range(80)]
    out = project_items(items, profile="search_matches", path=PATH, noun="matches")
    assert out == "\n".join(items)
    assert project_items([], profile="file_listing", path=PATH, noun="entries") == ""


def test_items_over_the_line_budget():
    items = [f"src/a.py:{i}:match {i}" for i in range(100)]
    out = project_items(items, profile="search_matches", path=PATH, noun="matches")
    assert out == "\n".join(
        [*items[:79], f"Showing 79 of 100 matches; 21 omitted. Full result: {PATH}."]
    )


def test_file_listing_counts_items():
    entries = [f"f{i}" for i in range(121)]
    out = project_items(entries, profile="file_listing", path=PATH, noun="entries")
    assert out == "\n".join(
        [*entries[:119], f"Showing 119 of 121 entries; 2 omitted. Full result: {PATH}."]
    )
    assert line_count(out) == 120


def test_an_item_that_does_not_fit_is_skipped_for_later_smaller_ones():
    items = ["a" * 1499] * 10 + ["b" * 3000, "c1", "c2", "d" * 2000, "c3"]
    out = project_items(items, profile="search_matches", path=PATH, noun="matches")
    assert out == "\n".join(
        [
            *items[:10],
            "c1",
            "c2",
            "c3",
            f"Showing 13 of 15 matches; 2 omitted. Full result: {PATH}.",
        ]
    )
    assert size(out) <= 16_000


def test_one_item_uses_the_singular_noun():
    out = project_items(["x" * 20_000], profile="search_matches", path=PATH, noun="matches")
    assert out == f"Showing 0 of 1 match; 1 omitted. Full result: {PATH}."
    out = project_items(["y" * 13_000], profile="file_listing", path=PATH, noun="entry")
    assert out == f"Showing 0 of 1 entry; 1 omitted. Full result: {PATH}."


def test_multiline_items_count_their_lines():
    items = ["a\nb\nc"] * 30  # 90 lines
    out = project_items(items, profile="search_matches", path=PATH, noun="matches")
    assert out == "\n".join(
        [*items[:26], f"Showing 26 of 30 matches; 4 omitted. Full result: {PATH}."]
    )


def test_project_items_refuses_other_profiles():
    with pytest.raises(ValueError):
        project_items(["a"], profile="source_text", path=PATH, noun="matches")


@settings(max_examples=150, deadline=None)
@given(
    items=st.lists(st.text(alphabet="ab €", max_size=900), max_size=200),
    profile=st.sampled_from(["search_matches", "file_listing"]),
)
def test_item_results_respect_their_budgets(items, profile):
    p = PROFILES[profile]
    out = project_items(items, profile=profile, path=PATH, noun="matches")
    joined = "\n".join(items)
    if (
        (p.inline_items is None or len(items) <= p.inline_items)
        and line_count(joined) <= p.inline_lines
        and size(joined) <= p.inline_bytes
    ):
        assert out == joined
        return
    assert line_count(out) <= p.overflow_lines and size(out) <= p.overflow_bytes
    body, _, footer = out.rpartition("\n")
    noun = "match" if len(items) == 1 else "matches"
    shown = int(footer.split()[1])
    assert footer == (
        f"Showing {shown} of {len(items)} {noun}; {len(items) - shown} omitted."
        f" Full result: {PATH}."
    )
    assert p.overflow_items is None or shown <= p.overflow_items
    chosen = body.split("\n") if shown else []
    assert len(chosen) == shown
    rest = iter(items)
    assert all(any(item == c for item in rest) for c in chosen)  # whole items, in order


# --- project_terminal ---------------------------------------------------------------------------


def test_terminal_denied_by_policy_and_by_the_user():
    assert project_terminal(outcome="denied", tool_name="bash", resource="rm -rf build") == (
        "Tool call denied.\n"
        "Tool: bash\n"
        "Reason: Denied by permission policy.\n"
        "Resource: rm -rf build\n"
        "Next action: Do not retry this call as is; ask the user or take another approach."
    )
    assert project_terminal(
        outcome="denied", tool_name="read", reason="Approval denied.", resource="/w/secret.txt"
    ) == (
        "Tool call denied.\n"
        "Tool: read\n"
        "Reason: Approval denied.\n"
        "Resource: /w/secret.txt\n"
        "Next action: Do not retry this call as is; ask the user or take another approach."
    )


def test_terminal_cancelled_indeterminate_failed():
    assert project_terminal(outcome="cancelled", tool_name="web_search") == (
        "Tool call cancelled.\n"
        "Tool: web_search\n"
        "Reason: Cancelled.\n"
        "Next action: Continue only if the user asks for it."
    )
    assert project_terminal(outcome="indeterminate", tool_name="bash", resource="make") == (
        "Tool call outcome unknown: it was stopped while running and its effect could not be "
        "confirmed.\n"
        "Tool: bash\n"
        "Reason: Stopped; the external effect could not be confirmed.\n"
        "Resource: make\n"
        "Next action: Check the current state before retrying."
    )
    assert project_terminal(
        outcome="failed", tool_name="grep", reason="Invalid regex: missing ), position 3\n"
    ) == (
        "Tool call failed.\n"
        "Tool: grep\n"
        "Reason: Invalid regex: missing ), position 3\n"
        "Next action: Fix the cause, then retry if it still makes sense."
    )


def test_terminal_refuses_unknown_outcomes_and_failures_without_a_message():
    with pytest.raises(ValueError):
        project_terminal(outcome="failed", tool_name="bash")
    with pytest.raises(ValueError):
        project_terminal(outcome="completed", tool_name="bash")


def test_a_long_reason_keeps_its_end_within_the_budget():
    traceback = "\n".join(f'  File "x.py", line {i}, in f' for i in range(200))
    reason = f"Traceback (most recent call last):\n{traceback}\nValueError: boom"
    out = project_terminal(outcome="failed", tool_name="host_tool", reason=reason)
    lines = out.split("\n")
    assert len(lines) == 40 and size(out) <= 4000
    assert lines[:3] == [
        "Tool call failed.",
        "Tool: host_tool",
        'Reason: …  File "x.py", line 164, in f',
    ]
    assert lines[-2:] == [
        "ValueError: boom",
        "Next action: Fix the cause, then retry if it still makes sense.",
    ]
    wide = project_terminal(outcome="failed", tool_name="t", reason="é" * 5000 + "end")
    assert size(wide) <= 4000 and wide.split("\n")[2].startswith("Reason: …é")
    assert wide.split("\n")[2].endswith("éend")


def test_a_long_resource_and_tool_name_are_cut():
    command = "\n".join(f"echo {i}" for i in range(50)) + "\n" + "x" * 5000
    out = project_terminal(outcome="cancelled", tool_name="n" * 400, resource=command)
    lines = out.split("\n")
    assert lines[1] == "Tool: " + "n" * 253 + "…"
    assert lines[2] == "Reason: Cancelled."
    assert lines[3:11] == ["Resource: echo 0", *(f"echo {i}" for i in range(1, 7)), "echo 7…"]
    assert lines[11:] == ["Next action: Continue only if the user asks for it."]
    assert size(out) <= 4000 and len(lines) <= 40


@settings(max_examples=100, deadline=None)
@given(
    outcome=st.sampled_from(["denied", "cancelled", "indeterminate", "failed"]),
    reason=st.text(alphabet="ab\n€\x00", min_size=1, max_size=9000),
    resource=st.none() | st.text(alphabet="cd\n😀", max_size=3000),
    tool_name=st.text(min_size=1, max_size=300),
)
def test_terminal_outcomes_stay_within_40_lines_and_4000_bytes(
    outcome, reason, resource, tool_name
):
    if not reason.rstrip("\r\n"):
        reason = "x"
    out = project_terminal(outcome=outcome, tool_name=tool_name, reason=reason, resource=resource)
    assert line_count(out) <= 40 and size(out) <= 4000
    assert "\x00" not in out
