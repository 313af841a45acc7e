"""The path tools on real files: read, grep, find, ls, and what the model sees of their results."""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.model import model_content
from projections.result import PROFILES
from projections.units import utf8_len
from tools.catalog import CORE_TOOLS
from tools.runtime import registry
from tools.runtime.base import HandlerResult, ToolError
from tools.runtime.files import blocking, find, grep, listing, read
from tools.runtime.files import ls as ls_tool
from tools.runtime.paths import workspace_ready

from .file_helpers import call_context

RESULT_PATH = "/data/conversations/c1/tool-calls/k1/g1/result.json"
RANGE = re.compile(r"Range: lines (\d+)-(\d+) of (\d+)\. Continue with offset=(\d+)\.")


@pytest.fixture
def ws(tmp_path) -> Path:
    ctx = call_context("ls", {})
    return workspace_ready(ctx)


async def run(tool: str, ws: Path, **arguments) -> HandlerResult:
    ctx = call_context(tool, arguments, workspace=ws)
    return await registry.handler_for(tool)(ctx)


async def refused(tool: str, ws: Path, **arguments) -> str:
    with pytest.raises(ToolError) as error:
        await run(tool, ws, **arguments)
    return error.value.message


def model_text(tool: str, result: HandlerResult) -> str:
    """The model's view as settlement computes it (services/settlement.py ``_prepare``), naming
    the ``result.json`` the item tools wrote."""
    path = next((str(f.path) for f in result.files if f.kind == "payload"), RESULT_PATH)
    [block] = model_content(
        tool_name=tool,
        profile=CORE_TOOLS[tool].profile,
        outcome=result.outcome,
        text=result.text,
        items=result.items,
        item_count=result.item_count,
        note=result.note,
        path=path,
    )
    return block["text"]


def stored(result: HandlerResult) -> dict:
    """The ``result.json`` an item tool wrote (the one file it hands to settlement)."""
    [file] = result.files
    assert (file.path.name, file.kind, file.media_type) == (
        "result.json",
        "payload",
        "application/json",
    )
    assert not file.path.with_name("result.json.part").exists()
    return json.loads(file.path.read_bytes())


def lines_file(path: Path, count: int, *, width: int = 0) -> Path:
    path.write_text("".join(f"line {i}{'.' * width}\n" for i in range(1, count + 1)))
    return path


def test_the_registry_holds_the_path_tools():
    assert set(registry.HANDLERS) >= {"read", "grep", "find", "ls"}
    assert registry.handler_for("read") is read.read
    assert registry.handler_for("mcp__notes__lookup") is None


# --- read -------------------------------------------------------------------------------------


async def test_read_numbers_lines_and_says_nothing_more_when_the_file_ends(ws):
    (ws / "a.py").write_text("import os\n\nprint(os.sep)\n")
    result = await run("read", ws, path="a.py")
    assert result.outcome == "completed"
    assert result.text == "1\timport os\n2\t\n3\tprint(os.sep)"
    assert result.result == {
        "path": str(ws.resolve() / "a.py"),
        "offset": 1,
        "limit": 200,
        "returnedLines": 3,
        "totalLines": 3,
        "nextOffset": None,
        "size": 25,
        "cutLines": 0,
        "binary": False,
    }
    assert model_text("read", result) == result.text


async def test_read_offset_and_limit_end_with_the_range_line(ws):
    lines_file(ws / "ten.txt", 10)
    result = await run("read", ws, path="ten.txt", offset=3, limit=4)
    assert result.text.split("\n") == [
        "3\tline 3",
        "4\tline 4",
        "5\tline 5",
        "6\tline 6",
        "Range: lines 3-6 of 10. Continue with offset=7.",
    ]
    assert (result.result["totalLines"], result.result["nextOffset"]) == (10, 7)
    last = await run("read", ws, path="ten.txt", offset=7, limit=4)
    assert last.text.split("\n")[-1] == "10\tline 10"
    assert last.result["nextOffset"] is None


async def test_read_default_limit_is_200_lines(ws):
    lines_file(ws / "long.txt", 500)
    result = await run("read", ws, path="long.txt")
    lines = result.text.split("\n")
    assert len(lines) == 201 and lines[199] == "200\tline 200"
    assert lines[-1] == "Range: lines 1-200 of 500. Continue with offset=201."
    assert model_text("read", result) == result.text  # within the profile's inline budget


async def test_the_projection_cuts_a_long_page_by_its_range_line(ws):
    lines_file(ws / "big.txt", 3000)
    result = await run("read", ws, path="big.txt", limit=2000)
    assert result.text.count("\n") == 2000
    seen = model_text("read", result)
    shown = seen.split("\n")
    profile = PROFILES["source_text"]
    assert len(shown) <= profile.overflow_lines and utf8_len(seen) <= profile.overflow_bytes
    m = RANGE.fullmatch(shown[-1])
    # "of 3000": the projection took T from the tool's own Range line, not from line 2000.
    assert m is not None and m.group(1) == "1" and m.group(3) == "3000"
    assert int(m.group(4)) == int(m.group(2)) + 1 == len(shown)
    assert shown[-2] == f"{len(shown) - 1}\tline {len(shown) - 1}"
    assert RESULT_PATH not in seen  # the rest is read from the same file by offset


async def test_read_past_the_end_and_an_empty_file_say_so(ws):
    lines_file(ws / "ten.txt", 10)
    result = await run("read", ws, path="ten.txt", offset=11)
    assert result.text == (
        "No lines to show: offset 11 is past the end of the file, which has 10 lines."
    )
    assert result.result["totalLines"] == 10 and result.result["returnedLines"] == 0
    far = await run("read", ws, path="ten.txt", offset=10**9)
    assert "which has 10 lines" in far.text
    (ws / "no-eol.txt").write_bytes(b"a\nb")
    assert "which has 2 lines" in (await run("read", ws, path="no-eol.txt", offset=3)).text
    assert "which has 2 lines" in (await run("read", ws, path="no-eol.txt", offset=9)).text
    (ws / "empty.txt").write_text("")
    assert (await run("read", ws, path="empty.txt")).text == "The file is empty (0 lines)."


async def test_read_a_last_line_without_newline_crlf_and_a_lone_cr(ws):
    (ws / "no-eol.txt").write_bytes(b"a\nb")
    result = await run("read", ws, path="no-eol.txt")
    assert result.text == "1\ta\n2\tb" and result.result["totalLines"] == 2
    (ws / "crlf.txt").write_bytes(b"one\r\ntwo\r\nthree\rstill three\r\n")
    crlf = await run("read", ws, path="crlf.txt", limit=1)
    assert crlf.text == "1\tone\nRange: lines 1-1 of 3. Continue with offset=2."
    rest = await run("read", ws, path="crlf.txt", offset=2)
    assert rest.text == "2\ttwo\n3\tthree\rstill three"


async def test_read_decodes_invalid_utf8_with_replacement(ws):
    (ws / "latin1.txt").write_bytes("café\n".encode("latin-1") + b"ok \xe2\x82\n")
    result = await run("read", ws, path="latin1.txt")
    assert result.text == "1\tcaf\ufffd\n2\tok \ufffd"


async def test_read_shows_a_late_nul_byte_as_a_replacement_character(ws):
    (ws / "late-nul.txt").write_bytes(b"x" * 9000 + b"\n" + b"a\x00b\n")
    result = await run("read", ws, path="late-nul.txt", offset=2)
    assert result.text == "2\ta\ufffdb"


async def test_read_describes_a_binary_file_instead_of_showing_it(ws):
    (ws / "blob.bin").write_bytes(b"\x7fELF\x00\x01" + bytes(range(256)) * 40)
    result = await run("read", ws, path="blob.bin")
    assert result.outcome == "completed"
    assert result.text.startswith("Binary file (10.0 KiB): its first bytes hold NUL bytes")
    assert result.result["binary"] is True and result.result["totalLines"] is None


async def test_read_cuts_a_long_line_reading_only_its_head(ws):
    (ws / "min.js").write_bytes(b"x" * (3 * 1024 * 1024) + b"\nnext\n")
    result = await run("read", ws, path="min.js")
    first, second = result.text.split("\n")
    assert first.startswith("1\txxx") and first.endswith("…")
    assert utf8_len(first.removeprefix("1\t")) <= read.LINE_MAX_BYTES
    assert second == "2\tnext"
    assert result.result["cutLines"] == 1


async def test_read_refuses_directories_fifos_missing_files_and_outside_paths(ws, tmp_path):
    (ws / "src").mkdir()
    assert await refused("read", ws, path="src") == (
        "Not a file: src is a directory; list it with ls."
    )
    os.mkfifo(ws / "pipe")
    assert await refused("read", ws, path="pipe") == "Not a regular file: pipe."
    assert await refused("read", ws, path="missing.txt") == "Not found: missing.txt."
    (tmp_path / "secret.txt").write_text("secret\n")
    (ws / "leak").symlink_to(tmp_path / "secret.txt")
    assert "leak resolves outside the workspace" in await refused("read", ws, path="leak")
    assert "resolves outside" in await refused("read", ws, path="../../secret.txt")


async def test_read_bounds_offset_and_limit_even_past_the_catalog(ws):
    lines_file(ws / "a.txt", 3)
    assert "'limit'" in await refused("read", ws, path="a.txt", limit=0)
    assert "at most 2000" in await refused("read", ws, path="a.txt", limit=2001)
    assert "'offset'" in await refused("read", ws, path="a.txt", offset=0)


async def test_read_follows_the_managed_files_by_absolute_path(ws):
    ctx = call_context("read", {}, workspace=ws)
    output = ctx.managed_root / "tool-calls" / "k1" / "g1" / "output.txt"
    output.parent.mkdir(parents=True)
    lines_file(output, 5)
    ctx.arguments.update(path=str(output), offset=4)
    result = await read.read(ctx)
    assert result.text == "4\tline 4\n5\tline 5"


async def test_read_at_a_large_offset_reads_forward_to_it(ws):
    lines_file(ws / "many.txt", 200_000)
    result = await run("read", ws, path="many.txt", offset=150_000, limit=2)
    assert result.text.split("\n") == [
        "150000\tline 150000",
        "150001\tline 150001",
        "Range: lines 150000-150001 of 200000. Continue with offset=150002.",
    ]


def _bytes_read() -> int:
    with open("/proc/self/io") as io:
        return int(next(line for line in io if line.startswith("rchar:")).split()[1])


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="counts bytes read via /proc")
async def test_a_100_mib_file_at_offset_1_reads_only_its_head(ws):
    big = ws / "big.log"
    line = b"2026-11-29T18:00:00.000Z INFO worker 7 handled request 123456 ok\n"
    with big.open("wb") as out:
        block = line * (1024 * 1024 // len(line) + 1)
        while out.tell() < 100 * 1024 * 1024:
            out.write(block)
    before = _bytes_read()
    result = await run("read", ws, path="big.log")
    assert _bytes_read() - before < 4 * 1024 * 1024
    lines = result.text.split("\n")
    assert len(lines) == 201 and lines[0] == "1\t" + line.decode().rstrip("\n")
    assert lines[-1] == (
        "Range: lines 1-200; more follow in this 100.0 MiB file (not counted). "
        "Continue with offset=201."
    )
    assert result.result["totalLines"] is None and result.result["nextOffset"] == 201
    # Not a line the projection can re-cut by: the page stays within the inline budget.
    assert model_text("read", result) == result.text


async def test_an_uncounted_long_page_is_kept_within_the_inline_budget(ws, monkeypatch):
    monkeypatch.setattr(read, "COUNT_MAX_BYTES", 1000)
    lines_file(ws / "wide.txt", 3000, width=300)
    result = await run("read", ws, path="wide.txt", limit=2000)
    profile = PROFILES["source_text"]
    assert utf8_len(result.text) <= profile.inline_bytes
    last = result.text.split("\n")[-1]
    shown = result.result["returnedLines"]
    assert shown < 200 and last.endswith(f"Continue with offset={shown + 1}.")
    assert model_text("read", result) == result.text


async def test_the_total_is_counted_exactly_within_the_count_budget(ws):
    lines_file(ws / "mid.txt", 300_000)  # ~3.5 MiB, counted past the page
    result = await run("read", ws, path="mid.txt", limit=1)
    assert result.text.endswith("Range: lines 1-1 of 300000. Continue with offset=2.")


# --- grep -------------------------------------------------------------------------------------


def _tree(ws: Path) -> None:
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "app.py").write_text("import os\nTODO: one\n")
    (ws / "src" / "pkg" / "mod.py").write_text("x = 1\n# todo two\nTODO three\n")
    (ws / "README.md").write_text("TODO docs\r\n")
    (ws / "notes.txt").write_text("nothing here\n")


async def test_grep_items_are_path_line_text(ws):
    _tree(ws)
    result = await run("grep", ws, pattern="TODO")
    assert result.items == [
        "README.md:1:TODO docs",
        "src/app.py:2:TODO: one",
        "src/pkg/mod.py:3:TODO three",
    ]
    whole = stored(result)
    assert whole["matchCount"] == 3 and whole["stopped"] is None
    assert whole["matches"][0] == {"path": "README.md", "line": 1, "text": "TODO docs"}
    assert (whole["truncated"], whole["notStored"]) == (False, 0)
    assert model_text("grep", result) == "\n".join(result.items)


async def test_grep_ignore_case_glob_and_path(ws):
    _tree(ws)
    either = await run("grep", ws, pattern="todo", ignore_case=True)
    assert len(either.items) == 4 and "src/pkg/mod.py:2:# todo two" in either.items
    by_name = await run("grep", ws, pattern="TODO", glob="*.py")
    assert [i.split(":")[0] for i in by_name.items] == ["src/app.py", "src/pkg/mod.py"]
    by_path = await run("grep", ws, pattern="TODO", glob="pkg/*.py", path="src")
    assert by_path.items == ["src/pkg/mod.py:3:TODO three"]
    braces = await run("grep", ws, pattern="TODO", glob="*.{md,txt}")
    assert braces.items == ["README.md:1:TODO docs"]
    one_file = await run("grep", ws, pattern="o", path="src/app.py", glob="*.md")
    assert one_file.items == ["src/app.py:1:import os", "src/app.py:2:TODO: one"]


async def test_grep_matches_within_lines_only(ws):
    (ws / "a.txt").write_text("foo\nbar\nfoo bar\n  indented\n")
    assert (await run("grep", ws, pattern=r"foo\s+bar")).items == ["a.txt:3:foo bar"]
    assert (await run("grep", ws, pattern=r"foo\nbar")).items == ["(No matches in 1 file.)"]
    assert (await run("grep", ws, pattern=r"^bar$")).items == ["a.txt:2:bar"]
    assert (await run("grep", ws, pattern=r"^\s")).items == ["a.txt:4:  indented"]
    empty = await run("grep", ws, pattern=r"x*")
    assert [i.split(":")[1] for i in empty.items] == ["1", "2", "3", "4"]


async def test_grep_counts_lines_across_pieces(ws, monkeypatch):
    monkeypatch.setattr(grep, "FIRST_READ_BYTES", 16)
    monkeypatch.setattr(grep, "CHUNK_BYTES", 37)
    monkeypatch.setattr(grep, "LONG_LINE_BYTES", 64)
    text = "".join("hit\n" if i in (1, 17, 50) else f"filler line {i}\n" for i in range(1, 60))
    (ws / "f.txt").write_text(text + "z" * 200 + "hit")
    result = await run("grep", ws, pattern="hit")
    assert [i.split(":")[1] for i in result.items] == ["1", "17", "50", "60"]


async def test_grep_keeps_every_match_and_the_model_sees_what_fits(ws):
    """Results keep the whole: the search does not stop where one answer is full. All 600
    matches are in result.json; the model sees the first 79 and the path of the rest."""
    for n in range(3):
        (ws / f"f{n}.txt").write_text("".join(f"match {i}\n" for i in range(200)))
    result = await run("grep", ws, pattern="match")
    whole = stored(result)
    assert whole["matchCount"] == 600 and whole["stopped"] is None
    assert len(whole["matches"]) == 600 and whole["matches"][-1]["text"] == "match 199"
    assert result.item_count == 600 and result.note is None
    text = model_text("grep", result)
    lines = text.split("\n")
    assert lines[:2] == ["f0.txt:1:match 0", "f0.txt:2:match 1"] and len(lines) == 80
    assert lines[-1] == (
        f"Showing 79 of 600 matches; 521 omitted. Full result: {result.files[0].path}."
    )
    assert utf8_len(text) <= PROFILES["search_matches"].overflow_bytes


async def test_grep_long_lines_are_cut_and_fill_the_answer_by_bytes(ws):
    (ws / "wide.txt").write_text("".join(f"match {i} {'y' * 1000}\n" for i in range(200)))
    result = await run("grep", ws, pattern="match")
    assert len(stored(result)["matches"]) == 200
    *matches, footer = model_text("grep", result).split("\n")
    assert footer.startswith(
        f"Showing {len(matches)} of 200 matches; {200 - len(matches)} omitted."
    )
    assert all(utf8_len(m.split(":", 2)[2]) <= grep.MATCH_TEXT_MAX_BYTES for m in matches)
    assert matches[0].endswith("…") and 40 < len(matches) < 79
    assert utf8_len(model_text("grep", result)) <= PROFILES["search_matches"].overflow_bytes


async def test_grep_stops_at_its_time_limit_and_says_so(ws, monkeypatch):
    # A regex that backtracks: each file costs milliseconds however fast the machine is (about
    # 20 ms here: 100 of them take 2 s). The limit is long enough that a loaded machine still
    # opens a first file within it.
    for n in range(100):
        (ws / f"f{n:03}.txt").write_text("a" * 20 + "\n")
    monkeypatch.setattr(grep, "TIME_LIMIT_SECONDS", 0.2)
    result = await run("grep", ws, pattern="(a|aa)+c")
    assert stored(result)["stopped"] == "time"
    assert 0 < stored(result)["filesSearched"] < 100
    [note] = result.items
    assert note.startswith("(Stopped at the 0.2 s time limit after searching ")
    assert note.endswith("files; 0 matches so far. Narrow the path or glob to search the rest.)")


async def test_the_time_limit_bounds_one_pathological_search_too(ws, monkeypatch):
    """One line on which the pattern backtracks for about a minute: the search itself stops at
    the limit (the regex library takes a timeout), it does not run to its end."""
    (ws / "slow.txt").write_text("a" * 38 + "!\n")  # 30 a's take about a second, 38 a minute
    monkeypatch.setattr(grep, "TIME_LIMIT_SECONDS", 0.1)
    started = time.monotonic()
    result = await run("grep", ws, pattern="(a|aa)+b")
    # Stopped near its 0.1 s limit, not after the minute the line takes: the bound leaves a
    # loaded machine room, it does not measure speed.
    assert time.monotonic() - started < 10
    assert stored(result)["stopped"] == "time"


async def test_grep_skips_binary_files_and_symlinks_leading_outside(ws, tmp_path):
    (ws / "a.txt").write_text("needle\n")
    (ws / "blob.bin").write_bytes(b"\x00needle\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("needle outside\n")
    (ws / "leak.txt").symlink_to(outside / "secret.txt")
    (ws / "leakdir").symlink_to(outside)
    (ws / "inside.txt").symlink_to(ws / "a.txt")
    (ws / "loop").symlink_to(ws / "loop")
    result = await run("grep", ws, pattern="needle")
    assert result.items == ["a.txt:1:needle", "inside.txt:1:needle"]
    assert stored(result)["skipped"] == {"binary": 1, "outside": 3, "unreadable": 0}
    none = await run("grep", ws, pattern="nothing")
    assert none.items == [
        "(No matches in 2 files; skipped: 1 binary, 3 leading outside the workspace.)"
    ]


async def test_grep_does_not_enter_version_control_metadata(ws):
    (ws / ".git" / "objects").mkdir(parents=True)
    (ws / ".git" / "config").write_text("needle\n")
    (ws / "a.txt").write_text("needle\n")
    assert (await run("grep", ws, pattern="needle")).items == ["a.txt:1:needle"]
    inside = await run("grep", ws, pattern="needle", path=".git")
    assert inside.items == [".git/config:1:needle"]


async def test_grep_in_the_managed_files_names_them_absolutely(ws):
    ctx = call_context("grep", {"pattern": "error"}, workspace=ws)
    output = ctx.managed_root / "tool-calls" / "k1" / "g1" / "output.txt"
    output.parent.mkdir(parents=True)
    output.write_text("ok\nerror: boom\n")
    ctx.arguments["path"] = str(output.parent)
    result = await grep.grep(ctx)
    assert result.items == [f"{output}:2:error: boom"]


async def test_grep_refuses_a_pattern_that_does_not_compile_and_outside_paths(ws):
    assert (await refused("grep", ws, pattern="(")).startswith(
        "Invalid argument 'pattern': not a valid regular expression"
    )
    assert "resolves outside" in await refused("grep", ws, pattern="x", path="/etc")


# --- find -------------------------------------------------------------------------------------


async def test_find_lists_matching_paths_with_directories_marked(ws):
    _tree(ws)
    (ws / "src" / "pkg" / "tests").mkdir()
    result = await run("find", ws, pattern="*.py")
    assert result.items == ["src/app.py", "src/pkg/mod.py"]
    dirs = await run("find", ws, pattern="p*")
    assert dirs.items == ["src/pkg/"]
    by_path = await run("find", ws, pattern="src/**/*.py")
    assert by_path.items == ["src/app.py", "src/pkg/mod.py"]
    below = await run("find", ws, pattern="**/t*", path="src")
    assert below.items == ["src/pkg/tests/"]
    assert stored(result)["entryCount"] == 2 and stored(result)["stopped"] is None
    assert stored(result)["entries"] == result.items
    assert model_text("find", result) == "src/app.py\nsrc/pkg/mod.py"
    nothing = await run("find", ws, pattern="*.rs")
    assert nothing.items[0].startswith("(No entries match among ")


async def test_find_keeps_every_entry_and_the_model_sees_what_fits(ws):
    for n in range(300):
        (ws / f"file{n:03}.txt").write_text("")
    result = await run("find", ws, pattern="*.txt")
    whole = stored(result)
    assert whole["entries"] == [f"file{n:03}.txt" for n in range(300)]
    assert (whole["entryCount"], whole["stopped"], whole["truncated"]) == (300, None, False)
    lines = model_text("find", result).split("\n")
    assert lines[:119] == whole["entries"][:119] and len(lines) == 120
    assert lines[-1] == (
        f"Showing 119 of 300 entries; 181 omitted. Full result: {result.files[0].path}."
    )


async def test_find_stops_at_its_time_limit(ws, monkeypatch):
    for d in range(10):
        folder = ws / f"d{d}"
        folder.mkdir()
        for f in range(20):
            (folder / f"f{f:02}.txt").write_text("")
    monkeypatch.setattr(find, "TIME_LIMIT_SECONDS", 0.0)  # spent before the first entry
    result = await run("find", ws, pattern="*.none")
    assert stored(result)["stopped"] == "time"
    assert stored(result)["walked"]["entries"] < 210
    assert result.items == [
        "(Stopped at the 0 s time limit after 0 entries; 0 entries matched so far. "
        "Narrow the path to search the rest.)"
    ]


async def test_find_skips_symlinks_leading_outside_and_needs_a_directory(ws, tmp_path):
    (tmp_path / "out.py").write_text("")
    (ws / "leak.py").symlink_to(tmp_path / "out.py")
    (ws / "real.py").write_text("")
    (ws / "alias.py").symlink_to(ws / "real.py")
    result = await run("find", ws, pattern="*.py")
    assert result.items == ["alias.py", "real.py"]
    assert stored(result)["walked"]["skippedOutside"] == 1
    assert await refused("find", ws, pattern="*", path="real.py") == (
        "Not a directory: real.py; find searches a directory."
    )


# --- ls ---------------------------------------------------------------------------------------


async def test_ls_lists_one_directory_sorted_with_marks(ws, tmp_path):
    _tree(ws)
    (ws / ".env").write_text("")
    (ws / "link").symlink_to(tmp_path)
    result = await run("ls", ws)
    assert result.items == [".env", "README.md", "link@", "notes.txt", "src/"]
    assert stored(result) == {
        "path": str(ws.resolve()),
        "entries": result.items,
        "truncated": False,
        "notStored": 0,
        "total": 5,
    }
    assert (await run("ls", ws, path="src")).items == ["app.py", "pkg/"]
    assert model_text("ls", result) == "\n".join(result.items)


async def test_ls_of_150_entries_keeps_them_all_and_names_its_result(ws):
    """The issue's case: 150 entries. result.json holds all 150; the model sees the 119 that
    fit with the footer, which names result.json by its absolute path."""
    for n in range(150):
        (ws / f"e{n:03}").write_text("")
    result = await run("ls", ws)
    whole = stored(result)
    assert whole["entries"] == [f"e{n:03}" for n in range(150)]
    assert (whole["total"], whole["truncated"], whole["notStored"]) == (150, False, 0)
    path = result.files[0].path
    assert path.is_absolute() and path.name == "result.json"
    assert model_text("ls", result) == "\n".join(
        [*whole["entries"][:119], f"Showing 119 of 150 entries; 31 omitted. Full result: {path}."]
    )


async def test_ls_of_an_empty_workspace_creates_it_and_refuses_files(tmp_path):
    ctx = call_context("ls", {})
    result = await registry.handler_for("ls")(ctx)
    assert ctx.workspace.is_dir() and result.items == ["(Empty directory.)"]
    (ctx.workspace / "a.txt").write_text("")
    ctx.arguments["path"] = "a.txt"
    with pytest.raises(ToolError, match=re.escape("Not a directory: a.txt; read it with read.")):
        await registry.handler_for("ls")(ctx)


# --- the thread -------------------------------------------------------------------------------


async def test_a_cancelled_call_asks_its_thread_to_stop():
    started, stopped = threading.Event(), threading.Event()

    def work(stop: threading.Event) -> None:
        started.set()
        if stop.wait(30):
            stopped.set()

    task = asyncio.ensure_future(blocking.in_thread(work))
    await asyncio.to_thread(started.wait, 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(stopped.wait, 30)


# --- properties: any bytes, any chunking, the same lines as the reference ---------------------

_ALPHABET = st.sampled_from(
    [b"a", b"b", b"ab ", b"\n", b"\r", b"\r\n", b"\xc3\xa9", b"\xff", b"\t"]
)
_CONTENT = st.lists(_ALPHABET, max_size=60).map(b"".join)


def _reference_lines(data: bytes) -> list[str]:
    """The lines of the conventions, decoded as the tools decode them."""
    if not data:
        return []
    parts = data.split(b"\n")
    if data.endswith(b"\n"):
        parts.pop()
        parts = [p[:-1] if p.endswith(b"\r") else p for p in parts]
    else:
        parts = [p[:-1] if p.endswith(b"\r") else p for p in parts[:-1]] + parts[-1:]
    return [p.decode("utf-8", "replace") for p in parts]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=_CONTENT, offset=st.integers(1, 12), limit=st.integers(1, 12), chunk=st.integers(1, 9))
def test_read_pages_any_content_as_the_reference(ws, monkeypatch, data, offset, limit, chunk):
    monkeypatch.setattr(read, "CHUNK_BYTES", chunk)
    (ws / "f.txt").write_bytes(data)
    result = asyncio.run(run("read", ws, path="f.txt", offset=offset, limit=limit))
    lines = _reference_lines(data)
    page = lines[offset - 1 : offset - 1 + limit]
    assert result.result["totalLines"] == len(lines)
    if not page:
        assert result.text.startswith(("No lines to show", "The file is empty"))
        return
    expected = [f"{offset + i}\t{line}" for i, line in enumerate(page)]
    last = offset + len(page) - 1
    if last < len(lines):
        expected.append(
            f"Range: lines {offset}-{last} of {len(lines)}. Continue with offset={last + 1}."
        )
    assert result.text == "\n".join(expected)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=_CONTENT,
    pattern=st.sampled_from(["a", "^a", "b$", "a b", r"\s", "é", "a*", "^$", "\ufffd"]),
    chunk=st.integers(1, 9),
)
def test_grep_finds_the_lines_the_reference_finds(ws, monkeypatch, data, pattern, chunk):
    monkeypatch.setattr(grep, "FIRST_READ_BYTES", chunk)
    monkeypatch.setattr(grep, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(grep, "LONG_LINE_BYTES", 1000)
    (ws / "f.txt").write_bytes(data)
    result = asyncio.run(run("grep", ws, pattern=pattern, path="f.txt"))
    rx = re.compile(pattern)
    # The regex sees each line as split at "\n", a "\r" before the break included (as GNU grep).
    text = data.decode("utf-8", "replace")
    lines = text.split("\n")[:-1] if text.endswith("\n") else text.split("\n") if text else []
    expected = [n for n, line in enumerate(lines, 1) if rx.search(line)]
    assert [m["line"] for m in stored(result)["matches"]] == expected


# --- results keep the whole, up to the cap ------------------------------------------------------


async def test_grep_past_the_16_mib_cap_stores_the_first_matches_and_counts_the_rest(ws):
    """60,000 matches of 300 bytes: about 20 MiB of matches. result.json keeps the first ones
    within 16 MiB of items, says it is truncated and how many were not stored; the search
    itself counts every match, and the model is told where the stored ones are."""
    line = "m" * 299 + "\n"
    (ws / "big.txt").write_text(line * 60_000)
    started = time.monotonic()
    result = await run("grep", ws, pattern="^m")
    whole = stored(result)
    stored_count = len(whole["matches"])
    assert whole["truncated"] is True and whole["matchCount"] == 60_000
    assert whole["notStored"] == 60_000 - stored_count > 0
    items_bytes = sum(
        len(json.dumps(m, separators=(",", ":")).encode()) + 1 for m in whole["matches"]
    )
    item_cost = items_bytes // stored_count
    assert items_bytes - 1 <= listing.RESULT_MAX_BYTES < items_bytes - 1 + item_cost
    assert whole["matches"][-1]["line"] == stored_count  # the first ones, in order
    assert result.files[0].truncated is True
    *shown, note, footer = model_text("grep", result).split("\n")
    assert shown[0] == f"big.txt:1:{'m' * 299}" and len(shown) > 10
    assert note == (
        f"(result.json holds the first {stored_count} matches found: the other "
        f"{60_000 - stored_count} passed its 16 MiB cap and were not stored.)"
    )
    assert footer == (
        f"Showing {len(shown)} of 60000 matches; {60_000 - len(shown)} omitted. "
        f"Full result: {result.files[0].path}."
    )
    assert len(result.items) < 200  # what the projection may show, not the listing
    assert time.monotonic() - started < 20


@pytest.fixture
def crowded(ws) -> Path:
    """1,000 files with 250-byte names: about 250 KiB of entries."""
    folder = ws / "crowd"
    folder.mkdir()
    for n in range(1_000):
        (folder / f"{n:06}{'x' * 244}").write_bytes(b"")
    return folder


def _entries_bytes(entries: list[str]) -> int:
    return sum(len(json.dumps(e, ensure_ascii=False).encode()) + 1 for e in entries) - 1


async def test_ls_and_find_past_the_cap(ws, crowded, monkeypatch):
    """Past the cap, ``ls`` and ``find`` store the first entries within it and count the rest.
    The cap is lowered to 64 KiB here: passing the real 16 MiB takes some 65,000 files of
    long names, costlier than this whole file (``grep`` above passes the real one). ``ls``
    sorts in spilled runs of 300 names, so it merges four of them."""
    monkeypatch.setattr(listing, "RESULT_MAX_BYTES", 64 * 1024)
    monkeypatch.setattr(ls_tool, "RUN_ENTRIES", 300)
    names = sorted(os.listdir(crowded))
    listed = await run("ls", ws, path="crowd")
    whole = stored(listed)
    count = len(whole["entries"])
    assert whole["entries"] == names[:count] and whole["total"] == 1_000
    assert (whole["truncated"], whole["notStored"]) == (True, 1_000 - count)
    assert _entries_bytes(names[:count]) <= 64 * 1024 < _entries_bytes(names[: count + 1])
    assert not [p.name for p in listed.files[0].path.parent.iterdir() if p.name != "result.json"]
    found = await run("find", ws, pattern="*x", path="crowd")
    whole = stored(found)
    assert whole["entries"] == [f"crowd/{n}" for n in names[: len(whole["entries"])]]
    assert (whole["truncated"], whole["entryCount"]) == (True, 1_000)
    assert whole["notStored"] == 1_000 - len(whole["entries"])
    *shown, note, footer = model_text("find", found).split("\n")
    assert shown == whole["entries"][: len(shown)]
    assert note.startswith(f"(result.json holds the first {len(whole['entries'])} entries found")
    assert footer == (
        f"Showing {len(shown)} of 1000 entries; {1000 - len(shown)} omitted. "
        f"Full result: {found.files[0].path}."
    )


async def test_ls_sorts_a_large_directory_in_runs_like_one_sort(ws, monkeypatch):
    """Names with newlines, undecodable bytes and marks sort across spilled runs as one
    ``sorted`` would."""
    monkeypatch.setattr(ls_tool, "RUN_ENTRIES", 7)
    names = [f"n{n % 13}-{n}" for n in range(40)] + ["a\nb", "z\udcff"]
    for name in names:
        (ws / name).write_bytes(b"")
    (ws / "d").mkdir()
    (ws / "l").symlink_to("d")
    result = await run("ls", ws)
    expected = sorted([(n, "") for n in names] + [("d", "/"), ("l", "@")])
    shown = [n.replace("\n", "\\n").replace("\udcff", "\ufffd") + m for n, m in expected]
    assert stored(result)["entries"] == shown
