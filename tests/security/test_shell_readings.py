"""Rules that read the line as bash reads it (docs/security.md, "Rules that read the line as the
shell does"): characters the grammar and bash read apart, code bash runs from places that look
like data, and runners read by complete option tables, abbreviations included.

Each form is proved twice: bash really runs the hidden command (``touch ran`` in a scratch
folder), and the permission port never lets it through: denied under a deny rule, never allowed
by a rule (``allow *`` included). The fuzz at the end compares the port's reading with what a
real bash runs, on lines made of the tokens where readings part."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conversations.helpers import new_conversation
from tools.models import PermissionRule
from tools.permissions import evaluate
from tools.shell import parse_command
from tools.shell.words import ansi_c

pytestmark = pytest.mark.django_db

BASH = shutil.which("bash") or "/bin/bash"
# What the hidden command is in each form: a real run proves it ran, the port must see it.
RUN = "touch ran"


def _ran(tmp_path: Path, line: str, *, stdin: str = "") -> bool:
    """Whether ``line``, run by a real bash in a scratch folder, ran ``touch ran``."""
    folder = tmp_path / "scratch"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    subprocess.run(
        [BASH, "-c", line],
        cwd=folder,
        input=stdin.encode(),
        capture_output=True,
        timeout=60,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(folder)},
    )
    return (folder / "ran").exists()


def _rule(conversation, decision: str, pattern: str) -> PermissionRule:
    return PermissionRule.objects.create(
        conversation=conversation, tool_name="bash", pattern=pattern, decision=decision
    )


def _never_through(user, line: str) -> None:
    """The port's promise for a line that runs ``touch ran`` unseen: a deny rule for ``touch``
    denies it, and no allow rule (not even ``*``) allows it."""
    conversation = new_conversation(user)
    _rule(conversation, "allow", "*")
    allowed = evaluate(conversation, "bash", {"command": line})
    assert allowed.decision == "ask", (line, allowed)
    _rule(None, "deny", "touch *")
    denied = evaluate(conversation, "bash", {"command": line})
    assert denied.decision == "deny", (line, denied)


# --- 1. characters the grammar and bash read apart -------------------------------------------
# bash splits words at space, tab and newline only; the grammar at more. Each of these, where a
# comment could start, hides the rest of the line from the grammar.
APART = ["\r", "\f", "\v", "\x1c", "\x7f", "\xa0", "\u2003", "\u2028", "\u3000", "\ufeff"]


@pytest.mark.parametrize("char", APART, ids=lambda c: f"U+{ord(c):04X}")
def test_a_character_read_apart_hides_nothing(user, tmp_path, char):
    line = f"echo x{char}#; {RUN}"
    if char in "\r\f\v":  # the forms that were found: bash runs the command the grammar hid
        assert _ran(tmp_path, line), repr(line)
    assert "a character the shell reads apart" in (parse_command(line).unplain or "")
    _never_through(user, line)


@pytest.mark.parametrize(
    "line",
    [
        f"echo x\\\r\n{RUN}",  # a backslash before CR-LF: bash escapes the CR, then a new line
        f"echo $'a\\\\'; {RUN} #'",  # bash ends $'a\\' where the grammar does not
        f"echo $'\\\\'; {RUN} #'",
        f"echo $'x\\\\\\\\'; {RUN} #'",
        f"echo x\n\\{RUN}",  # the grammar reads ``<newline>\\touch`` as an argument of echo
    ],
)
def test_a_token_bash_ends_elsewhere_hides_nothing(user, tmp_path, line):
    assert _ran(tmp_path, line), repr(line)
    assert not parse_command(line).plain
    _never_through(user, line)


# --- 2. code in places read as data ---------------------------------------------------------
# ``X`` holds an array subscript whose command substitution bash runs when it evaluates X
# arithmetically (recursively: a variable's value is an expression).
X = "x='a[$(touch ran)]'; "
CODE_IN_DATA = {
    "arithmetic expansion": X + "echo $((x))",
    "old arithmetic expansion": X + "echo $[x]",
    "arithmetic command": X + "(( x ))",
    "C-style for": X + "for ((i = x; 0; )); do :; done",
    "[[ -eq ]]": X + "[[ x -eq 1 ]]",
    "[[ -lt ]] on an expansion": X + '[[ "$x" -lt 1 ]]',
    "let": X + "let x",
    "declare -i": X + "declare -i y=x",
    "local -i": X + "f() { local -i y=x; }; f",
    "typeset -i": X + "typeset -i y; y=x",
    "printf -v": "printf -v 'a[$(touch ran)]' %s 1",
    "read": "read 'a[$(touch ran)]' <<< 1",
    "declare -n": "declare -n r='a[$(touch ran)]'; echo \"$r\"",
    "test -v": "test -v 'a[$(touch ran)]'",
    "[ -v ]": "[ -v 'a[$(touch ran)]' ]",
    "[[ -v ]]": "[[ -v a[$(touch ran)] ]]",
    "subscript": X + 'a=(1); echo "${a[x]}"',
    "subscript assignment": X + "a[x]=1",
    "array literal index": X + "a=([x]=1)",
    "substring offset": X + 'y=abc; echo "${y:x}"',
    "substring length": X + 'y=abc; echo "${y:0:x}"',
    "indirect expansion": X + 'echo "${!x}"',
    "prompt expansion": "y='$(touch ran)'; echo \"${y@P}\"",
    "PS4 with set -x": "PS4='$(touch ran)'; set -x; true",
    "PS4 to bash -x": "PS4='$(touch ran)' bash -xc true",
    "mapfile -C": "mapfile -C 'touch ran; :' -c 1 a <<< 1",
    "readarray -C": "readarray -C 'touch ran; :' -c 1 a <<< 1",
    "BASH_FUNC in the environment": "env 'BASH_FUNC_ls%%=() { touch ran; }' bash -c ls",
    "BASH_CMDS": "BASH_CMDS[ls]=$(command -v touch); ls ran",
    "BASH_ALIASES": "shopt -s expand_aliases; BASH_ALIASES[ls]='touch ran'\nls",
    "a program's hook variable": "GIT_PAGER='touch ran' git -P log",
}
# Forms whose run is not proved here: git runs no pager without a terminal; bash takes no PS4
# from its environment when it runs as root (it does as any other user).
NOT_PROVED = {"a program's hook variable"} | ({"PS4 to bash -x"} if os.geteuid() == 0 else set())


@pytest.mark.parametrize("name", list(CODE_IN_DATA))
def test_code_in_a_data_place_is_never_plain(user, tmp_path, name):
    line = CODE_IN_DATA[name]
    if name not in NOT_PROVED:
        assert _ran(tmp_path, line), f"bash no longer runs code through {name}: {line!r}"
    parsed = parse_command(line)
    seen = any(c.text == RUN for c in parsed.commands)
    assert seen or not parsed.plain, (name, parsed)
    if not seen:
        _never_through(user, line)
    else:  # seen as a command of the line: a rule for it decides, an allow of the rest does not
        conversation = new_conversation(user)
        _rule(conversation, "allow", "git *")
        assert evaluate(conversation, "bash", {"command": line}).decision == "ask"
        _rule(None, "deny", "touch *")
        assert evaluate(conversation, "bash", {"command": line}).decision == "deny"


@pytest.mark.parametrize(
    "line",
    [
        "echo $((1 + 2))",
        "(( 3 > 2 ))",
        "[[ 1 -lt 2 ]]",
        'echo "${a[0]}" "${a[@]}" "${#a[@]}"',
        'echo "${y:1:2}" "${y: -1}" "${y:-x}"',
        "read -r line",
        "printf -v out %s x",
        "declare -r x=1",
        "export -n x",
        "GIT_PAGER=cat git log",
    ],
)
def test_data_that_is_only_data_stays_plain(line):
    parsed = parse_command(line)
    assert parsed.plain, parsed.unplain


# --- 3. runners read as the programs read their options --------------------------------------
# Each runs ``touch ran`` for real (where the program is installed and may run here) and the
# port sees it. Long options are given abbreviated, as getopt accepts any unique prefix.
RUNNER_FORMS = {
    "timeout --sig": "timeout --sig KILL 5 touch ran",
    "timeout --k": "timeout --k 9 5 touch ran",
    "timeout --fo": "timeout --fo 5 touch ran",
    "env --uns": "env --uns HOME touch ran",
    "env --ch": "env --ch . touch ran",
    "env --sp": "env --sp 'touch ran'",
    "env -": "env - touch ran",
    "env -S with options": "env -S '-i touch ran'",
    "env -S in env -S": "env -S '-S \"touch ran\"'",
    "env -S, then words": "env -S 'touch' ran",
    "nice --adj": "nice --adj 5 touch ran",
    "nice -N": "nice -5 touch ran",
    "stdbuf --out": "stdbuf --out L touch ran",
    "flock --time": "flock --time 5 lock touch ran",
    "flock -c": "flock lock -c 'touch ran'",
    "flock --command": "flock -w 5 lock --command 'touch ran'",
    "xargs --max-a": "echo ran | xargs --max-a 1 touch",
    "xargs --repl": "echo ran | xargs --repl=% touch %",
    "ionice -c": "ionice -c 3 touch ran",
    "setsid -w": "setsid -w touch ran",
    "nohup": "nohup touch ran",
    "chroot --sk": "chroot --sk / touch ran",
    "chrt -o 0": "chrt -o 0 touch ran",
    "chrt --oth": "chrt --oth 0 touch ran",
    "taskset": "taskset 1 touch ran",
    "taskset -c": "taskset -c 0 touch ran",
    "prlimit --nof": "prlimit --nof=1024 touch ran",
    "prlimit -n": "prlimit -n1024 touch ran",
    "setarch": "setarch x86_64 -R touch ran",
    "setarch --addr-no": "setarch x86_64 --addr-no touch ran",
    "linux64": "linux64 touch ran",
    "x86_64": "x86_64 touch ran",
    "linux32": "linux32 touch ran",
    "i386": "i386 touch ran",
    "choom -n": "choom -n 0 touch ran",
    "choom --adj": "choom --adj 0 touch ran",
    "script -c": "script -qc 'touch ran' /dev/null",
    "script file -c": "script -q /dev/null -c 'touch ran'",
    "script --comm": "script -q --comm 'touch ran' /dev/null",
    "su -c attached": "su -c'touch ran'",
    "su --comm": "su --comm 'touch ran'",
    "su user -c": "su root -c 'touch ran'",
    "su - user -c": "su - root -c 'cd \"$OLDPWD\" 2>/dev/null; cd - >/dev/null; touch ran'",
    "sh -c": "sh -c 'touch ran'",
    "dash -c": "dash -ec 'touch ran'",
    "bash -c": "bash --norc -c 'touch ran'",
    "bash -o": "bash -o errexit -c 'touch ran'",
    "command": "command -p touch ran",
    "builtin command": "builtin command touch ran",
    "exec -a": "exec -a name touch ran",
    "time -p": "time -p touch ran",
    "coproc": "coproc touch ran; wait",
    "find -exec": "find . -maxdepth 0 -exec touch ran \\;",
    "find -execdir": "find . -maxdepth 0 -execdir touch ran {} +",
    "trap": "trap 'touch ran' EXIT",
    "watch -x": "watch -x -n 1 touch ran",
    "GNU time": "/usr/bin/time --out=/dev/null touch ran",
    "sudo": "sudo -u root touch ran",
    "doas": "doas touch ran",
    "busybox": "busybox touch ran",
}
# Forms that cannot be run here, and why (each is still read, below).
NOT_RUN = {
    "watch -x": "watch needs a terminal and runs until stopped",
    "su - user -c": "a login shell starts in the user's home, not the scratch folder",
}


@pytest.mark.parametrize("name", list(RUNNER_FORMS))
def test_a_runner_s_command_is_seen(user, tmp_path, name):
    line = RUNNER_FORMS[name]
    program = line.split()[0].split("/")[-1]
    runnable = name not in NOT_RUN and shutil.which(program) or program in BASH_WORDS
    if runnable and not _ran(tmp_path, line):
        pytest.skip(f"{program} cannot run a command on this machine (privileges?)")
    parsed = parse_command(line)
    runs = [c.text for c in parsed.commands]
    assert any(text.startswith("touch") for text in runs[1:]), (line, runs, parsed.unplain)
    conversation = new_conversation(user)
    _rule(None, "deny", "touch *")
    assert evaluate(conversation, "bash", {"command": line}).decision == "deny"


BASH_WORDS = frozenset(["command", "builtin", "exec", "time", "coproc", "trap"])

# Programs that run a command in a way this reading does not unwrap: never plain.
OPAQUE_FORMS = [
    "unshare -r touch ran",
    "unshare --map-root-user touch ran",
    "nsenter -t 1 touch ran",
    "setpriv --reuid 0 touch ran",
    "runuser -u root touch ran",
    "runuser root -c 'touch ran'",
    "strace -o /dev/null touch ran",
    "ltrace touch ran",
    "uclampset -m 0 touch ran",
    "runcon -t x touch ran",
    "run-parts .",
    "sg root -c 'touch ran'",
]


@pytest.mark.parametrize("line", OPAQUE_FORMS)
def test_a_runner_not_unwrapped_is_never_plain(user, line):
    parsed = parse_command(line)
    assert not parsed.plain and "does not unwrap" in parsed.unplain, parsed
    _never_through(user, line)


@pytest.mark.parametrize(
    "line",
    [
        "timeout --bogus 5 touch ran",  # an option the table does not know
        "timeout -z 5 touch ran",
        "env --i touch ran",  # ambiguous: --ignore-environment, --ignore-signal
        "xargs --max touch ran",  # ambiguous: --max-args, --max-chars, --max-lines, --max-procs
        "su -s /bin/sh -c 'touch ran'",  # a shell chosen by an option
        "su root ./script",  # arguments passed to the user's shell
        "su",  # an interactive shell reading its input
        "chroot /",
        "script -q /dev/null",
        "setarch x86_64",
        "nice --5 touch ran",
    ],
)
def test_a_runner_read_in_doubt_is_not_plain(user, line):
    assert not parse_command(line).plain
    conversation = new_conversation(user)
    _rule(None, "deny", "rm *")
    assert evaluate(conversation, "bash", {"command": line}).decision == "deny"


# --- 4. the reading against a real bash (fuzz) ------------------------------------------------
# Lines made of tokens where the grammar and bash part (quotes, escapes, the separators bash
# does not split at, comments, substitutions); every program name is one PATH does not hold, so
# bash only reports it ("NAME: command not found") and nothing runs. Each line the port calls
# plain must show every program bash tried to run. Deterministic in the suite (derandomize);
# `TOOLCORE_FUZZ_EXAMPLES=20000` for a longer search.
TOKENS = [
    "aa",
    "bb",
    "zz",
    " ",
    " ",
    "\t",
    "\n",
    ";",
    "&&",
    "||",
    "|",
    "&",
    "#",
    "'",
    '"',
    "$'",
    '$"',
    "\\",
    "\\\n",
    "\r",
    "\f",
    "\v",
    "\xa0",
    "(",
    ")",
    "{",
    "}",
    "$(",
    "`",
    "<<",
    "EOF",
    "<<<",
    ">",
    "x",
    "=",
    "$",
    "*",
    "!",
    "[[",
    "]]",
    "((",
    "))",
    "if",
    "then",
    "fi",
    "case",
    "in",
    "esac",
    "for",
    "do",
    "done",
    "\\'",
    "\\\\",
    "-",
    "~",
    ",",
]
EXAMPLES = int(os.environ.get("TOOLCORE_FUZZ_EXAMPLES", "300"))


def _bash_ran(line: str, folder: Path) -> set[str]:
    done = subprocess.run(
        [BASH, "--norc", "-c", line],
        cwd=folder,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
        env={"PATH": str(folder / "empty"), "HOME": str(folder)},
    )
    names = set()
    for message in done.stderr.decode("utf-8", "replace").split("\n"):
        if message.endswith(": command not found"):
            name = message.removesuffix(": command not found").rsplit(": ", 1)[-1]
            names.add(_unquoted(name))
    return names


def _unquoted(name: str) -> str:
    """bash quotes a name holding a control character as ``$'…'``; a name may also be ``$'``."""
    if len(name) >= 3 and name.startswith("$'") and name.endswith("'"):
        decoded = ansi_c(name[2:-1])
        if any(ord(c) < 32 or ord(c) == 127 for c in decoded):
            return decoded
    return name


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=14).map("".join))
def test_every_program_bash_runs_is_seen_on_a_plain_line(tmp_path_factory, line):
    parsed = parse_command(line)
    if not parsed.plain:
        return
    folder = tmp_path_factory.mktemp("fuzz")
    (folder / "empty").mkdir()
    seen = {c.program for c in parsed.commands}
    unseen = {name for name in _bash_ran(line, folder) if name not in seen}
    assert not unseen, f"bash ran {sorted(unseen)} in {line!r}; the port saw {sorted(seen)}"


# What the fuzz found, each a class closed in tools/shell/doubts.py or words.py: kept as cases.
FOUND = [
    "!''",  # bash runs ``!``: a ``!`` is negation only as a word of its own
    "!'' aa",
    "<<<aa\n\\'",  # the same after a here-string: bash runs ``'``
    "<<<{ {",  # the grammar reads ``{ {`` as the here-string's word; bash runs ``{``
    "aaaa\n\\aa",  # the grammar reads ``<newline>\\aa`` as an argument; bash runs ``aa``
    "}\\aa",  # the grammar parts ``}`` and ``aa``; bash runs ``}aa``
    "\\ aa",  # the grammar skips ``\\ `` as a blank; bash runs `` aa``
    "aa \\ bb",
    "{}",  # ``{`` opens a group only as a word of its own; bash runs ``{}``
    '" $"',  # the blank before a lone ``$`` is part of the word: bash runs `` $``
    '"  $" aa',
    '"$\'"',  # bash runs ``$'`` (and says so unquoted)
    "*aa=",  # no assignment to bash (the name is not an identifier): it runs ``*aa=``
    "1a=2",
]


@pytest.mark.parametrize("line", FOUND)
def test_what_the_fuzz_found_stays_found(tmp_path, line):
    (tmp_path / "empty").mkdir()
    parsed = parse_command(line)
    ran = _bash_ran(line, tmp_path)
    assert ran, line  # the line runs a program, so the finding is still a finding
    seen = {c.program for c in parsed.commands}
    assert not parsed.plain or ran <= seen, (line, sorted(ran), sorted(seen))
