"""Runners: programs and builtins that run another command, read by their option tables.

``timeout -s KILL 5 rm -rf x`` runs ``rm -rf x``; to check it against the rules, the port must
know that ``-s`` takes a value and that one duration follows the options. Each runner has a
table of every option it takes (``options.py``, read as getopt reads them, abbreviations
included), and a few a special reading here (``xargs`` takes its arguments from its input,
``find -exec`` runs each clause, a shell runs the string after ``-c``, ``watch`` without ``-x``
runs its words through ``sh -c``, ``su -c`` runs a string through the user's shell).

An option a table does not know, or an ambiguous prefix, makes the line not plain: the table
might be missing an option that takes a value, and reading on would then see the wrong command.
``OPAQUE`` lists programs that run a command in ways this reading does not unwrap
(``strace``, ``unshare``, ``runuser``…): they make the line not plain too.
``tests/tools/test_runners.py`` keeps the tables complete: every program of coreutils,
util-linux, bsdutils, procps, findutils and debianutils found on the machine is either a runner
here or declared as running no command, and every runner is run for real with the forms it is
read in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .options import SETARCH_ALIASES, SHELLS, TABLE, Read, names, read_options
from .words import Word, literal

# Builtins that run text as commands or define what a later word runs: never plain.
UNCHECKABLE = {
    "eval": "an eval",
    "source": "a script read with source",
    ".": "a script read with .",
    "alias": "an alias",
    "hash": "a builtin that changes what a name runs",  # ``hash -p ./x ls``
    "enable": "a builtin that changes what a name runs",  # ``enable -f ./x.so ls``
}
# Programs that run a command (or a shell) in ways this reading does not unwrap: never plain.
OPAQUE = names(
    "unshare nsenter setpriv runuser uclampset runcon switch_root scriptlive run-parts "
    "sulogin agetty getty login newgrp sg strace ltrace gdb valgrind perf catchsegv bwrap "
    "firejail nsjail systemd-run systemd-nspawn schroot pkexec fakeroot faketime torsocks "
    "proxychains proxychains4 numactl cpulimit chpst softlimit setuidgid envdir unbuffer "
    "expect parallel sem chronic ifne dbus-run-session xvfb-run tmux screen"
)
# Variables that change which program a name runs, what a shell reads or expands before or
# while it runs anything: a line that sets one (``PATH=. ls``, ``LD_PRELOAD=x git``,
# ``PS4='$(…)' bash -x``, ``BASH_FUNC_ls%%=…``) is not plain.
RUN_CHANGING_VARIABLES = names(
    "PATH IFS BASH_ENV ENV SHELLOPTS BASHOPTS SHELL PS0 PS1 PS2 PS3 PS4 PROMPT_COMMAND "
    "BASH_CMDS BASH_ALIASES BASH_LOADABLES_PATH EXECIGNORE NODE_OPTIONS PERL5OPT "
    "PYTHONSTARTUP PYTHONPATH RUBYOPT GCONV_PATH GIT_CONFIG_PARAMETERS GIT_CONFIG_COUNT "
    "GIT_CONFIG_GLOBAL GIT_CONFIG_SYSTEM GIT_EXEC_PATH GIT_TEMPLATE_DIR"
)
_RUN_CHANGING_PREFIXES = ("LD_", "BASH_FUNC_", "GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_")
# Variables whose value a program runs as a command (``GIT_PAGER=cat git log`` runs ``cat``):
# the value is read as a command string of the line, its commands checked as the line's own.
HOOK_VARIABLES = names(
    "PAGER EDITOR VISUAL BROWSER GIT_SSH GIT_EXTERNAL_DIFF LESSOPEN LESSCLOSE MANPAGER "
    "SUDO_ASKPASS SSH_ASKPASS"
)
_HOOK_SUFFIXES = ("_COMMAND", "_PAGER", "_EDITOR", "_ASKPASS")
# Shell flags that read startup files (where aliases and functions hide) before the command.
_STARTUP_FLAGS = frozenset(["-i", "-l", "--login", "--rcfile", "--init-file"])


def _variable(assignment: str) -> str:
    return assignment.split("=", 1)[0].removesuffix("+").split("[", 1)[0]


def changes_what_runs(assignment: str) -> bool:
    """Whether ``NAME=VALUE`` (``NAME+=``, ``NAME[…]=`` too) sets a variable that changes what
    runs: one of ``RUN_CHANGING_VARIABLES``, any ``LD_…``, ``BASH_FUNC_…`` (a function a bash
    imports) or ``GIT_CONFIG_KEY_…``/``GIT_CONFIG_VALUE_…`` (git configuration, aliases and
    hooks included)."""
    name = _variable(assignment)
    return name in RUN_CHANGING_VARIABLES or name.startswith(_RUN_CHANGING_PREFIXES)


def runs_its_value(assignment: str) -> bool:
    """Whether a program runs ``NAME``'s value as a command: ``HOOK_VARIABLES``, and any
    ``…_COMMAND``, ``…_PAGER``, ``…_EDITOR``, ``…_ASKPASS`` (``GIT_SSH_COMMAND``)."""
    name = _variable(assignment)
    return name in HOOK_VARIABLES or name.endswith(_HOOK_SUFFIXES)


# Read by their own scan, not by an option table (their operands may come from an expansion).
OWN_SCAN = frozenset(["find", "trap"])
# Operands before the command, unless an option says the operands are process ids.
_PID_OPTIONS = frozenset(["-p", "--pid", "-a", "--all-tasks", "-m", "--max"])


def is_runner(program: str) -> bool:
    return program in TABLE or program in OWN_SCAN or program in OPAQUE


@dataclass
class Unwrapped:
    """What a runner's words run: ``commands`` to check as simple commands of their own,
    ``scripts`` (shell text) to parse in turn, and ``unplain`` when what it runs cannot be
    known (a script file, a shell reading its input)."""

    commands: list[list[Word]] = field(default_factory=list)
    scripts: list[str] = field(default_factory=list)
    unplain: tuple[str, str] | None = None  # (construct, the words that show it)


def unwrap(program: str, words: Sequence[Word], *, stdin: str | None) -> Unwrapped:
    """What the runner ``program`` runs, given its words after its name. ``stdin`` is the text
    a here-document or here-string feeds it (a shell reads it as its script)."""
    out = Unwrapped()
    if program in OPAQUE:
        out.unplain = ("a program that runs a command this reading does not unwrap", program)
        return out
    if program in OWN_SCAN:
        _SPECIAL[program](program, Read({}, [], list(words)), words, stdin, out)
        return out
    words = list(words)
    if program == "env" and words and not words[0].dynamic and words[0].value == "-":
        words[0] = literal("-i")  # ``env -`` is ``env -i``
    if program == "setarch" and words and not words[0].dynamic and words[0].value[:1] != "-":
        words = words[1:]  # ``setarch ARCH [options] [program…]``: the architecture first
    if program == "su":
        words = [literal("-l") if not w.dynamic and w.value == "-" else w for w in words]
    read = read_options(words, TABLE[program])
    if read.bad is not None:
        out.unplain = read.bad
        return out
    if read.unknown is not None:
        runs_a_string = program in SHELLS and "-c" in read.flags
        construct = "a command string" if runs_a_string else "a command word"
        out.unplain = (f"{construct} from an expansion", read.unknown.source)
        return out
    changing = next((w for w in read.assigned if changes_what_runs(w.value)), None)
    if changing is not None:
        out.unplain = ("an assignment that changes what runs", changing.source)
    for hook in read.assigned:
        if runs_its_value(hook.value):
            out.scripts.append(hook.value.split("=", 1)[1])
    special = _SPECIAL.get(program)
    if special is not None:
        special(program, read, words, stdin, out)
    elif read.rest:
        out.commands.append(read.rest)
    return out


def _env(_program: str, read: Read, _words: Sequence[Word], _stdin: str | None, out: Unwrapped):
    split = read.flags.get("-S", read.flags.get("--split-string"))
    if read.dynamic & {"-S", "--split-string"}:
        out.unplain = ("a command string from an expansion", "env -S")
        return
    if split is not None:
        # ``env -S 'rm -rf x'`` splits the string into words that stand where it stood, options
        # included (``env -S '-i rm x'``): read as ``env WORDS REST``. Its escapes (``\\_``)
        # and ``${VAR}`` follow rules of their own: a string with either is not plain.
        if "\\" in split or "$" in split:
            out.unplain = ("an env -S string read by rules of its own", split)
        rest = " ".join(w.source for w in read.rest)
        out.scripts.append(f"env {split} {rest}".strip())
    elif read.rest:
        out.commands.append(read.rest)


def _command(_program: str, read: Read, _words, _stdin, out: Unwrapped):
    if "-v" in read.flags or "-V" in read.flags:
        return  # ``command -v rm`` only says where rm is
    if read.rest:
        out.commands.append(read.rest)


def _xargs(_program: str, read: Read, _words, _stdin, out: Unwrapped):
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


def _find(_program: str, _read: Read, words: Sequence[Word], _stdin, out: Unwrapped):
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


def _shell(program: str, read: Read, _words, stdin: str | None, out: Unwrapped):
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


def _watch(_program: str, read: Read, _words, _stdin, out: Unwrapped):
    """``watch CMD…`` runs its words joined by spaces through ``sh -c``; with ``-x`` directly."""
    if not read.rest:
        return
    if "-x" in read.flags or "--exec" in read.flags:
        out.commands.append(read.rest)
    elif any(w.dynamic for w in read.rest):
        out.unplain = ("a command string from an expansion", " ".join(w.source for w in read.rest))
    else:
        out.scripts.append(" ".join(w.value for w in read.rest))


def _flock(_program: str, read: Read, _words, _stdin, out: Unwrapped):
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


def _su(program: str, read: Read, _words, _stdin, out: Unwrapped):
    """``su [options] [-] [USER [ARG…]]``, options anywhere: ``-c STRING`` runs the string
    through the user's shell; a shell chosen by ``-s``, arguments passed to the shell without
    ``-c``, or an interactive shell reading its input are not plain."""
    if "-s" in read.flags or "--shell" in read.flags:
        out.unplain = ("a shell chosen by an option", f"{program} -s")
        return
    if _string_from_expansion(read, "-c", "--command", "--session-command"):
        out.unplain = ("a command string from an expansion", f"{program} -c")
        return
    string = _first_flag(read, "-c", "--command", "--session-command")
    if string is not None:
        out.scripts.append(string)
    elif len(read.rest) > 1:
        out.unplain = ("arguments passed to the user's shell", program)
    else:
        out.unplain = ("a shell reading commands from its input", program)


def _script(program: str, read: Read, _words, _stdin, out: Unwrapped):
    """``script -c STRING [FILE]`` runs the string through ``$SHELL -c``; without ``-c``, an
    interactive shell reading its input."""
    if _string_from_expansion(read, "-c", "--command"):
        out.unplain = ("a command string from an expansion", f"{program} -c")
        return
    string = _first_flag(read, "-c", "--command")
    if string is not None:
        out.scripts.append(string)
    else:
        out.unplain = ("a shell reading commands from its input", program)


def _shell_if_none(program: str, read: Read, _words, _stdin, out: Unwrapped):
    """``chroot DIR``, ``setarch ARCH``: without a command they start a shell, which reads its
    input."""
    if read.rest:
        out.commands.append(read.rest)
    else:
        out.unplain = ("a shell reading commands from its input", program)


def _unless_pid(_program: str, read: Read, _words, _stdin, out: Unwrapped):
    """``taskset``, ``chrt``, ``choom``, ``ionice``: with ``-p`` (``chrt -m``) they act on
    running processes and run nothing."""
    if read.rest and not (set(read.flags) & _PID_OPTIONS):
        out.commands.append(read.rest)


def _first_flag(read: Read, *names: str) -> str | None:
    return next((read.flags[n] for n in names if read.flags.get(n) is not None), None)


def _string_from_expansion(read: Read, *names: str) -> bool:
    return bool(read.dynamic & set(names))


def _trap(_program: str, _read: Read, words: Sequence[Word], _stdin, out: Unwrapped):
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


def _coproc(_program: str, read: Read, _words, _stdin, out: Unwrapped):
    # ``coproc NAME { …; }`` is a compound command the grammar does not read; the simple
    # form's command is still checked.
    out.unplain = ("a coprocess", "coproc")
    if read.rest:
        out.commands.append(read.rest)


_SPECIAL = {
    "script": _script,
    "chroot": _shell_if_none,
    "setarch": _shell_if_none,
    **{alias: _shell_if_none for alias in SETARCH_ALIASES},
    "taskset": _unless_pid,
    "chrt": _unless_pid,
    "choom": _unless_pid,
    "ionice": _unless_pid,
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
