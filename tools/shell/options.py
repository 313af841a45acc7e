"""Runners' option tables, and the reading of a runner's words by its table.

Each runner is declared by every option it takes (with a value, with an optional attached
value, or none), how many operands come before the command it runs, whether assignments or
options may follow its operands. Long options are read as getopt reads them: any unambiguous
prefix of a long name is that option (``timeout --sig KILL`` is ``--signal KILL``). An option a
table does not know, or an ambiguous prefix, is ``Read.bad``: the table might be missing an
option that takes a value, and reading on would then see the wrong command (``runners.py``
makes the line not plain).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .words import Word


def names(text: str) -> frozenset[str]:
    """The names of ``"a b …"`` (a long list of names reads best as one string)."""
    return frozenset(text.split())


SHELLS = names("sh bash dash zsh ksh mksh ash posh yash")


@dataclass(frozen=True)
class Options:
    """How a runner's options read. Short letters: with a value (attached or the next word),
    with a value only when attached (``xargs -i{}``, ``-l5``), or none; long names likewise
    (a value in the next word or after ``=``; only after ``=``; none). ``--help`` and
    ``--version`` are known to every runner."""

    short_valued: str = ""
    short_optional: str = ""
    short_flags: str = ""
    long_valued: frozenset[str] = frozenset()
    long_optional: frozenset[str] = frozenset()
    long_flags: frozenset[str] = frozenset()
    any_short: bool = False  # every letter is an option without a value (a shell's flags)
    operands: int = 0  # words after the options and before the command (timeout's duration)
    assignments: bool = False  # NAME=VALUE words before the command (env, sudo)
    permute: bool = False  # options anywhere, as getopt reads them without ``+`` (su, script)

    @property
    def long_names(self) -> frozenset[str]:
        return self.long_valued | self.long_optional | self.long_flags | _ALWAYS_LONG

    def long_option(self, written: str) -> str | None:
        """The long option ``written`` stands for (itself, or the one name it is a prefix of);
        None when it is none or more than one."""
        names = self.long_names
        if written in names:
            return written
        matching = [name for name in names if name.startswith(written)]
        return matching[0] if len(matching) == 1 else None


_ALWAYS_LONG = frozenset(["--help", "--version"])


def _long(text: str) -> frozenset[str]:
    """``--a``, ``--b``… of the long names ``"a b …"``."""
    return frozenset(f"--{name}" for name in names(text))


_SETARCH = Options(
    short_flags="BFILRSTXZ3vhV",
    long_flags=_long(
        "32bit fdpic-funcptrs short-inode addr-compat-layout addr-no-randomize "
        "whole-seconds sticky-timeouts read-implies-exec mmap-page-zero 3gb 4gb uname-2.6 "
        "verbose list"
    ),
)
SETARCH_ALIASES = names("linux32 linux64 i386 x86_64")

TABLE: dict[str, Options] = {
    "env": Options(
        short_valued="uCS",
        short_flags="i0v",
        long_valued=_long("unset chdir split-string"),
        long_optional=_long("block-signal default-signal ignore-signal"),
        long_flags=_long("ignore-environment null list-signal-handling debug"),
        assignments=True,
    ),
    "timeout": Options(
        short_valued="sk",
        short_flags="v",
        long_valued=_long("signal kill-after"),
        long_flags=_long("preserve-status foreground verbose"),
        operands=1,
    ),
    "nice": Options(short_valued="n", short_flags="0123456789", long_valued=_long("adjustment")),
    "ionice": Options(
        short_valued="cnpPu",
        short_flags="thV",
        long_valued=_long("class classdata pid pgid uid"),
        long_flags=_long("ignore"),
    ),
    "nohup": Options(),
    "stdbuf": Options(short_valued="ioe", long_valued=_long("input output error")),
    # GNU time's options; bash's own ``time`` reads only ``-p``.
    "time": Options(
        short_valued="fo",
        short_flags="pavqV",
        long_valued=_long("format output"),
        long_flags=_long("portability append verbose quiet"),
    ),
    "command": Options(short_flags="pvV"),
    "builtin": Options(),
    "exec": Options(short_valued="a", short_flags="cl"),
    "sudo": Options(
        short_valued="CDghpRrTtUu",
        short_flags="AbBEeHiKklNnPSsVv",
        long_valued=_long(
            "chdir chroot close-from group host prompt role type command-timeout other-user user"
        ),
        long_optional=_long("preserve-env"),
        long_flags=_long(
            "askpass background bell edit set-home login remove-timestamp reset-timestamp "
            "list no-update non-interactive preserve-groups stdin shell validate"
        ),
        assignments=True,
    ),
    "doas": Options(short_valued="uC", short_flags="nsL"),
    "xargs": Options(
        short_valued="adEILnPs",
        short_optional="iel",
        short_flags="0oprtx",
        long_valued=_long("arg-file delimiter max-args max-procs max-chars process-slot-var"),
        long_optional=_long("eof replace max-lines"),
        long_flags=_long("null interactive no-run-if-empty open-tty show-limits verbose exit"),
    ),
    "watch": Options(
        short_valued="nq",
        short_optional="d",
        short_flags="bceghprtwvx",
        long_valued=_long("interval equexit"),
        long_optional=_long("differences"),
        long_flags=_long("beep color errexit chgexit precise no-title no-wrap exec"),
    ),
    "flock": Options(
        short_valued="wEc",
        short_flags="sxunoFhV",
        long_valued=_long("timeout wait conflict-exit-code command"),
        long_flags=_long("shared exclusive unlock nonblock close no-fork verbose"),
        operands=1,
    ),
    "setsid": Options(short_flags="cfwhV", long_flags=_long("ctty fork wait")),
    "chroot": Options(
        long_valued=_long("userspec groups"), long_flags=_long("skip-chdir"), operands=1
    ),
    "coproc": Options(),
    "busybox": Options(),
    "taskset": Options(short_flags="apchV", long_flags=_long("all-tasks pid cpu-list"), operands=1),
    "chrt": Options(
        short_valued="TPD",
        short_flags="bdfiorRampvhV",
        long_valued=_long("sched-runtime sched-period sched-deadline"),
        long_flags=_long(
            "batch deadline fifo idle other rr reset-on-fork all-tasks max pid verbose"
        ),
        operands=1,
    ),
    "prlimit": Options(
        short_valued="po",
        short_optional="cdefilmnqrstuvxy",
        short_flags="hV",
        long_valued=_long("pid output"),
        long_optional=_long(
            "core data nice fsize sigpending memlock rss nofile msgqueue rtprio stack cpu "
            "nproc as locks rttime"
        ),
        long_flags=_long("noheadings raw verbose"),
    ),
    "setarch": _SETARCH,
    "choom": Options(short_valued="np", short_flags="hV", long_valued=_long("adjust pid")),
    "script": Options(
        short_valued="IOBTmcEo",
        short_optional="t",
        short_flags="aefqhV",
        long_valued=_long(
            "log-in log-out log-io log-timing logging-format command echo output-limit"
        ),
        long_optional=_long("timing"),
        long_flags=_long("append return flush force quiet"),
        permute=True,
    ),
    "su": Options(
        short_valued="cgGsw",
        short_flags="flmpPhV",
        long_valued=_long("command session-command group supp-group shell whitelist-environment"),
        long_flags=_long("fast login preserve-environment pty"),
        permute=True,
    ),
}
for _alias in SETARCH_ALIASES:
    TABLE[_alias] = _SETARCH
for _shell in SHELLS:
    TABLE[_shell] = Options(
        short_valued="oO",
        any_short=True,
        long_valued=_long("rcfile init-file"),
        long_flags=_long(
            "debug debugger dump-po-strings dump-strings login noediting noprofile norc posix "
            "pretty-print restricted verbose"
        ),
    )


@dataclass
class Read:
    """A runner's words read by its table: options seen (short letters and long names, with
    their values), operands, and where the command begins."""

    flags: dict[str, str | None]
    operands: list[Word]
    rest: list[Word]
    unknown: Word | None = None  # a dynamic word where an option or the command must be
    assigned: list[Word] = field(default_factory=list)  # NAME=VALUE words (env, sudo)
    dynamic: set[str] = field(default_factory=set)  # options whose value is an expansion
    bad: tuple[str, str] | None = None  # an option the table does not know, or ambiguous


class Unknown(Exception):
    def __init__(self, construct: str, shown: str):
        super().__init__(construct)
        self.doubt = (construct, shown)


def read_options(words: Sequence[Word], table: Options) -> Read:
    """Read ``words`` (after the runner's name) by ``table``."""
    flags: dict[str, str | None] = {}
    from_expansion: set[str] = set()
    positional: list[Word] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word.dynamic:
            if table.permute:  # options may follow: what it runs cannot be known
                return Read(flags, [], [], unknown=word, dynamic=from_expansion)
            return Read(flags, [], list(words[i:]), unknown=word, dynamic=from_expansion)
        text = word.value
        if text == "--":
            positional.extend(words[i + 1 :])
            break
        try:
            if text.startswith("--") and len(text) > 2:
                i += _long_option(text, words, i, table, flags, from_expansion)
                continue
            if text.startswith("-") and len(text) > 1:
                i += _short_cluster(text[1:], words, i, table, flags, from_expansion)
                continue
        except Unknown as unknown:
            return Read(flags, [], [], bad=unknown.doubt)
        if not table.permute:
            positional.extend(words[i:])
            break
        positional.append(word)
        i += 1
    rest = positional
    operands: list[Word] = []
    while len(operands) < table.operands and rest:
        if rest[0].dynamic:
            return Read(flags, operands, rest, unknown=rest[0], dynamic=from_expansion)
        operands.append(rest.pop(0))
    assigned: list[Word] = []
    if table.assignments:
        while rest and not rest[0].dynamic and _is_assignment(rest[0].value):
            assigned.append(rest.pop(0))
    return Read(flags, operands, rest, assigned=assigned, dynamic=from_expansion)


def _long_option(
    text: str,
    words: Sequence[Word],
    at: int,
    table: Options,
    flags: dict[str, str | None],
    from_expansion: set[str],
) -> int:
    """Read ``--name``, ``--name=value`` or ``--name value``; the number of words it took."""
    written, eq, value = text.partition("=")
    name = table.long_option(written)
    if name is None:
        known = [n for n in table.long_names if n.startswith(written)]
        construct = "an ambiguous option" if known else "an option this reading does not know"
        raise Unknown(construct, written)
    if eq:
        flags[name] = value
        return 1
    if name in table.long_valued and at + 1 < len(words):
        flags[name] = words[at + 1].value
        if words[at + 1].dynamic:
            from_expansion.add(name)
        return 2
    flags[name] = None
    return 1


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
        if letter not in table.short_flags and not table.any_short:
            raise Unknown("an option this reading does not know", "-" + letter)
        flags["-" + letter] = None
    return 1


def _is_assignment(text: str) -> bool:
    """``env`` and ``sudo`` take every word holding ``=`` before the command as an assignment
    (``BASH_FUNC_ls%%=…`` too), whatever its name."""
    return "=" in text
