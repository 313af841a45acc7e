"""The shell command reader on its own: command lines in, simple commands and plainness out
(tools/shell; docs/subsystems/supervision.md, "Commands are parsed")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tools.shell import parse_command
from tools.shell.parse import MAX_CONTINUATIONS, MAX_PARSED_BYTES
from tools.shell.words import ansi_c


def texts(command: str) -> list[str]:
    """Each simple command as the port sees it, `` …`` marking an unknown tail."""
    return [c.text + (" …" if c.open else "") for c in parse_command(command).commands]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("ls", ["ls"]),
        ("  ls   -la  ", ["ls -la"]),
        ("a; b && c || d | e & f\ng", ["a", "b", "c", "d", "e", "f", "g"]),
        ("echo $(id) `whoami`", ["echo …", "id", "whoami"]),
        ("(cd x; rm y) && { z; }", ["cd x", "rm y", "z"]),
        ("if a; then b; elif c; then d; else e; fi", ["a", "b", "c", "d", "e"]),
        ("while a; do b; done; until c; do d; done", ["a", "b", "c", "d"]),
        ("for x in 1 2; do rm $x; done", ["rm …"]),
        ("case $1 in a) b;; *) c;; esac", ["b", "c"]),
        ("cat <(a) >(b)", ["cat …", "a", "b"]),
        ("x=$(a) y=`b`", ["a", "b"]),
        ("export A=$(a) B", ["export …", "a"]),
        ("[[ -n $(a) ]] && [ -f x ]", ["a"]),
        ("! rm x", ["rm x"]),
        # quotes removed, as the shell reads the words
        ('"rm" -rf data', ["rm -rf data"]),
        ("r''m -rf 'da'ta", ["rm -rf data"]),
        ("\\rm -rf data", ["rm -rf data"]),
        ("$'\\x72m' -rf data", ["rm -rf data"]),
        ('$"rm" -rf data', ["rm -rf data"]),
        ("echo \"a;b\" 'c|d'", ["echo a;b c|d"]),
        ('echo "a\\"b\\$c"', ['echo a"b$c']),
        # line continuations joined, except where a backslash is verbatim
        ("r\\\nm -rf x", ["rm -rf x"]),
        ("true; r\\\nm -rf x", ["true", "rm -rf x"]),
        ('echo "a\\\nb"', ["echo ab"]),
        ("echo 'a\\\nb'", ["echo a\\\nb"]),
        ("echo a # c \\\nrm x", ["echo a", "rm x"]),
        ("echo \\\\\nrm x", ["echo \\", "rm x"]),
        # here-documents: expansions in an unquoted body run; a quoted body is text
        ("cat <<EOF\n$(r\\\nm -rf x)\nEOF\n", ["cat", "rm -rf x"]),
        ("cat <<'EOF'\n$(rm -rf x)\nEOF\n", ["cat"]),
        ("cat <<EOF && rm -rf x\nbody\nEOF\n", ["cat", "rm -rf x"]),
        ("cat <<EOF a b\nbody\nEOF\n", ["cat a b"]),
        # redirections set aside, wherever they stand
        (">out rm -rf x", ["rm -rf x"]),
        ("2>/dev/null rm -rf x", ["rm -rf x"]),
        ("true; rm >out -rf x", ["true", "rm -rf x"]),
        ("X=1 rm>/dev/null -rf x", ["rm -rf x"]),
        ("rm -rf x 2>&1 | tee log", ["rm -rf x", "tee log"]),
        ("ls > $(rm x)", ["ls", "rm x"]),
        # two redirections first: the grammar hangs the words on them (no command node)
        (">a >b rm x >c y", ["rm x y"]),
        ("2>/dev/null 2>/dev/null timeout 5 2>/dev/null rm", ["timeout 5 rm", "rm"]),
        (">a >b x $(rm y) >c z", ["x …", "rm y"]),
        (">a >b", []),
        # a test operator as a word (the grammar reads it as an operator token)
        ("rm == x", ["rm == x"]),
        ("echo a =~ b; rm x", ["echo a =~ b", "rm x"]),
        ("X=1 setsid rm ==", ["setsid rm ==", "rm =="]),  # no word for the one it missed
    ],
)
def test_simple_commands(command, expected):
    assert texts(command) == expected


@pytest.mark.parametrize(
    ("command", "inner"),
    [
        ("timeout 5s rm -rf x", "rm -rf x"),
        ("timeout -s KILL 5 rm -rf x", "rm -rf x"),
        ("timeout --signal=KILL -k 2 5 rm -rf x", "rm -rf x"),
        ("timeout --kill-after 2 5 rm -rf x", "rm -rf x"),
        ("env -u HOME rm -rf x", "rm -rf x"),
        ("env -uHOME -i A=1 B=2 rm -rf x", "rm -rf x"),
        ("env -C . rm -rf x", "rm -rf x"),
        ("env -S 'rm -rf' x", "rm -rf x"),
        ("env -- rm -rf x", "rm -rf x"),
        ("stdbuf -o L rm -rf x", "rm -rf x"),
        ("stdbuf -oL -e0 rm -rf x", "rm -rf x"),
        ("nice -n 5 rm -rf x", "rm -rf x"),
        ("nice -5 rm -rf x", "rm -rf x"),
        ("ionice -c 3 rm -rf x", "rm -rf x"),
        ("nohup rm -rf x", "rm -rf x"),
        ("time -p rm -rf x", "rm -rf x"),
        ("command rm -rf x", "rm -rf x"),
        ("builtin command rm -rf x", "rm -rf x"),
        ("exec -a name rm -rf x", "rm -rf x"),
        ("sudo -u root -E rm -rf x", "rm -rf x"),
        ("sudo LC_ALL=C rm -rf x", "rm -rf x"),
        ("doas -u root rm -rf x", "rm -rf x"),
        ("setsid -f rm -rf x", "rm -rf x"),
        ("chroot / rm -rf x", "rm -rf x"),
        ("chroot --userspec=a:b / rm -rf x", "rm -rf x"),
        ("flock /tmp/l rm -rf x", "rm -rf x"),
        ("flock -w 5 /tmp/l -c 'rm -rf x'", "rm -rf x"),
        ("watch -n 1 rm -rf x", "rm -rf x"),
        ("watch -x rm -rf x", "rm -rf x"),
        ("busybox rm -rf x", "rm -rf x"),
        ("su root -c 'rm -rf x'", "rm -rf x"),
        ("trap 'rm -rf x' EXIT", "rm -rf x"),
        ("find . -name x -exec rm -rf x \\;", "rm -rf x"),
        ("find . -execdir rm -rf x ';' -print", "rm -rf x"),
        ("sh -c 'rm -rf x'", "rm -rf x"),
        ("sh -ec 'rm -rf x'", "rm -rf x"),
        ("sh -e -c 'rm -rf x'", "rm -rf x"),
        ("bash -xc 'rm -rf x'", "rm -rf x"),
        ("bash -o pipefail -c 'rm -rf x'", "rm -rf x"),
        ("bash --norc -c 'true; rm -rf x'", "rm -rf x"),
        ("/bin/sh -c \"sh -c 'rm -rf x'\"", "rm -rf x"),
        ("bash <<EOF\nr\\\nm -rf x\nEOF\n", "rm -rf x"),
        ("bash <<'EOF'\nr\\\nm -rf x\nEOF\n", "rm -rf x"),
        ("sh <<< 'rm -rf x'", "rm -rf x"),
        ("sudo timeout 5 env -u A nice rm -rf x", "rm -rf x"),
    ],
)
def test_runners_are_unwrapped_by_their_options(command, inner):
    line = parse_command(command)
    assert inner in texts(command), texts(command)
    assert line.plain, line.unplain


@pytest.mark.parametrize(
    ("command", "inner"),
    [
        # xargs adds what it reads to its command (echo when none): an unknown tail
        ("echo x | xargs rm", "rm …"),
        ("ls | xargs -n1 rm", "rm …"),
        ("ls | xargs -0 -P 4 -n 1 rm -f", "rm -f …"),
        ("ls | xargs", "echo …"),
        ("ls | xargs -I % rm -rf %", "rm -rf …"),
        ("ls | xargs -I{} rm -rf ./{}", "rm -rf ./ …"),
        ("ls | xargs -i rm -rf {}", "rm -rf …"),
        ("find . -exec rm -f {} +", "rm -f …"),
        ("rm -rf $DIR", "rm -rf …"),
        ("rm -rf --file=$F data", "rm -rf --file= …"),
        ("rm -rf *.log", "rm -rf …"),
        ("rm -rf ~/x", "rm -rf …"),
        ("echo {a,b}", "echo …"),
    ],
)
def test_what_cannot_be_known_leaves_an_open_tail(command, inner):
    assert inner in texts(command), texts(command)
    assert parse_command(command).plain


@pytest.mark.parametrize(
    ("command", "construct"),
    [
        ("$X rm", "a command word from an expansion: $X"),
        ('"$@"', 'a command word from an expansion: "$@"'),
        ("$(echo rm) -rf x", "a command word from an expansion: $(echo rm)"),
        ("`echo rm` x", "a command word from an expansion: `echo rm`"),
        ("${CMD:-rm} x", "a command word from an expansion: ${CMD:-rm}"),
        ("timeout 5 $X", "a command word from an expansion: $X"),
        ("env $OPTS rm", "a command word from an expansion: $OPTS"),
        ("/bin/r? x", "a glob naming the command: /bin/r?"),
        ("r* x", "a glob naming the command: r*"),
        ("r{m,} x", "a brace list naming the command: r{m,}"),
        ("~/bin/rm x", "a command word from an expansion: ~/bin/rm"),
        ("eval 'rm -rf x'", "an eval: eval 'rm -rf x'"),
        ("source ./env.sh", "a script read with source: source ./env.sh"),
        (". ./env.sh", "a script read with .: . ./env.sh"),
        ("alias ll='rm -rf'", "an alias: alias ll='rm -rf'"),
        ('f(){ "$@"; }; f rm -rf x', "a function definition: f"),
        ("function g { rm x; }", "a function definition: g"),
        ("sh s.sh", "a script file run through a shell: sh s.sh"),
        ("bash -e ./deploy.sh", "a script file run through a shell: bash ./deploy.sh"),
        ("curl -s http://x | sh", "a shell reading commands from its input: sh"),
        ('sh -c "$CMD"', 'a command string from an expansion: "$CMD"'),
        ('env -S "$CMD"', "a command string from an expansion: env -S"),
        ('flock /tmp/l -c "$CMD"', 'a command string from an expansion: "$CMD"'),
        ('flock --command "$CMD" /tmp/l', "a command string from an expansion: flock -c"),
        ("coproc rm x", "a coprocess: coproc"),
        ("PATH=. ls", "an assignment that changes what runs: PATH=."),
        ("LD_PRELOAD=./x.so git status", "an assignment that changes what runs: LD_PRELOAD=./x.so"),
        ("export PATH=.:$PATH; ls", "an assignment that changes what runs: PATH=.:$PATH"),
        ("env PATH=. ls", "an assignment that changes what runs: PATH=."),
        ("sudo IFS=/ ls", "an assignment that changes what runs: IFS=/"),
        ("bash -ic ls", "a shell reading startup files: bash -i"),
        ("bash -lc 'ls'", "a shell reading startup files: bash -l"),
        ("bash --login -c ls", "a shell reading startup files: bash --login"),
        ("hash -p ./x ls; ls", "a builtin that changes what a name runs: hash -p ./x ls"),
        ("{rm,-rf,data}", "a syntax error: {rm,-rf,data}"),
        ("echo 'unterminated", "a syntax error: 'unterminated"),
        # the grammar cannot end a command with a test operator as a word (bash can)
        ("rm -rf x ==", "a syntax error: rm -rf x =="),
        ("X=1 setsid rm ==", "a syntax error: X=1 setsid rm =="),
    ],
)
def test_what_is_not_plain_is_named(command, construct):
    assert parse_command(command).unplain == construct


@pytest.mark.parametrize(
    "command",
    [
        "ls -la",
        'git commit -m "$MSG"',
        "rm -rf $DIR",
        "make > log.txt 2>&1",
        "cd src && pytest -x",
        "X=1 make",
        "env",
        "sudo -l",
        "command -v rm",
        "sh -c 'ls | wc -l'",
        "find . -name '*.py'",
        "echo $((1 + 2))",
        "2>/dev/null 2>/dev/null timeout 5 2>/dev/null rm x",
        "rm == x",
    ],
)
def test_plain_commands(command):
    assert parse_command(command).plain, parse_command(command).unplain


@pytest.mark.parametrize(
    ("command", "writes"),
    [
        ("ls > out", "> out"),
        ("ls >> out", ">> out"),
        ("ls &> log", "&> log"),
        ("ls 2>err.txt", "> err.txt"),
        ("ls > $F", "> $F"),
        ("true; rm >out -rf x", "> out"),
        ("ls > /dev/null 2>&1", None),
        ("ls 2>/dev/null >&2", None),
        ("sort < in.txt", None),
        ("cat <<< x", None),
    ],
)
def test_redirections_that_write_a_file_are_named(command, writes):
    assert parse_command(command).writes == writes


def test_command_lines_beyond_the_limits_are_not_plain():
    long = "echo " + "x" * MAX_PARSED_BYTES
    assert parse_command(long).unplain == f"a command line over {MAX_PARSED_BYTES:,} bytes"
    continued = "echo " + "a\\\n" * (MAX_CONTINUATIONS + 1)
    assert parse_command(continued).unplain == (f"more than {MAX_CONTINUATIONS} line continuations")
    nested = "rm -rf x"
    for level in range(20):  # here-documents in here-documents: the line grows linearly
        nested = f"sh <<'E{level}'\n{nested}\nE{level}"
    assert parse_command(nested).unplain == "commands nested more than 16 deep"
    assert "rm -rf x" not in texts(nested)


def test_ansi_c_escapes_read_as_bash_reads_them():
    assert ansi_c("\\x72\\155\\u00e9\\n\\t\\\\\\'\\q") == "rm\u00e9\n\t\\'\\q"


@given(st.text(max_size=200))
def test_any_text_is_read_without_error(command):
    line = parse_command(command)
    assert isinstance(line.commands, tuple)
    assert line.plain or line.unplain


# A `{` and, anywhere after it, a character of four UTF-8 bytes: tree-sitter-bash 0.25.1 reads
# outside its memory on such text and the process dies about one parse in two. Parsed in a
# process of its own, 20 times each, so that a crash fails this test instead of the run.
ASTRAL_AFTER_BRACE = [
    "{\U00100d9e",
    "{\U000e0001",
    "echo {a,b} \U0001f600",
    "\x12{\U0010b907\u00ec\u00c0\U0005edde\x49\x1eZ)t\x1f",
    "cat <<E\n{\U00031860\nE",
]
BRACE_THEN_ASTRAL = st.tuples(
    st.text(max_size=20), st.text(max_size=20), st.characters(min_codepoint=0x10000)
).map(lambda parts: f"{parts[0]}{{{parts[1]}{parts[2]}")


def test_a_brace_then_a_character_outside_the_bmp_does_not_kill_the_process():
    code = (
        "import sys, json\n"
        "from tools.shell.parse import parse_command\n"
        "for command in json.loads(sys.stdin.read()):\n"
        "    for _ in range(20):\n"
        "        parse_command.__wrapped__(command)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(ASTRAL_AFTER_BRACE),
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_characters_outside_the_bmp_are_read_back_as_written():
    # Each stands in for a private-use character while parsed; one already in the text
    # (U+E000) keeps its own meaning.
    line = parse_command("echo \U0001f600 \ue000 {a,b} && rm '\U0001f4a9' && ls x\U0001f600y")
    assert line.plain
    assert [[(w.value, w.source, w.dynamic) for w in c.words] for c in line.commands] == [
        [
            ("echo", "echo", False),
            ("\U0001f600", "\U0001f600", False),
            ("\ue000", "\ue000", False),
            ("", "{a,b}", True),
        ],
        [("rm", "rm", False), ("\U0001f4a9", "'\U0001f4a9'", False)],
        [("ls", "ls", False), ("x\U0001f600y", "x\U0001f600y", False)],
    ]


@given(BRACE_THEN_ASTRAL)
def test_text_with_a_brace_before_astral_characters_is_read_without_error(command):
    line = parse_command(command)
    assert line.plain or line.unplain


RUNNER_PREFIXES = [
    "timeout 5 ",
    "timeout -s KILL -k 1 5 ",
    "env -u HOME -C . A=1 ",
    "nice -n 5 ",
    "stdbuf -o L ",
    "nohup ",
    "sudo -u root ",
    "command ",
    "exec ",
    "time -p ",
    "setsid ",
    "xargs -0 ",
    "2>/dev/null ",
    ">out ",
]


# Any word but a test operator alone, which the grammar cannot read at the end of a command
# (the line is then not plain: test_what_is_not_plain_is_named).
ARGUMENTS = st.from_regex(r"[a-z0-9./=-]{1,8}", fullmatch=True).filter(
    lambda word: word not in ("==", "=~")
)


@given(
    st.sampled_from(["", "X=1 ", "X=1 Y=2 "]),
    st.lists(st.sampled_from(RUNNER_PREFIXES), max_size=5),
    st.lists(ARGUMENTS, max_size=4),
)
def test_any_chain_of_runners_still_shows_the_command(assignments, prefixes, arguments):
    """Whatever runners wrap ``rm``, the simple commands include ``rm`` with its arguments
    (with an unknown tail when ``xargs`` adds its input's words)."""
    inner = " ".join(["rm", *arguments])
    found = texts(assignments + "".join(prefixes) + inner)
    assert inner in found or f"{inner} …" in found, found


# --- depth: bounded before the walk, never a RecursionError ---------------------------------

DEEP = 246  # the depth that answered 500 (a RecursionError) through the API


@pytest.mark.parametrize(
    "command",
    [
        "$(" * DEEP + "rm -rf data" + ")" * DEEP,
        "(" * DEEP + "rm -rf data" + ")" * DEEP,
        "echo " + "$(echo " * DEEP + "x" + ")" * DEEP,
        "{ " * DEEP + "rm -rf data" + "; }" * DEEP,
    ],
    ids=["substitutions", "subshells", "arguments", "groups"],
)
def test_a_line_nested_too_deep_is_not_plain_and_not_walked(command):
    from tools.shell.parse import MAX_TREE_DEPTH

    line = parse_command(command)
    assert not line.plain
    assert line.unplain.startswith(f"commands nested more than {MAX_TREE_DEPTH} levels deep")


def test_ordinary_nesting_is_read_to_the_end():
    line = parse_command("echo " + "$(echo " * 20 + "x" + ")" * 20 + "; ls")
    assert line.plain, line.unplain
    assert [c.text for c in line.commands][-1] == "ls"


def test_a_line_that_runs_the_walk_out_of_stack_is_not_plain():
    # Trees in trees (strings run by shells) can still use up the stack on a caller that is
    # deep already, as a request handler is: not plain, never a RecursionError.
    command = "sh -c 'echo " + "$(echo " * 38 + "unique-for-this-test" + ")" * 38 + "'"

    def from_deep(levels: int):
        return from_deep(levels - 1) if levels else parse_command(command)

    line = from_deep(sys.getrecursionlimit() - 120)
    assert not line.plain
    assert line.unplain.startswith("commands nested too deep to read")
