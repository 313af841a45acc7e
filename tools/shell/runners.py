"""Runners: programs and builtins that run another command, each read by a table of its options.

``timeout -s KILL 5 rm -rf x`` runs ``rm -rf x``; to check it against the rules, the port must
know that ``-s`` takes a value and that one duration follows the options. Each runner here is
declared by the options it takes (with or without a value), how many operands come before the
command it runs, and, for a few, a special reading (``xargs`` takes its arguments from its
input, ``find -exec`` runs each clause, a shell runs the string after ``-c``, ``watch`` without
``-x`` runs its words through ``sh -c``).

An option the table does not know is read as one without a value: a real program refuses an
unknown option and runs nothing, so that reading can only err toward seeing a command that
does not run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .words import Word, literal

SHELLS = frozenset(["sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "posh", "yash"])
# Builtins that run text as commands or define what a later word runs: never plain.
UNCHECKABLE = {
    "eval": "an eval",
    "source": "a script read with source",
    ".": "a script read with .",
    "alias": "an alias",
    "hash": "a builtin that changes what a name runs",  # ``hash -p ./x ls``
    "enable": "a builtin that changes what a name runs",  # ``enable -f ./x.so ls``
}
# Variables that change which program a name runs, or what a shell reads before it runs
# anything: a line that sets one (``PATH=. ls``, ``LD_PRELOAD=x git``) is not plain.
RUN_CHANGING_VARIABLES = frozenset(
    ["PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "BASH_ENV", "ENV", "IFS", "SHELLOPTS"]
)
# Shell flags that read startup files (where aliases and functions hide) before the command.
_STARTUP_FLAGS = frozenset(["-i", "-l", "--login", "--rcfile", "--init-file"])


def changes_what_runs(assignment: str) -> bool:
    """Whether ``NAME=VALUE`` sets one of ``RUN_CHANGING_VARIABLES`` (``+=`` too)."""
    name = assignment.split("=", 1)[0].removesuffix("+")
    return name in RUN_CHANGING_VARIABLES


@dataclass(frozen=True)
class Options:
    """How a runner's options read: short letters with and without a value, long names that
    take their value in the next word (``--signal KILL``; ``--signal=KILL`` always works)."""

    short_valued: str = ""
    short_optional: str = ""  # a value only when attached: ``xargs -i{}``, ``-l5``
    long_valued: frozenset[str] = frozenset()
    operands: int = 0  # words after the options and before the command (timeout's duration)
    assignments: bool = False  # NAME=VALUE words before the command (env, sudo)
    stop_at_operand: bool = True  # the first word that is not an option ends them


def _long(*names: str) -> frozenset[str]:
    return frozenset(names)


TABLE: dict[str, Options] = {
    "env": Options(
        short_valued="uCS",
        long_valued=_long("--unset", "--chdir", "--split-string"),
        assignments=True,
    ),
    "timeout": Options(
        short_valued="sk", long_valued=_long("--signal", "--kill-after"), operands=1
    ),
    "nice": Options(short_valued="n", long_valued=_long("--adjustment")),
    "ionice": Options(
        short_valued="cnpPu",
        long_valued=_long("--class", "--classdata", "--pid", "--pgid", "--uid"),
    ),
    "nohup": Options(),
    "stdbuf": Options(short_valued="ioe", long_valued=_long("--input", "--output", "--error")),
    "time": Options(short_valued="fo", long_valued=_long("--format", "--output")),
    "command": Options(),
    "builtin": Options(),
    "exec": Options(short_valued="a"),
    "sudo": Options(
        short_valued="CDghpRrTtUu",
        long_valued=_long(
            "--chdir",
            "--chroot",
            "--close-from",
            "--group",
            "--host",
            "--prompt",
            "--role",
            "--type",
            "--command-timeout",
            "--other-user",
            "--user",
        ),
        assignments=True,
    ),
    "doas": Options(short_valued="uC"),
    "xargs": Options(
        short_valued="adEILnPs",
        short_optional="iel",
        long_valued=_long(
            "--arg-file",
            "--delimiter",
            "--max-args",
            "--max-procs",
            "--max-chars",
            "--process-slot-var",
        ),
    ),
    "watch": Options(short_valued="n", long_valued=_long("--interval")),
    "flock": Options(
        short_valued="Ewc",
        long_valued=_long("--conflict-exit-code", "--timeout", "--command"),
        operands=1,
    ),
    "setsid": Options(),
    "chroot": Options(long_valued=_long("--userspec", "--groups"), operands=1),
    "coproc": Options(),
    "busybox": Options(),
}
# Read by their own scan, not by an option table (their operands may come from an expansion).
OWN_SCAN = frozenset(["find", "su", "trap"])
for _shell in SHELLS:
    TABLE[_shell] = Options(short_valued="oO", long_valued=_long("--rcfile", "--init-file"))


def is_runner(program: str) -> bool:
    return program in TABLE or program in OWN_SCAN


@dataclass
class Unwrapped:
    """What a runner's words run: ``commands`` to check as simple commands of their own,
    ``scripts`` (shell text) to parse in turn, and ``unplain`` when what it runs cannot be
    known (a script file, a shell reading its input)."""

    commands: list[list[Word]] = field(default_factory=list)
    scripts: list[str] = field(default_factory=list)
    unplain: tuple[str, str] | None = None  # (construct, the words that show it)


@dataclass
class _Read:
    """A runner's words read by its table: options seen (short letters and long names, with
    their values), operands, and where the command begins."""

    flags: dict[str, str | None]
    operands: list[Word]
    rest: list[Word]
    unknown: Word | None = None  # a dynamic word where an option or the command must be
    assigned: list[Word] = field(default_factory=list)  # NAME=VALUE words (env, sudo)
    dynamic: set[str] = field(default_factory=set)  # options whose value is an expansion


def read_options(words: Sequence[Word], table: Options) -> _Read:
    """Read ``words`` (after the runner's name) by ``table``."""
    flags: dict[str, str | None] = {}
    from_expansion: set[str] = set()
    operands: list[Word] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word.dynamic:
            return _Read(flags, operands, list(words[i:]), unknown=word, dynamic=from_expansion)
        text = word.value
        if text == "--":
            i += 1
            break
        if text.startswith("--") and len(text) > 2:
            name, eq, value = text.partition("=")
            if eq:
                flags[name] = value
            elif name in table.long_valued and i + 1 < len(words):
                flags[name] = words[i + 1].value
                if words[i + 1].dynamic:
                    from_expansion.add(name)
                i += 1
            else:
                flags[name] = None
            i += 1
            continue
        if text.startswith("-") and len(text) > 1:
            i += _short_cluster(text[1:], words, i, table, flags, from_expansion)
            continue
        break
    rest = list(words[i:])
    while len(operands) < table.operands and rest:
        if rest[0].dynamic:
            return _Read(flags, operands, rest, unknown=rest[0], dynamic=from_expansion)
        operands.append(rest.pop(0))
    assigned: list[Word] = []
    if table.assignments:
        while rest and not rest[0].dynamic and _is_assignment(rest[0].value):
            assigned.append(rest.pop(0))
    return _Read(flags, operands, rest, assigned=assigned, dynamic=from_expansion)


def _short_cluster(
    letters: str,
    words: Sequence[Word],
    at: int,
    table: Options,
    flags: dict[str, str | None],
    from_expansion: set[str],
) -> int:
    """Read ``-abc`` (``letters`` without the dash); the number of words it took."""
    for pos, letter in enumerate(letters):
        attached = letters[pos + 1 :]
        if letter in table.short_valued:
            if attached:
                flags["-" + letter] = attached
                return 1
            flags["-" + letter] = words[at + 1].value if at + 1 < len(words) else None
            if at + 1 < len(words) and words[at + 1].dynamic:
                from_expansion.add("-" + letter)
            return 2
        if letter in table.short_optional:
            flags["-" + letter] = attached or None
            return 1
        flags["-" + letter] = None
    return 1


def _is_assignment(text: str) -> bool:
    name, eq, _ = text.partition("=")
    return bool(eq) and name.replace("_", "a").isalnum() and not name[:1].isdigit()


def unwrap(program: str, words: Sequence[Word], *, stdin: str | None) -> Unwrapped:
    """What the runner ``program`` runs, given its words after its name. ``stdin`` is the text
    a here-document or here-string feeds it (a shell reads it as its script)."""
    out = Unwrapped()
    if program in OWN_SCAN:
        _SPECIAL[program](program, _Read({}, [], list(words)), words, stdin, out)
        return out
    read = read_options(words, TABLE[program])
    if read.unknown is not None:
        runs_a_string = program in SHELLS and "-c" in read.flags
        construct = "a command string" if runs_a_string else "a command word"
        out.unplain = (f"{construct} from an expansion", read.unknown.source)
        return out
    changing = next((w for w in read.assigned if changes_what_runs(w.value)), None)
    if changing is not None:
        out.unplain = ("an assignment that changes what runs", changing.source)
    special = _SPECIAL.get(program)
    if special is not None:
        special(program, read, words, stdin, out)
    elif read.rest:
        out.commands.append(read.rest)
    return out


def _env(_program: str, read: _Read, _words: Sequence[Word], _stdin: str | None, out: Unwrapped):
    split = read.flags.get("-S", read.flags.get("--split-string"))
    if read.dynamic & {"-S", "--split-string"}:
        out.unplain = ("a command string from an expansion", "env -S")
        return
    if split is not None:
        # ``env -S 'rm -rf x'`` splits the string into words and runs them (then the rest).
        rest = " ".join(w.source for w in read.rest)
        out.scripts.append(f"{split} {rest}".strip())
    elif read.rest:
        out.commands.append(read.rest)


def _command(_program: str, read: _Read, _words, _stdin, out: Unwrapped):
    if "-v" in read.flags or "-V" in read.flags:
        return  # ``command -v rm`` only says where rm is
    if read.rest:
        out.commands.append(read.rest)


def _xargs(_program: str, read: _Read, _words, _stdin, out: Unwrapped):
    """``xargs`` runs its command (``echo`` when none) with arguments read from its input: they
    are unknown, after the command's last word or, with ``-I R``, from the first ``R`` on."""
    replace = read.flags.get("-I")
    if replace is None and ("-i" in read.flags or "--replace" in read.flags):
        replace = read.flags.get("-i") or read.flags.get("--replace") or "{}"
    command = read.rest or [literal("echo")]
    out.commands.append(_placeholder_cut(command, replace))


def _placeholder_cut(words: list[Word], placeholder: str | None) -> list[Word]:
    """``words`` with an unknown part where the input's words go: from the first word holding
    ``placeholder``, or after the last word when there is none."""
    if placeholder:
        for at, word in enumerate(words):
            if placeholder in word.value and not word.dynamic:
                prefix = word.value.split(placeholder, 1)[0]
                return [*words[:at], Word(prefix, word.source, "expansion")]
        return list(words)  # no placeholder: the input is not passed
    return [*words, Word("", "", "expansion")]


def _find(_program: str, _read: _Read, words: Sequence[Word], _stdin, out: Unwrapped):
    """Each ``-exec``/``-execdir``/``-ok``/``-okdir`` clause runs its words up to ``;`` or
    ``+``, with ``{}`` standing for each path found."""
    i = 0
    while i < len(words):
        if not words[i].dynamic and words[i].value in ("-exec", "-execdir", "-ok", "-okdir"):
            clause: list[Word] = []
            i += 1
            while i < len(words) and (words[i].dynamic or words[i].value not in (";", "+")):
                clause.append(words[i])
                i += 1
            if clause:
                out.commands.append(_placeholder_cut(clause, "{}"))
        i += 1


def _shell(program: str, read: _Read, _words, stdin: str | None, out: Unwrapped):
    """``sh -c STRING``: the string is parsed in turn; ``sh FILE`` runs a script no rule sees;
    ``sh`` alone (or ``-s``) reads its commands from its input. An interactive or login shell
    reads startup files first (aliases, functions): what it runs is not plain."""
    startup = next((flag for flag in read.flags if flag in _STARTUP_FLAGS), None)
    if startup is not None:
        out.unplain = ("a shell reading startup files", f"{program} {startup}")
    if "-c" in read.flags:
        # ``-c`` takes no value itself: the command string is the first operand.
        if not read.rest:
            return  # ``sh -c`` without a string runs nothing
        if read.rest[0].dynamic:
            out.unplain = ("a command string from an expansion", read.rest[0].source)
        else:
            out.scripts.append(read.rest[0].value)
        return
    if read.rest and "-s" not in read.flags:
        shown = " ".join(w.source for w in [literal(program), *read.rest[:1]])
        out.unplain = ("a script file run through a shell", shown)
        return
    if stdin is not None:
        out.scripts.append(stdin)
    else:
        out.unplain = ("a shell reading commands from its input", program)


def _watch(_program: str, read: _Read, _words, _stdin, out: Unwrapped):
    """``watch CMD…`` runs its words joined by spaces through ``sh -c``; with ``-x`` directly."""
    if not read.rest:
        return
    if "-x" in read.flags or "--exec" in read.flags:
        out.commands.append(read.rest)
    elif any(w.dynamic for w in read.rest):
        out.unplain = ("a command string from an expansion", " ".join(w.source for w in read.rest))
    else:
        out.scripts.append(" ".join(w.value for w in read.rest))


def _flock(_program: str, read: _Read, _words, _stdin, out: Unwrapped):
    """``flock [options] FILE CMD…`` or ``flock [options] FILE -c STRING`` (``-c`` may also
    come before the file); ``flock [options] FD`` runs nothing."""
    string = read.flags.get("-c", read.flags.get("--command"))
    if read.dynamic & {"-c", "--command"}:
        out.unplain = ("a command string from an expansion", "flock -c")
        return
    rest = read.rest
    if string is None and rest and not rest[0].dynamic and rest[0].value in ("-c", "--command"):
        if len(rest) < 2:
            return
        if rest[1].dynamic:
            out.unplain = ("a command string from an expansion", rest[1].source)
            return
        string = rest[1].value
    if string is not None:
        out.scripts.append(string)
    elif rest:
        out.commands.append(rest)


def _su(_program: str, _read: _Read, words: Sequence[Word], _stdin, out: Unwrapped):
    """``su [USER] -c STRING`` runs the string through the user's shell (options may follow
    the user's name); without ``-c``, an interactive shell."""
    for at, word in enumerate(words):
        if word.dynamic:
            continue
        name, eq, value = word.value.partition("=")
        if eq and name == "--command":
            out.scripts.append(value)
        elif word.value in ("-c", "--command") and at + 1 < len(words):
            nxt = words[at + 1]
            if nxt.dynamic:
                out.unplain = ("a command string from an expansion", nxt.source)
            else:
                out.scripts.append(nxt.value)


def _trap(_program: str, _read: _Read, words: Sequence[Word], _stdin, out: Unwrapped):
    """``trap 'CMD' SIGNAL…`` runs CMD later; ``trap - SIGNAL``, ``trap SIGNAL`` and ``trap
    -l``/``-p`` run nothing."""
    rest = list(words)
    if rest and not rest[0].dynamic and rest[0].value == "--":
        rest = rest[1:]
    if len(rest) < 2 or (not rest[0].dynamic and rest[0].value.startswith("-")):
        return
    if rest[0].dynamic:
        out.unplain = ("a command string from an expansion", rest[0].source)
    else:
        out.scripts.append(rest[0].value)


def _coproc(_program: str, read: _Read, _words, _stdin, out: Unwrapped):
    # ``coproc NAME { …; }`` is a compound command the grammar does not read; the simple
    # form's command is still checked.
    out.unplain = ("a coprocess", "coproc")
    if read.rest:
        out.commands.append(read.rest)


_SPECIAL = {
    "env": _env,
    "command": _command,
    "xargs": _xargs,
    "find": _find,
    "watch": _watch,
    "flock": _flock,
    "su": _su,
    "trap": _trap,
    "coproc": _coproc,
    **{shell: _shell for shell in SHELLS},
}
