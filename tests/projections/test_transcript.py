"""Transcript projection (docs/projections.md, "Transcript projection")."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections import transcript
from projections.transcript import (
    ARGS_BUDGET_BYTES,
    PREVIEW_BUDGET_BYTES,
    count_lines,
    is_secret_key,
    mask_url_credentials,
    project_transcript,
    split_lines,
)
from projections.units import clean_text

ELLIPSIS = "\u2026"


def size(s: str) -> int:
    return len(s.encode("utf-8"))


def total_size(result: dict) -> int:
    return sum(size(e) for e in result["argsPreview"] + result["resultPreview"])


# --- shape ---------------------------------------------------------------------------------


def test_exact_shape_and_null_overflow():
    result = project_transcript(tool_name="read", arguments={"path": "a.py"}, result_text="x\ny\n")
    assert result == {
        "argsPreview": ['path: "a.py"'],
        "resultPreview": ["x", "y"],
        "previewOverflow": None,
    }


def test_no_result_yet():
    result = project_transcript(tool_name="bash", arguments={"command": "sleep 5"})
    assert result == {"argsPreview": ["sleep 5"], "resultPreview": [], "previewOverflow": None}


def test_arguments_are_compact_json_in_key_order():
    args = {"b": [1, {"x": None}], "a": 'é\n"q"', "c": True, "d": 1.5}
    result = project_transcript(tool_name="custom", arguments=args, result_text="")
    assert result["argsPreview"] == [
        'b: [1,{"x":null}]',
        'a: "é\\n\\"q\\""',
        "c: true",
        "d: 1.5",
    ]


# --- secrets -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "password",
        "PassWD",
        "Secret",
        "token",
        "api_key",
        "api-key",
        "ApiKey",
        "Authorization",
        "cookie",
        "credential",
        "credentials",
        "private-key",
        "github_token",
        "X-Api-Key",
        "aws_secret",
        "db-password",
        "proxy_authorization",
    ],
)
def test_secret_keys(key):
    assert is_secret_key(key)


@pytest.mark.parametrize(
    "key",
    ["max_tokens", "tokens", "tokenizer", "secrets", "path", "passwords", "apikeys", "mytoken"],
)
def test_not_secret_keys(key):
    assert not is_secret_key(key)


def test_secret_arguments_dropped_and_max_tokens_kept():
    args = {
        "path": "a.txt",
        "password": "hunter2",
        "API-KEY": "k1",
        "github_token": "ghp_x",
        "Authorization": "Bearer y",
        "max_tokens": 1024,
        "cookie": "c",
        "tokens": 3,
    }
    result = project_transcript(tool_name="web", arguments=args, result_text="ok")
    assert result["argsPreview"] == ['path: "a.txt"', "max_tokens: 1024", "tokens: 3"]
    joined = "".join(result["argsPreview"])
    for secret in ("hunter2", "k1", "ghp_x", "Bearer"):
        assert secret not in joined


def test_secret_keys_dropped_at_any_depth():
    args = {"headers": {"Authorization": "Bearer y", "Accept": "json"}, "list": [{"token": "t"}]}
    result = project_transcript(tool_name="web", arguments=args)
    assert result["argsPreview"] == ['headers: {"Accept":"json"}', "list: [{}]"]


def test_six_entries_count_after_secrets():
    args = {"token": "t", **{f"k{i}": i for i in range(8)}}
    result = project_transcript(tool_name="web", arguments=args)
    assert result["argsPreview"] == [f"k{i}: {i}" for i in range(6)]


# --- URL credentials -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("https://alice:s3cret@example.com/r.git", "https://***@example.com/r.git"),
        ("postgres://u:p@db:5432/x?sslmode=1", "postgres://***@db:5432/x?sslmode=1"),
        ("git+ssh://a:b@h", "git+ssh://***@h"),
        ("https://ghp_TOKEN@github.com/o/r", "https://***@github.com/o/r"),
        ("http://u:p@ss@host/", "http://***@host/"),
        ("see https://a:b@x and ftp://c:d@y.", "see https://***@x and ftp://***@y."),
        ("https://example.com/a@b", "https://example.com/a@b"),
        ("https://example.com?q=a@b", "https://example.com?q=a@b"),
        ("mailto:a@b.c user@host:path", "mailto:a@b.c user@host:path"),
        ("://a:b@c", "://a:b@c"),
        ("plain text", "plain text"),
    ],
)
def test_mask_url_credentials(text, expected):
    assert mask_url_credentials(text) == expected


def test_url_credentials_masked_in_values_commands_and_results():
    result = project_transcript(
        tool_name="web",
        arguments={"url": "https://alice:s3cret@example.com:8443/r?x=1", "n": ["ftp://u:p@h/f"]},
        result_text="fetched https://alice:s3cret@example.com:8443/r\n",
    )
    assert result["argsPreview"] == [
        'url: "https://***@example.com:8443/r?x=1"',
        'n: ["ftp://***@h/f"]',
    ]
    assert result["resultPreview"] == ["fetched https://***@example.com:8443/r"]

    bash = project_transcript(
        tool_name="bash",
        arguments={"command": "git clone https://bob:pw@git.example/r.git\ncd r && make"},
        result_text="Cloning into 'r'... https://bob:pw@git.example/r.git\ndone\n",
    )
    assert bash["argsPreview"] == ["git clone https://***@git.example/r.git", "cd r && make"]
    assert bash["resultPreview"] == ["Cloning into 'r'... https://***@git.example/r.git", "done"]


def test_masking_happens_before_the_cut():
    # The password alone would pass the budget; masked, the line fits and shows none of it.
    line = "x" * 7000 + " https://alice:" + "S" * 20000 + "@host/p"
    result = project_transcript(tool_name="read", arguments={}, result_text=line)
    assert result["resultPreview"] == ["x" * 7000 + " https://***@host/p"]
    # A credential that straddles the cut point is masked too, never partly shown.
    line = "x" * 8180 + " https://alice:" + "S" * 20000 + "@host/p"
    result = project_transcript(tool_name="read", arguments={}, result_text=line)
    (entry,) = result["resultPreview"]
    assert "S" not in entry
    assert entry.endswith(ELLIPSIS)
    assert size(entry) == PREVIEW_BUDGET_BYTES


# --- caps and budgets ----------------------------------------------------------------------


def test_six_lines_and_hidden_count():
    text = "".join(f"line {i}\n" for i in range(1, 11))
    result = project_transcript(tool_name="read", arguments={"path": "f"}, result_text=text)
    assert result["resultPreview"] == [f"line {i}" for i in range(1, 7)]
    assert result["previewOverflow"] == {"hidden": 4, "noun": "line", "direction": "head"}


def test_arguments_cut_at_2_kib_and_result_still_shown():
    result = project_transcript(
        tool_name="write", arguments={"a": "x" * 3000, "b": 1}, result_text="ok"
    )
    assert result["argsPreview"] == ['a: "' + "x" * 2041 + ELLIPSIS]
    assert size(result["argsPreview"][0]) == ARGS_BUDGET_BYTES
    assert result["resultPreview"] == ["ok"]
    assert result["previewOverflow"] is None


def test_second_argument_cut_into_room_left():
    result = project_transcript(tool_name="x", arguments={"a": "x" * 1000, "b": "y" * 1100, "c": 1})
    assert result["argsPreview"] == ['a: "' + "x" * 1000 + '"', 'b: "' + "y" * 1036 + ELLIPSIS]
    assert total_size(result) == ARGS_BUDGET_BYTES


def test_bash_command_lines_cut_at_2_kib():
    command = "a" * 1500 + "\n" + "b" * 1500 + "\nc\n"
    result = project_transcript(tool_name="bash", arguments={"command": command})
    assert result["argsPreview"] == ["a" * 1500, "b" * 545 + ELLIPSIS]


def test_shared_8_kib_budget_cut_with_ellipsis():
    text = "a" * 4000 + "\n" + "b" * 4000 + "\n" + "c" * 4000 + "\nd\n"
    result = project_transcript(tool_name="read", arguments={"path": "f"}, result_text=text)
    # 'path: "f"' takes 9 bytes: 8183 are left, 183 of them when "c…" comes.
    assert result["resultPreview"] == ["a" * 4000, "b" * 4000, "c" * 180 + ELLIPSIS]
    assert total_size(result) == PREVIEW_BUDGET_BYTES
    # The line after the cut one has no entry and is counted; the cut one is shown.
    assert result["previewOverflow"] == {"hidden": 1, "noun": "line", "direction": "head"}


def test_cut_entry_alone_is_not_counted_hidden():
    text = "a" * 4000 + "\n" + "b" * 4000 + "\n" + "c" * 4000
    result = project_transcript(tool_name="read", arguments={"path": "f"}, result_text=text)
    assert result["resultPreview"][-1] == "c" * 180 + ELLIPSIS
    assert result["previewOverflow"] is None


@pytest.mark.parametrize(
    ("char", "kept"),
    [("é", 90), ("€", 60), ("😀", 45)],
)
def test_multibyte_cut_never_splits_a_code_point(char, kept):
    # 7999 + 9 bytes used: the room is 184, so the cut keeps at most 181 bytes before "…".
    text = "a" * 7999 + "\n" + char * 1000
    result = project_transcript(tool_name="read", arguments={"path": "f"}, result_text=text)
    assert result["resultPreview"] == ["a" * 7999, char * kept + ELLIPSIS]
    assert total_size(result) <= PREVIEW_BUDGET_BYTES


def test_ellipsis_alone_when_room_is_three_bytes():
    text = "a" * 8189 + "\nbbbb\nc"
    result = project_transcript(tool_name="read", arguments={}, result_text=text)
    assert result["resultPreview"] == ["a" * 8189, ELLIPSIS]
    assert result["previewOverflow"] == {"hidden": 1, "noun": "line", "direction": "head"}


def test_entry_dropped_when_room_below_three_bytes():
    text = "a" * 8190 + "\nbbb\nc"
    result = project_transcript(tool_name="read", arguments={}, result_text=text)
    assert result["resultPreview"] == ["a" * 8190]
    assert result["previewOverflow"] == {"hidden": 2, "noun": "line", "direction": "head"}


# --- lines ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "lines"),
    [("", 0), ("a", 1), ("a\n", 1), ("a\nb", 2), ("\n", 1), ("a\n\n", 2), ("\r\n", 1), ("\r", 1)],
)
def test_count_lines(text, lines):
    assert count_lines(text) == lines


@pytest.mark.parametrize(
    ("text", "lines"),
    [("", []), ("a", ["a"]), ("a\r\n\nb\r", ["a", "", "b\r"]), ("x\ry\n", ["x\ry"])],
)
def test_split_lines(text, lines):
    assert split_lines(text) == lines
    assert len(lines) == count_lines(text)


def test_crlf_is_one_break_and_lone_cr_stays():
    text = "a\r\nb\rc\n\nd\r"
    result = project_transcript(tool_name="read", arguments={}, result_text=text)
    assert result["resultPreview"] == ["a", "b\rc", "", "d\r"]
    assert result["previewOverflow"] is None
    bash = project_transcript(tool_name="bash", arguments={"command": "x"}, result_text=text)
    assert bash["resultPreview"] == ["a", "b\rc", "", "d\r"]


def test_entries_are_clean_text():
    result = project_transcript(
        tool_name="read", arguments={"p": "a\ud800b"}, result_text="x\x00y\ud83dz"
    )
    assert result["argsPreview"] == ['p: "a\ufffdb"']
    assert result["resultPreview"] == ["x\ufffdy\ufffdz"]


# --- per tool ------------------------------------------------------------------------------


def test_bash_tail():
    text = "".join(f"l{i}\r\n" for i in range(1, 11))
    result = project_transcript(tool_name="bash", arguments={"command": "make"}, result_text=text)
    assert result["argsPreview"] == ["make"]
    assert result["resultPreview"] == ["l5", "l6", "l7", "l8", "l9", "l10"]
    assert result["previewOverflow"] == {"hidden": 4, "noun": "line", "direction": "tail"}


def test_bash_tail_without_final_newline():
    result = project_transcript(tool_name="bash", arguments={"command": "x"}, result_text="a\nb")
    assert result["resultPreview"] == ["a", "b"]
    assert result["previewOverflow"] is None


def test_bash_tail_budget_keeps_the_last_lines():
    text = "z\n" + "a" * 5000 + "\n" + "b" * 5000 + "\n" + "c" * 10 + "\n"
    result = project_transcript(tool_name="bash", arguments={"command": "make"}, result_text=text)
    # The last lines go in first: 8192 - 4 - 10 - 5000 = 3178 bytes are left for the a line.
    assert result["resultPreview"] == ["a" * 3175 + ELLIPSIS, "b" * 5000, "c" * 10]
    assert total_size(result) == PREVIEW_BUDGET_BYTES
    assert result["previewOverflow"] == {"hidden": 1, "noun": "line", "direction": "tail"}


def test_bash_without_string_command_shows_arguments():
    result = project_transcript(tool_name="bash", arguments={"timeout": 5})
    assert result["argsPreview"] == ["timeout: 5"]


def test_read_first_lines():
    result = project_transcript(
        tool_name="read", arguments={"path": "a", "limit": 3}, result_text="1\n2\n3\n"
    )
    assert result["argsPreview"] == ['path: "a"', "limit: 3"]
    assert result["resultPreview"] == ["1", "2", "3"]


def test_grep_items():
    items = [f"src/a.py:{i}:match" for i in range(1, 9)]
    result = project_transcript(tool_name="grep", arguments={"pattern": "m"}, result_items=items)
    assert result["resultPreview"] == items[:6]
    assert result["previewOverflow"] == {"hidden": 2, "noun": "item", "direction": "head"}


def test_find_items_from_text():
    result = project_transcript(
        tool_name="find", arguments={"pattern": "*.py"}, result_text="a.py\nb.py\n"
    )
    assert result["resultPreview"] == ["a.py", "b.py"]
    assert result["previewOverflow"] is None


def test_non_string_items_are_compact_json():
    result = project_transcript(
        tool_name="grep", arguments={}, result_items=[{"path": "a", "line": 2}]
    )
    assert result["resultPreview"] == ['{"path":"a","line":2}']


def test_ls_directories_first_from_set():
    items = ["b.txt", "src", "a.txt", "docs"]
    result = project_transcript(
        tool_name="ls", arguments={"path": "."}, result_items=items, directories={"src", "docs"}
    )
    assert result["resultPreview"] == ["src", "docs", "b.txt", "a.txt"]
    assert result["previewOverflow"] is None


def test_ls_directories_first_by_trailing_slash_and_overflow():
    items = [f"f{i}" for i in range(8)] + ["d1/", "d2/"]
    result = project_transcript(tool_name="ls", arguments={"path": "."}, result_items=items)
    assert result["resultPreview"] == ["d1/", "d2/", "f0", "f1", "f2", "f3"]
    assert result["previewOverflow"] == {"hidden": 4, "noun": "item", "direction": "head"}


def test_ls_from_text_still_lists_directories_first():
    result = project_transcript(
        tool_name="ls", arguments={"path": "."}, result_text="a.txt\r\nsrc/\nb.txt\ndocs/\n"
    )
    assert result["resultPreview"] == ["src/", "docs/", "a.txt", "b.txt"]
    assert result["previewOverflow"] is None


def test_other_tool_with_items_shows_them_as_lines():
    items = [f"r{i}" for i in range(9)]
    result = project_transcript(tool_name="custom", arguments={}, result_items=items)
    assert result["resultPreview"] == items[:6]
    assert result["previewOverflow"] == {"hidden": 3, "noun": "line", "direction": "head"}


def test_other_tool_first_lines_of_rendered_result():
    text = "\n".join(f"r{i}" for i in range(7))
    result = project_transcript(tool_name="mcp__web__fetch", arguments={"u": 1}, result_text=text)
    assert result["resultPreview"] == [f"r{i}" for i in range(6)]
    assert result["previewOverflow"] == {"hidden": 1, "noun": "line", "direction": "head"}


def test_huge_output_copies_only_the_shown_entries(monkeypatch):
    # Timing lives in bench/projections.py; here the work is counted. A huge result is passed
    # over only by C-speed str.count / find / rfind; what is copied and cleaned in Python is
    # the shown entries, each at most 8,193 code points, whatever the size of the result.
    cleaned: list[int] = []
    real_clean_text = transcript.clean_text
    monkeypatch.setattr(
        transcript, "clean_text", lambda t: cleaned.append(len(t)) or real_clean_text(t)
    )
    line = "output line with some text\n"
    text = line * 1_000_000  # 27 MB
    result = project_transcript(tool_name="bash", arguments={"command": "x"}, result_text=text)
    head = project_transcript(tool_name="read", arguments={}, result_text=text)
    huge_line = project_transcript(
        tool_name="bash", arguments={"command": "x"}, result_text="y" * 30_000_000
    )
    assert result["resultPreview"] == [line[:-1]] * 6
    assert result["previewOverflow"] == {"hidden": 999_994, "noun": "line", "direction": "tail"}
    assert head["previewOverflow"] == {"hidden": 999_994, "noun": "line", "direction": "head"}
    assert huge_line["resultPreview"] == ["y" * (8192 - 1 - 3) + ELLIPSIS]
    entry_max_chars = PREVIEW_BUDGET_BYTES + 1
    assert len(cleaned) <= 3 * (1 + 6)  # per call: the command, at most 6 result entries
    assert max(cleaned) <= entry_max_chars
    assert sum(cleaned) <= 12 * len(line) + 2 * len("x") + entry_max_chars


# --- properties ----------------------------------------------------------------------------

ALPHABET = ["a", "b", " ", "é", "€", "😀", "\n", "\r", ":", "/", "@", "\x00", "\ud800", '"']
texts = st.lists(st.tuples(st.sampled_from(ALPHABET), st.integers(1, 3000)), max_size=14).map(
    lambda runs: "".join(c * n for c, n in runs)
)
tools = st.sampled_from(["bash", "read", "grep", "find", "ls", "web"])
keys = st.sampled_from(["path", "token", "max_tokens", "x-api-key", "url", "n", "q", "k"])
arguments = st.dictionaries(keys, st.one_of(texts, st.integers(), st.lists(texts, max_size=2)))


def reference_lines(text: str) -> list[str]:
    """README lines, written the obvious way."""
    if not text:
        return []
    parts = text.split("\n")
    if text.endswith("\n"):
        parts.pop()
        return [p[:-1] if p.endswith("\r") else p for p in parts]
    return [p[:-1] if p.endswith("\r") else p for p in parts[:-1]] + [parts[-1]]


def shown_entry(entry: str, line: str) -> bool:
    if entry == line:
        return True
    return entry.endswith(ELLIPSIS) and line.startswith(entry[:-1])


def check_added(added: list[str], full: list[str], room: int) -> None:
    """Entries added in order: whole while they fit, then one cut, then nothing."""
    for i, entry in enumerate(added):
        line = full[i]
        if entry != line:
            assert i == len(added) - 1, "no entry follows a cut one"
            assert shown_entry(entry, line)
            assert size(line) > room >= size(entry)
            assert size(entry[:-1]) <= room - 3
            # The longest prefix: one more code point would pass room - 3.
            assert len(entry) - 1 == len(line) or size(line[: len(entry)]) > room - 3
            return
        room -= size(entry)
    if len(added) < min(6, len(full)):
        assert room < 3 and size(full[len(added)]) > room


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tool=tools, args=arguments, text=texts, as_items=st.booleans())
def test_budgets_and_counting(tool, args, text, as_items):
    items = reference_lines(text) if as_items and tool in ("grep", "find", "ls") else None
    result = project_transcript(
        tool_name=tool,
        arguments=args,
        result_text=None if items is not None else text,
        result_items=items,
        directories=set() if tool == "ls" else None,
    )
    assert set(result) == {"argsPreview", "resultPreview", "previewOverflow"}
    args_preview, preview = result["argsPreview"], result["resultPreview"]
    assert len(args_preview) <= 6 and len(preview) <= 6
    args_bytes = sum(size(e) for e in args_preview)
    assert args_bytes <= ARGS_BUDGET_BYTES
    assert total_size(result) <= PREVIEW_BUDGET_BYTES
    for entry in args_preview + preview:
        entry.encode("utf-8")  # no lone surrogate
        assert "\x00" not in entry

    # Arguments: secrets dropped, the rest in order, as "key: compact JSON".
    if tool == "bash" and isinstance(args.get("command"), str):
        full_args = reference_lines(args["command"])
    else:
        full_args = [
            f"{k}: {json.dumps(v, ensure_ascii=False, separators=(',', ':'))}"
            for k, v in args.items()
            if k not in ("token", "x-api-key")
        ]
    full_args = [clean_text(mask_url_credentials(e)) for e in full_args]
    check_added(args_preview, full_args, ARGS_BUDGET_BYTES)

    # Result: nothing lost without being counted.
    lines = [clean_text(mask_url_credentials(line)) for line in reference_lines(text)]
    overflow = result["previewOverflow"]
    hidden = overflow["hidden"] if overflow else 0
    assert len(preview) + hidden == len(lines)
    assert (overflow is None) == (hidden == 0)
    if overflow:
        assert overflow["noun"] == ("item" if tool in ("grep", "find", "ls") else "line")
        assert overflow["direction"] == ("tail" if tool == "bash" else "head")
    room = PREVIEW_BUDGET_BYTES - args_bytes
    if tool == "bash":
        check_added(preview[::-1], lines[::-1], room)
    else:
        check_added(preview, lines, room)


passwords = st.text(alphabet="QZ", min_size=1, max_size=20000)


@settings(max_examples=60, deadline=None)
@given(
    before=st.text(alphabet="ab \n:/@", max_size=9000),
    password=passwords,
    after=st.text(alphabet="ab \n:/@", max_size=50),
    tool=tools,
)
def test_credentials_never_shown(before, password, after, tool):
    url = f"https://alice:{password}@example.com/x"
    text = before + url + after
    result = project_transcript(
        tool_name=tool, arguments={"command": text, "url": url}, result_text=text
    )
    for entry in result["argsPreview"] + result["resultPreview"]:
        assert "Q" not in entry and "Z" not in entry
