"""Log paging (docs/subsystems/api.md, "Log pages"; docs/architecture.md, "Conventions")."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections import logpages
from projections.logpages import (
    DEFAULT_LIMIT,
    LINE_KEEP_BYTES,
    LINE_MAX_BYTES,
    MAX_LIMIT,
    PAGE_MAX_BYTES,
    LineIndexWriter,
    PageParamError,
    clear_index_cache,
    read_page,
    sidecar_path,
)

ELLIPSIS = "\u2026"
KIB = 1024
MIB = 1024 * KIB


def size(text: str) -> int:
    return len(text.encode("utf-8"))


def write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def append(path: str, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_index_cache()
    yield
    clear_index_cache()


@pytest.fixture(params=["memory", "sidecar"])
def index_dir(request, tmp_path):
    """Both ways of keeping the index: the in-process LRU and the sidecar directory."""
    return None if request.param == "memory" else str(tmp_path / "index")


class ReadCounter:
    """Counts the bytes paging reads from logs, by wrapping the real file it opens."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bytes = 0
        counter = self

        class CountingFile:
            def __init__(self, f):
                self._f = f

            def read(self, n=-1):
                data = self._f.read(n)
                counter.bytes += len(data)
                return data

            def __getattr__(self, name):
                return getattr(self._f, name)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self._f.close()

        def open_counting(path):
            return CountingFile(open(path, "rb"))  # noqa: SIM115 - read_page closes it

        monkeypatch.setattr(logpages, "_open_log", open_counting)

    def take(self) -> int:
        n, self.bytes = self.bytes, 0
        return n


@pytest.fixture
def reads(monkeypatch):
    return ReadCounter(monkeypatch)


def rchar() -> int | None:
    """Bytes this process read through syscalls (Linux), as a check beyond the wrapper."""
    try:
        with open("/proc/self/io") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))
    except OSError:
        return None


# --- lines and shape ---------------------------------------------------------------------------


def test_empty_file_has_no_lines(tmp_path, index_dir):
    path = write(tmp_path / "empty.txt", b"")
    assert read_page(path, index_dir=index_dir) == {
        "lines": [],
        "offset": 0,
        "limit": DEFAULT_LIMIT,
        "totalLines": 0,
        "nextOffset": None,
        "status": None,
        "path": None,
        "truncated": False,
    }
    assert read_page(path, offset=3, index_dir=index_dir)["path"] is None


@pytest.mark.parametrize(
    ("data", "lines"),
    [
        (b"a\nb", ["a", "b"]),
        (b"a\nb\n", ["a", "b"]),
        (b"\n", [""]),
        (b"\n\n", ["", ""]),
        (b"x", ["x"]),
        (b"a\r\nb\r\n", ["a", "b"]),
        (b"a\r\nb\r\nc", ["a", "b", "c"]),
        (b"a\r\r\n", ["a\r"]),
        (b"a\rb\nc\r", ["a\rb", "c\r"]),
        (b"\r", ["\r"]),
        (b"\r\n\r", ["", "\r"]),
    ],
)
def test_lines_follow_the_readme_rule(tmp_path, index_dir, data, lines):
    path = write(tmp_path / "log.txt", data)
    page = read_page(path, index_dir=index_dir)
    assert page["lines"] == lines
    assert page["totalLines"] == len(lines)
    assert page["nextOffset"] is None
    assert page["path"] is None


def test_invalid_utf8_and_nul_become_replacement_characters(tmp_path, index_dir):
    data = b"ok\xff\xfe\n\x00x\n\xe2\x82\n\xed\xa0\x80\nd\xc3\xa9j\xc3\n"
    path = write(tmp_path / "log.txt", data)
    lines = read_page(path, index_dir=index_dir)["lines"]
    assert lines == [
        "ok\ufffd\ufffd",
        "\ufffdx",
        "\ufffd",  # a truncated 3-byte sequence is one replacement
        "\ufffd\ufffd\ufffd",  # an encoded surrogate never leaves as a surrogate
        "d\u00e9j\ufffd",
    ]
    assert not any(0xD800 <= ord(c) <= 0xDFFF or c == "\x00" for line in lines for c in line)
    for line in lines:
        line.encode("utf-8")  # strict: valid UTF-8 on the wire


def test_status_and_truncated_pass_through(tmp_path, index_dir):
    path = write(tmp_path / "log.txt", b"a\n")
    page = read_page(path, status="running", truncated=True, index_dir=index_dir)
    assert (page["status"], page["truncated"]) == ("running", True)


# --- offsets, limits, nextOffset, path -----------------------------------------------------------


@pytest.fixture
def numbered(tmp_path):
    """250 lines ``line 0``…``line 249``."""
    return write(tmp_path / "log.txt", b"".join(b"line %d\n" % i for i in range(250)))


def test_default_page_holds_the_last_limit_lines(numbered, index_dir):
    page = read_page(numbered, index_dir=index_dir)
    assert page["offset"] == 150
    assert page["limit"] == 100
    assert page["lines"] == [f"line {i}" for i in range(150, 250)]
    assert page["totalLines"] == 250
    assert page["nextOffset"] is None
    assert page["path"] == os.path.abspath(numbered)

    short = read_page(numbered, limit=3, index_dir=index_dir)
    assert (short["offset"], short["lines"]) == (247, ["line 247", "line 248", "line 249"])


def test_default_page_of_a_short_file_starts_at_zero(tmp_path, index_dir):
    path = write(tmp_path / "log.txt", b"a\nb\nc")
    page = read_page(path, limit=10, index_dir=index_dir)
    assert (page["offset"], page["lines"], page["path"]) == (0, ["a", "b", "c"], None)


@pytest.mark.parametrize("offset", [250, 251, 10_000])
def test_offset_at_or_past_the_end_answers_an_empty_page(numbered, index_dir, offset):
    page = read_page(numbered, offset=offset, index_dir=index_dir)
    assert page["lines"] == []
    assert page["offset"] == offset
    assert page["totalLines"] == 250
    assert page["nextOffset"] is None
    assert page["path"] == os.path.abspath(numbered)


def test_next_offset_walks_the_file(numbered, index_dir):
    page = read_page(numbered, offset=0, index_dir=index_dir)
    assert page["lines"][0] == "line 0" and len(page["lines"]) == 100
    assert page["nextOffset"] == 100
    page = read_page(numbered, offset=page["nextOffset"], index_dir=index_dir)
    assert page["lines"][0] == "line 100" and page["nextOffset"] == 200
    page = read_page(numbered, offset=page["nextOffset"], index_dir=index_dir)
    assert page["lines"] == [f"line {i}" for i in range(200, 250)]
    assert page["nextOffset"] is None
    exact = read_page(numbered, offset=240, limit=10, index_dir=index_dir)
    assert exact["nextOffset"] is None  # the page reaches the end exactly


def test_path_is_null_only_when_the_page_covers_the_whole_file(tmp_path, index_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "log.txt", b"a\nb\nc\n")
    absolute = str(tmp_path / "log.txt")
    assert read_page("log.txt", index_dir=index_dir)["path"] is None
    assert read_page("log.txt", offset=0, limit=3, index_dir=index_dir)["path"] is None
    assert read_page("log.txt", offset=0, limit=2, index_dir=index_dir)["path"] == absolute
    assert read_page("log.txt", offset=1, index_dir=index_dir)["path"] == absolute
    assert read_page("log.txt", limit=1, index_dir=index_dir)["path"] == absolute


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": MAX_LIMIT + 1}, "limit"),
        ({"limit": -5}, "limit"),
        ({"limit": True}, "limit"),
        ({"limit": "10"}, "limit"),
        ({"offset": -1}, "offset"),
        ({"offset": 1.5}, "offset"),
    ],
)
def test_out_of_range_parameters_raise_with_the_field(tmp_path, kwargs, field):
    path = write(tmp_path / "log.txt", b"a\n")
    with pytest.raises(PageParamError) as raised:
        read_page(path, **kwargs)
    assert raised.value.field == field
    assert isinstance(raised.value, ValueError)


def test_limit_bounds_are_accepted(numbered):
    assert len(read_page(numbered, offset=0, limit=1)["lines"]) == 1
    assert len(read_page(numbered, offset=0, limit=MAX_LIMIT)["lines"]) == 250


# --- budgets ---------------------------------------------------------------------------------------


def test_page_stops_before_passing_512_kib(tmp_path, index_dir):
    line = "x" * (60 * KIB)
    path = write(tmp_path / "log.txt", (line + "\n").encode() * 20)
    per_page = PAGE_MAX_BYTES // (60 * KIB)  # 8 lines of 60 KiB fit, a 9th would pass
    seen = []
    offset = 0
    while offset is not None:
        page = read_page(path, offset=offset, limit=100, index_dir=index_dir)
        assert sum(size(x) for x in page["lines"]) <= PAGE_MAX_BYTES
        assert page["lines"] == [line] * min(per_page, 20 - offset)
        assert page["path"] == os.path.abspath(path)
        seen += page["lines"]
        offset = page["nextOffset"]
        assert offset in (len(seen), None)
    assert len(seen) == 20
    tail = read_page(path, index_dir=index_dir)  # the default page is capped the same way
    assert (tail["offset"], len(tail["lines"]), tail["nextOffset"]) == (0, per_page, per_page)


def test_a_page_may_fill_exactly_512_kib(tmp_path, index_dir):
    big = "y" * LINE_MAX_BYTES  # exactly 64 KiB: kept whole
    path = write(tmp_path / "log.txt", (big + "\n").encode() * 9)
    page = read_page(path, offset=1, limit=9, index_dir=index_dir)
    assert page["lines"] == [big] * 8
    assert page["nextOffset"] is None


@pytest.mark.parametrize(
    ("line", "kept"),
    [
        # "ab" + 3-byte characters: 65,533 bytes would cut the 21,844th "€" in the middle.
        ("ab" + "\u20ac" * 70_000, "ab" + "\u20ac" * 21_843),
        # 4-byte characters: the prefix stops at 65,532 bytes.
        ("\U0001f600" * 51_200, "\U0001f600" * 16_383),
        ("z" * (LINE_MAX_BYTES + 1), "z" * LINE_KEEP_BYTES),
        ("\u00e9" * (100 * KIB), "\u00e9" * (LINE_KEEP_BYTES // 2)),
    ],
)
def test_long_line_keeps_its_longest_whole_prefix_and_an_ellipsis(tmp_path, index_dir, line, kept):
    path = write(tmp_path / "log.txt", ("before\n" + line + "\r\nafter").encode())
    page = read_page(path, index_dir=index_dir)
    assert page["lines"] == ["before", kept + ELLIPSIS, "after"]
    assert size(kept) <= LINE_KEEP_BYTES
    assert size(kept) + size(line[len(kept)]) > LINE_KEEP_BYTES  # the longest such prefix
    assert size(page["lines"][1]) <= LINE_MAX_BYTES


def test_a_line_of_exactly_64_kib_is_kept_whole(tmp_path, index_dir):
    line = "\u20ac" * (LINE_MAX_BYTES // 3) + "a"  # 65,536 bytes
    assert size(line) == LINE_MAX_BYTES
    path = write(tmp_path / "log.txt", (line + "\r\n").encode())
    assert read_page(path, index_dir=index_dir)["lines"] == [line]


def test_the_line_cap_counts_decoded_utf8(tmp_path, index_dir):
    # 30,000 invalid bytes on disk become 90,000 bytes of U+FFFD: the text that leaves is capped.
    path = write(tmp_path / "log.txt", b"\xff" * 30_000 + b"\n")
    (line,) = read_page(path, index_dir=index_dir)["lines"]
    assert line == "\ufffd" * (LINE_KEEP_BYTES // 3) + ELLIPSIS


def test_a_huge_line_is_read_only_as_far_as_it_is_kept(tmp_path, index_dir, reads):
    path = write(tmp_path / "log.txt", b"head\n" + b"w" * (10 * MIB) + b"\ntail\n")
    first = read_page(path, index_dir=index_dir)
    assert first["lines"] == ["head", "w" * LINE_KEEP_BYTES + ELLIPSIS, "tail"]
    assert reads.take() >= 10 * MIB  # the index is built in one pass
    again = read_page(path, index_dir=index_dir)
    assert again == first
    assert reads.take() < 80 * KIB


# --- the index: kept, extended, rebuilt ---------------------------------------------------------


def test_sidecar_index_is_reused_and_a_late_page_reads_only_its_lines(tmp_path, reads):
    index = tmp_path / "index"
    line = b"%09d " + b"." * 1013 + b"\n"  # 1,024 bytes a line
    path = tmp_path / "big.txt"
    with open(path, "wb") as f:
        block = b"".join(line % i for i in range(1024))
        for _ in range(50):  # 50 MiB, 51,200 lines
            f.write(block)
    first = read_page(path, offset=51_190, limit=5, index_dir=index)
    assert first["totalLines"] == 51_200
    assert first["lines"][0].startswith("000001014 ")  # 51,190 mod 1,024
    assert reads.take() >= 50 * MIB

    sidecar = Path(sidecar_path(path, index))
    assert sidecar.exists()
    assert sidecar.stat().st_size >= 51_200 * 8
    before = sidecar.stat()

    clear_index_cache()  # as in another process: only the sidecar is left
    start = rchar()
    second = read_page(path, offset=51_195, limit=5, index_dir=index)
    spent = rchar()
    assert second["lines"][-1].startswith("000001023 ")
    assert second["nextOffset"] is None
    assert reads.take() <= 5 * 1024  # exactly the five lines
    if start is not None and spent is not None:
        assert spent - start < 256 * KIB  # and nothing else read the file behind our back
    after = sidecar.stat()
    assert (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size)


def test_memory_index_is_reused(tmp_path, reads):
    path = write(tmp_path / "log.txt", b"".join(b"%07d\n" % i for i in range(500_000)))
    assert read_page(path, limit=1)["lines"] == ["0499999"]
    assert reads.take() >= 4_000_000
    assert read_page(path, offset=123_456, limit=2)["lines"] == ["0123456", "0123457"]
    assert reads.take() == 16


def test_growing_file_gets_new_lines_and_only_the_new_bytes_are_scanned(tmp_path, index_dir, reads):
    path = write(tmp_path / "run.txt", b"".join(b"%07d\n" % i for i in range(200_000)) + b"par")
    page = read_page(path, limit=2, index_dir=index_dir)
    assert (page["lines"], page["totalLines"]) == (["0199999", "par"], 200_001)
    reads.take()

    append(path, b"tial\r")
    page = read_page(path, limit=2, index_dir=index_dir)
    assert page["lines"] == ["0199999", "partial\r"]  # a lone "\r" so far
    append(path, b"\nnext\n")
    page = read_page(path, limit=3, index_dir=index_dir)
    assert page["lines"] == ["0199999", "partial", "next"]
    assert page["totalLines"] == 200_002
    assert reads.take() < 8 * KIB  # never the 1.6 MB already indexed


@pytest.mark.parametrize("change", ["shrink", "replace", "rewrite_same_size"])
def test_a_changed_file_rebuilds_its_index(tmp_path, index_dir, change):
    path = write(tmp_path / "log.txt", b"one\ntwo\nthree\n")
    assert read_page(path, index_dir=index_dir)["totalLines"] == 3
    stamp = os.stat(path)
    if change == "shrink":
        write(Path(path), b"x\n")
        expected = ["x"]
    elif change == "replace":
        write(tmp_path / "new.txt", b"\n\n\n\n\n\n\n\n\n\n\n\n\n\n")
        os.replace(tmp_path / "new.txt", path)
        expected = [""] * 14
    else:
        with open(path, "r+b") as f:
            f.write(b"a\nb\nc\nd\ne\nf\ng\n")
        os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 1_000_000_000))
        expected = list("abcdefg")
    page = read_page(path, index_dir=index_dir)
    assert page["lines"] == expected
    assert page["totalLines"] == len(expected)


def test_a_damaged_sidecar_is_rebuilt(tmp_path):
    index = tmp_path / "index"
    path = write(tmp_path / "log.txt", b"a\nb\nc\n")
    assert read_page(path, index_dir=index)["lines"] == ["a", "b", "c"]
    sidecar = Path(sidecar_path(path, index))
    sidecar.write_bytes(b"\xff" * 40 + sidecar.read_bytes()[40:])
    assert read_page(path, index_dir=index)["lines"] == ["a", "b", "c"]
    sidecar.write_bytes(sidecar.read_bytes()[:-8])  # torn: offsets missing
    assert read_page(path, index_dir=index)["lines"] == ["a", "b", "c"]


# --- property: read_page against a plain reference ------------------------------------------------

SMALL_LINE_MAX, SMALL_LINE_KEEP, SMALL_PAGE_MAX = 12, 9, 40

PIECES = [
    b"a",
    b"bcd",
    b"\n",
    b"\n",
    b"\r",
    b"\r\n",
    b"\x00",
    b"\xff",
    "\u00e9".encode(),
    "\u20ac".encode(),
    "\U0001f600".encode(),
    "\u20ac".encode()[:2],
    b"x" * 7,
]


def reference_lines(data: bytes) -> list[str]:
    """The README rule, written the obvious way."""
    if not data:
        return []
    *ended, last = data.split(b"\n")
    raws = [r[:-1] if r.endswith(b"\r") else r for r in ended] + ([last] if last else [])
    lines = []
    for raw in raws:
        text = raw.decode("utf-8", "replace").replace("\x00", "\ufffd")
        if size(text) > SMALL_LINE_MAX:
            kept, used = "", 0
            for ch in text:
                if used + size(ch) > SMALL_LINE_KEEP:
                    break
                kept, used = kept + ch, used + size(ch)
            text = kept + ELLIPSIS
        lines.append(text)
    return lines


def reference_page(data: bytes, path: str, offset: int | None, limit: int) -> dict:
    lines = reference_lines(data)
    total = len(lines)
    first = max(0, total - limit) if offset is None else offset
    taken: list[str] = []
    next_offset = None
    for i in range(first, min(first + limit, total)):
        if taken and sum(map(size, taken)) + size(lines[i]) > SMALL_PAGE_MAX:
            next_offset = i
            break
        taken.append(lines[i])
    else:
        next_offset = first + limit if first + limit < total else None
    return {
        "lines": taken,
        "offset": first,
        "limit": limit,
        "totalLines": total,
        "nextOffset": next_offset,
        "status": None,
        "path": None if len(taken) == total else path,
        "truncated": False,
    }


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pieces=st.lists(st.sampled_from(PIECES), max_size=40),
    cut=st.integers(0, 10_000),
    offset=st.none() | st.integers(0, 30),
    limit=st.integers(1, 12),
    early=st.tuples(st.none() | st.integers(0, 30), st.integers(1, 12)),
    sidecar=st.booleans(),
)
def test_read_page_matches_the_reference(pieces, cut, offset, limit, early, sidecar):
    data = b"".join(pieces)
    cut = cut % (len(data) + 1)  # where the file stood at the first read
    with pytest.MonkeyPatch.context() as mp, tempfile.TemporaryDirectory() as tmp:
        # Tiny budgets and chunks, so a few bytes reach every boundary the real sizes have.
        mp.setattr(logpages, "LINE_MAX_BYTES", SMALL_LINE_MAX)
        mp.setattr(logpages, "LINE_KEEP_BYTES", SMALL_LINE_KEEP)
        mp.setattr(logpages, "LINE_READ_BYTES", SMALL_LINE_MAX + 4)
        mp.setattr(logpages, "PAGE_MAX_BYTES", SMALL_PAGE_MAX)
        mp.setattr(logpages, "INDEX_CHUNK_BYTES", 5)
        mp.setattr(logpages, "TAIL_CHECK_BYTES", 3)
        clear_index_cache()
        path = os.path.join(tmp, "log.txt")
        index_dir = os.path.join(tmp, "index") if sidecar else None
        write(Path(path), data[:cut])
        assert read_page(
            path, offset=early[0], limit=early[1], index_dir=index_dir
        ) == reference_page(data[:cut], path, early[0], early[1])
        append(path, data[cut:])  # the file grows: the index is extended, not rebuilt
        assert read_page(path, offset=offset, limit=limit, index_dir=index_dir) == (
            reference_page(data, path, offset, limit)
        )


# --- the index written while the file is written ------------------------------------------------


def written(path: str, index: str, chunks, *, close: bool = True) -> LineIndexWriter:
    """Append ``chunks`` to the (new, empty) file at ``path``, indexing each after its write."""
    Path(path).write_bytes(b"")
    writer = LineIndexWriter(path, index)
    for chunk in chunks:
        append(path, chunk)
        writer.feed(chunk)
    if close:
        writer.close()
    return writer


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pieces=st.lists(
        st.sampled_from([b"a", b"bc", b"\n", b"\r\n", b"\xe2\x82", b"x" * 9]), max_size=60
    ),
    cuts=st.lists(st.integers(1, 12), min_size=1, max_size=10),
    flush_bytes=st.integers(1, 40),
)
def test_the_written_index_is_the_one_a_scan_builds(pieces, cuts, flush_bytes):
    data = b"".join(pieces)
    chunks, start, i = [], 0, 0
    while start < len(data):
        chunks.append(data[start : start + cuts[i % len(cuts)]])
        start, i = start + cuts[i % len(cuts)], i + 1
    with pytest.MonkeyPatch.context() as mp, tempfile.TemporaryDirectory() as tmp:
        mp.setattr(logpages, "WRITER_FLUSH_BYTES", flush_bytes)
        path = os.path.join(tmp, "log.txt")
        writer = written(path, os.path.join(tmp, "w"), chunks)
        assert not writer.active
        read_page(path, index_dir=os.path.join(tmp, "r"))  # a reader's own, by a scan
        ours = Path(sidecar_path(path, os.path.join(tmp, "w"))).read_bytes()
        theirs = Path(sidecar_path(path, os.path.join(tmp, "r"))).read_bytes()
        assert ours == theirs


def test_a_finished_written_index_is_used_as_is(tmp_path, reads):
    index = str(tmp_path / "index")
    path = str(tmp_path / "log.txt")
    written(
        path,
        index,
        [b"".join(b"%07d\n" % i for i in range(j, j + 1000)) for j in range(0, 300_000, 1000)],
    )
    sidecar = Path(sidecar_path(path, index))
    before = sidecar.stat()
    page = read_page(path, offset=123_456, limit=2, index_dir=index)
    assert page["lines"] == ["0123456", "0123457"]
    assert page["totalLines"] == 300_000
    assert reads.take() == 16  # its two lines and nothing else
    after = sidecar.stat()
    assert (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size)


def test_a_growing_written_file_pages_and_the_reader_extension_is_kept(
    tmp_path, reads, monkeypatch
):
    monkeypatch.setattr(logpages, "WRITER_FLUSH_BYTES", 64 * KIB)
    index = str(tmp_path / "index")
    path = str(tmp_path / "log.txt")
    block = b"".join(b"%07d\n" % i for i in range(10_000))  # 80,000 bytes
    writer = written(path, index, [block, b"par"], close=False)  # flushed once, at 64 KiB
    page = read_page(path, limit=2, index_dir=index)
    assert (page["lines"], page["totalLines"]) == (["0009999", "par"], 10_001)
    assert reads.take() < 20 * KIB  # only what the writer had not published
    for chunk in (b"tial\n", block):
        append(path, chunk)
        writer.feed(chunk)
        assert read_page(path, offset=10_000, limit=1, index_dir=index)["lines"] == ["partial"]
    writer.close()
    reads.take()
    page = read_page(path, limit=1, index_dir=index)
    assert (page["lines"], page["totalLines"]) == (["0009999"], 20_001)
    assert reads.take() == 8  # its one line, "\n" included


def test_a_writer_needs_an_empty_file(tmp_path):
    path = write(tmp_path / "log.txt", b"a\n")
    with pytest.raises(ValueError, match="not empty"):
        LineIndexWriter(path, tmp_path / "index")


@pytest.mark.parametrize("damage", ["header", "foreign_bytes"])
def test_a_writer_that_loses_its_sidecar_stops_and_pages_stay_right(tmp_path, damage):
    index = str(tmp_path / "index")
    path = str(tmp_path / "log.txt")
    writer = written(path, index, [b"one\ntwo\n"], close=False)
    writer.flush()
    if damage == "header":
        sidecar = Path(sidecar_path(path, index))
        sidecar.write_bytes(b"\xff" * 40 + sidecar.read_bytes()[40:])
    else:
        append(path, b"not fed\n")  # the file no longer holds exactly the bytes fed
    append(path, b"three\n")
    writer.feed(b"three\n")
    writer.close()
    assert not writer.active
    lines = read_page(path, index_dir=index)["lines"]
    assert lines == (
        ["one", "two", "three"] if damage == "header" else ["one", "two", "not fed", "three"]
    )
