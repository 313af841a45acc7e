"""A command line parsed with tree-sitter's bash grammar into the simple commands it runs.

Every command of every list, pipeline, subshell, group, loop, ``if``/``case`` body, command
substitution, process substitution and here-document is collected, with its words as the shell
reads them (quotes removed, line continuations joined) and its redirections set aside, wherever
they stand (``>out rm x`` is ``rm x``). A runner (``env``, ``timeout``, ``xargs``, ``sh -c``…,
see ``runners.py``) is unwrapped: the command it runs is a simple command of its own, and a
string a shell runs is parsed in turn, to any depth.

The result also says whether the command line is **plain**: every command word, after
unwrapping, a literal word, and nothing in the line read in doubt. It is not plain when a command
word comes from an expansion, a glob names the command, it uses ``eval``, ``source``/``.`` or
``alias``, defines a function, runs a script file through a shell, runs a program that runs
commands in a way the runner table does not read, the parser reports an error, or the grammar
and bash may read it apart or bash reads code where it looks like data (``doubts.py``);
``unplain`` then names the construct. Rules can be checked against a plain command line only.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import lru_cache

import tree_sitter_bash
from tree_sitter import Language, Node, Parser, Tree

from projections.units import cut_text

from . import doubts, runners
from .words import Word, bmp_only, escaped, literal, node_text, texts_translated, word_of

BASH = Language(tree_sitter_bash.language())
# A command line longer than this is not parsed (a parse costs ~0.35 s per MiB): not plain.
MAX_PARSED_BYTES = 64 * 1024
# Line continuations joined one at a time, each with a new parse; more than this: not plain.
MAX_CONTINUATIONS = 64
# Bytes the grammar may read for one command line, each parse counted whole: the re-parses that
# join its line continuations and the strings its shells run included (a 64 KiB line joined 64
# times is 4 MiB of parsing, about 1.4 s). More is not plain, and is not read on.
MAX_PARSE_WORK_BYTES = 512 * 1024
# Strings run by shells inside strings run by shells…: deeper than this is not plain.
MAX_DEPTH = 16
# Levels of the syntax tree (a subshell or a substitution is two or three): a tree deeper than
# this is not plain, and is never walked (the walk recurses once or twice a level).
MAX_TREE_DEPTH = 120
# How much of a construct a reason quotes (UTF-8 bytes, "…" included).
CONSTRUCT_QUOTE_BYTES = 80
# Where a backslash before a newline is kept as it is: not a line continuation there.
_VERBATIM = frozenset(["raw_string", "ansi_c_string", "comment"])
_WRITE_OPERATORS = frozenset([">", ">>", ">|", "&>", "&>>", "<>", ">&", "&>|"])
_NOT_WRITTEN = frozenset(["/dev/null", "/dev/stdout", "/dev/stderr", "-"])
_local = threading.local()


@dataclass(frozen=True)
class SimpleCommand:
    """One command the line runs, as its words. ``text`` is the words joined by one space, up
    to the first unknown part; ``open`` says more text follows there that cannot be known (an
    expansion in an argument, the arguments ``xargs`` reads)."""

    words: tuple[Word, ...]

    @property
    def program(self) -> str:
        return self.words[0].value if self.words else ""

    @property
    def open(self) -> bool:
        return any(word.dynamic for word in self.words)

    @property
    def text(self) -> str:
        """The words joined by one space up to the first unknown part: its literal prefix
        when it has one (``--file=`` of ``--file=$F``), else nothing, not even the space (an
        unquoted ``$X`` may expand to no word at all)."""
        parts = []
        for word in self.words:
            if word.dynamic:
                if word.value:
                    parts.append(word.value)
                break
            parts.append(word.value)
        return " ".join(parts)

    @property
    def spellings(self) -> tuple[str, ...]:
        """``text``, and the same with the program named without its folder (``/bin/rm`` is
        ``rm``): a deny rule is tried on both."""
        program = self.program
        if "/" not in program or self.words[0].dynamic:
            return (self.text,)
        bare = program.rsplit("/", 1)[-1]
        return (self.text, self.text.replace(program, bare, 1))


@dataclass(frozen=True)
class CommandLine:
    """A parsed command line: its simple commands, runners' commands included as commands of
    their own; ``unplain`` names the construct that makes it not plain (None when plain);
    ``writes`` quotes a redirection that writes to a file (None when there is none)."""

    commands: tuple[SimpleCommand, ...]
    unplain: str | None = None
    writes: str | None = None

    @property
    def plain(self) -> bool:
        return self.unplain is None


@dataclass
class _Collector:
    depth: int
    commands: list[SimpleCommand] = field(default_factory=list)
    unplain: str | None = None
    writes: str | None = None

    def not_plain(self, construct: str, shown: str) -> None:
        if self.unplain is None:
            quoted = cut_text(" ".join(shown.split()), CONSTRUCT_QUOTE_BYTES)
            self.unplain = f"{construct}: {quoted}" if quoted else construct

    def merge(self, other: CommandLine) -> None:
        self.commands.extend(other.commands)
        if other.unplain is not None and self.unplain is None:
            self.unplain = other.unplain
        if other.writes is not None and self.writes is None:
            self.writes = other.writes


@dataclass
class ParseWork:
    """Bytes the grammar has read since ``parse_work()`` began, each parse counted whole
    (a line parsed again to join a continuation, a string a shell runs)."""

    bytes: int = 0


_meters: ContextVar[tuple[ParseWork, ...]] = ContextVar("parse_meters", default=())
_line: ContextVar[ParseWork | None] = ContextVar("parse_line", default=None)


class _TooMuchWork(Exception):
    pass


@contextmanager
def parse_work() -> Iterator[ParseWork]:
    """Count the bytes the grammar reads in this context (this thread) while it lasts: a
    line answered from the cache costs nothing."""
    work = ParseWork()
    token = _meters.set((*_meters.get(), work))
    try:
        yield work
    finally:
        _meters.reset(token)


@lru_cache(maxsize=256)
def parse_command(command: str) -> CommandLine:
    """The simple commands of ``command``, and whether it is plain."""
    line = ParseWork()
    token = _line.set(line)
    try:
        return _parse(command, depth=0)
    except _TooMuchWork:
        collector = _Collector(depth=0)
        collector.not_plain(
            f"a command line that takes over {MAX_PARSE_WORK_BYTES:,} bytes to read", ""
        )
        return _result(collector)
    except RecursionError:
        # Each tree is bounded (MAX_TREE_DEPTH), but strings run by shells nest trees in
        # trees: a line that still runs the walk out of stack is not plain, never a 500.
        collector = _Collector(depth=0)
        collector.not_plain("commands nested too deep to read", "")
        return _result(collector)
    finally:
        _line.reset(token)


def _read(parser: Parser, source: bytes) -> Tree:
    """One parse, counted (``parse_work``); over the line's budget, the line is not read on."""
    line = _line.get()
    if line is not None:
        line.bytes += len(source)
        if line.bytes > MAX_PARSE_WORK_BYTES:
            raise _TooMuchWork
    for meter in _meters.get():
        meter.bytes += len(source)
    return parser.parse(source)


def _parse(command: str, *, depth: int) -> CommandLine:
    collector = _Collector(depth=depth)
    if depth > MAX_DEPTH:
        collector.not_plain(f"commands nested more than {MAX_DEPTH} deep", "")
        return _result(collector)
    if len(command.encode("utf-8", "surrogatepass")) > MAX_PARSED_BYTES:
        collector.not_plain(f"a command line over {MAX_PARSED_BYTES:,} bytes", "")
        return _result(collector)
    parsed = bmp_only(command)
    if parsed is None:
        collector.not_plain("too many distinct characters outside the Basic Multilingual Plane", "")
        return _result(collector)
    text, back = parsed
    character = doubts.character_doubt(command)
    if character is not None:
        collector.not_plain(*character)
    tree, source = _joined(text, collector)
    if tree is not None and _deeper_than(tree.root_node, MAX_TREE_DEPTH):
        collector.not_plain(f"commands nested more than {MAX_TREE_DEPTH} levels deep", "")
    elif tree is not None:
        with texts_translated(back):
            if tree.root_node.has_error:
                collector.not_plain("a syntax error", _first_error(tree.root_node))
            doubt = doubts.tree_doubt(tree.root_node, source)
            if doubt is not None:
                collector.not_plain(*doubt)
            _walk(tree.root_node, collector)
    return _result(collector)


def _deeper_than(root: Node, limit: int) -> bool:
    """Whether the tree has a node more than ``limit`` levels below ``root`` (a cursor walk,
    without recursion)."""
    cursor = root.walk()
    depth = 0
    while True:
        if cursor.goto_first_child():
            depth += 1
            if depth > limit:
                return True
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return False
            depth -= 1


def _result(collector: _Collector) -> CommandLine:
    return CommandLine(tuple(collector.commands), collector.unplain, collector.writes)


def _parser() -> Parser:
    parser = getattr(_local, "parser", None)
    if parser is None:
        parser = _local.parser = Parser(BASH)
    return parser


def _joined(command: str, collector: _Collector) -> tuple[Tree | None, bytes]:
    """The parse of ``command`` with its line continuations joined, as the shell joins them
    before it reads words (``r\\<newline>m`` is ``rm``), except where a backslash is verbatim:
    in single quotes, ``$'…'``, a comment, a quoted here-document. One at a time, each with a
    new parse, since joining one may change where the next one stands."""
    source = command.encode("utf-8", "surrogatepass")
    parser = _parser()
    tree = _read(parser, source)
    for _ in range(MAX_CONTINUATIONS + 1):
        at = _first_continuation(tree.root_node, source)
        if at is None:
            return tree, source
        source = source[:at] + source[at + 2 :]
        tree = _read(parser, source)
    collector.not_plain(f"more than {MAX_CONTINUATIONS} line continuations", "")
    return None, source


def _first_error(root: Node) -> str:
    """The text around the first place the parser could not read."""
    stack = [root]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            return _text(node) or _text(node.parent)
        stack.extend(reversed([c for c in node.children if c.has_error or c.is_missing]))
    return ""


def _first_continuation(root: Node, source: bytes) -> int | None:
    """The offset of the first backslash-newline that continues a line."""
    start = 0
    while True:
        at = source.find(b"\\\n", start)
        if at < 0:
            return None
        start = at + 1
        if escaped(source, at) or _verbatim_at(root, at):
            continue
        return at


def _verbatim_at(root: Node, at: int) -> bool:
    node = root.descendant_for_byte_range(at, at + 1)
    while node is not None:
        if node.type in _VERBATIM:
            return True
        if node.type == "heredoc_body" and _quoted_heredoc(node):
            return True
        node = node.parent
    return False


def _quoted_heredoc(body: Node) -> bool:
    redirect = body.parent
    if redirect is None:
        return False
    for child in redirect.children:
        if child.type == "heredoc_start":
            return any(ch in _text(child) for ch in "'\"\\")
    return False


# --- the walk -----------------------------------------------------------------------------


def _walk(node: Node, out: _Collector) -> None:
    kind = node.type
    if kind == "command":
        _simple(node, [], out)
        return
    if kind == "redirected_statement":
        _redirected(node, out)
        return
    if kind == "function_definition":
        name = node.child_by_field_name("name")
        out.not_plain("a function definition", _text(name) if name is not None else "")
    elif kind == "variable_assignment":
        name = node.child_by_field_name("name")
        if name is not None and runners.changes_what_runs(_text(name)):
            out.not_plain("an assignment that changes what runs", _text(node))
        elif name is not None and runners.runs_its_value(_text(name)):
            _hook(node, out)
    elif kind in ("declaration_command", "unset_command"):
        words = [literal(_text(node.children[0]))] + [
            word_of(child) for child in node.children[1:] if child.is_named
        ]
        out.commands.append(SimpleCommand(tuple(words)))
    for child in node.children:
        _walk(child, out)


def _hook(assignment: Node, out: _Collector) -> None:
    """``GIT_PAGER='less -R'``: a program runs the value as a command, so it is parsed as one."""
    value = assignment.child_by_field_name("value")
    if value is None:
        return
    word = word_of(value)
    if word.dynamic:
        out.not_plain("a command string from an expansion", _text(assignment))
    else:
        out.merge(_parse(word.value, depth=out.depth + 1))


def _redirected(node: Node, out: _Collector) -> None:
    """A statement with redirections after it: words the grammar hangs on a redirection
    (``rm >out -rf x``) are the command's arguments; a here-document or here-string is what a
    shell reading its input runs."""
    body = node.child_by_field_name("body")
    redirects = [c for c in node.children if c.type.endswith("_redirect")]
    if body is None or body.type == "command":
        # No body: the grammar hangs the words of a command that two redirections precede on
        # the redirections, as destinations after the first (``>a >b rm x >c y``: ``>b rm x``
        # and ``>c y``); bash reads them, in order, as the command (``rm x y``).
        _simple(body, redirects, out)
    else:
        for redirect in redirects:
            extra, _ = _redirect(redirect, out)
            if extra:
                out.not_plain("a syntax error", _text(redirect))
        _walk(body, out)
    for redirect in redirects:
        _walk_inside(redirect, out)


def _simple(node: Node | None, trailing: list[Node], out: _Collector) -> None:
    """One ``command`` node (with redirections that follow it in a ``redirected_statement``),
    or, with ``node`` None, the command whose words the redirections alone hold."""
    words: list[Word] = []
    stdin: str | None = None
    children = node.children if node is not None else []
    for index, child in enumerate(children):
        if child.is_missing:  # a word the grammar expected and did not find: a syntax error
            continue
        if node.field_name_for_child(index) in ("name", "argument"):
            words.append(word_of(child.children[0] if child.type == "command_name" else child))
        elif child.type.endswith("_redirect"):
            extra, text = _redirect(child, out)
            words.extend(extra)
            stdin = text if text is not None else stdin
    for redirect in trailing:
        extra, text = _redirect(redirect, out)
        words.extend(extra)
        stdin = text if text is not None else stdin
    _add(words, stdin, out)
    for child in children:
        if child.type == "variable_assignment":
            _walk(child, out)
        elif child.is_named:  # the name, arguments, redirections: substitutions in them
            _walk_inside(child, out)


def _walk_inside(node: Node, out: _Collector) -> None:
    """Commands inside a word or a redirection: substitutions, here-document expansions."""
    for child in node.children:
        _walk(child, out)


def _redirect(node: Node, out: _Collector) -> tuple[list[Word], str | None]:
    """Of one redirection: the words that are really the command's arguments, and the text it
    feeds to standard input (a here-document's body, a here-string's word)."""
    kind = node.type
    if kind == "file_redirect":
        destinations = node.children_by_field_name("destination")
        operator = next((c.type for c in node.children if not c.is_named), "")
        if destinations and operator in _WRITE_OPERATORS and out.writes is None:
            target = word_of(destinations[0])
            to_descriptor = operator.endswith("&") and target.value.isdigit() and not target.dynamic
            if (target.dynamic or target.value not in _NOT_WRITTEN) and not to_descriptor:
                shown = f"{operator} {_text(destinations[0])}"
                out.writes = cut_text(shown, CONSTRUCT_QUOTE_BYTES)
        return [word_of(d) for d in destinations[1:]], None
    if kind == "heredoc_redirect":
        arguments = [word_of(c) for c in node.children_by_field_name("argument")]
        body = next((c for c in node.children if c.type == "heredoc_body"), None)
        return arguments, _text(body) if body is not None else ""
    if kind == "herestring_redirect":
        content = next((c for c in node.children if c.is_named), None)
        if content is None:
            return [], ""
        word = word_of(content)
        return [], None if word.dynamic else word.value
    return [], None


def _add(words: list[Word], stdin: str | None, out: _Collector) -> None:
    """Add a simple command and, through runners, every command it runs."""
    while words:
        out.commands.append(SimpleCommand(tuple(words)))
        doubt = doubts.command_doubt(words)
        if doubt is not None:
            out.not_plain(*doubt)
        head = words[0]
        if head.dynamic:
            construct = {
                "glob": "a glob naming the command",
                "brace": "a brace list naming the command",
            }.get(head.kind or "", "a command word from an expansion")
            out.not_plain(construct, head.source)
            return
        program = head.value.rsplit("/", 1)[-1] if "/" in head.value else head.value
        if program in runners.UNCHECKABLE:
            shown = " ".join(w.source for w in words)
            out.not_plain(runners.UNCHECKABLE[program], shown)
            if program == "eval" and all(not w.dynamic for w in words[1:]):
                out.merge(_parse(" ".join(w.value for w in words[1:]), depth=out.depth + 1))
            return
        if not runners.is_runner(program):
            return
        unwrapped = runners.unwrap(program, words[1:], stdin=stdin)
        if unwrapped.unplain is not None:
            out.not_plain(*unwrapped.unplain)
        for script in unwrapped.scripts:
            out.merge(_parse(script, depth=out.depth + 1))
        if not unwrapped.commands:
            return
        for extra in unwrapped.commands[1:]:
            _add(list(extra), None, out)
        words, stdin = list(unwrapped.commands[0]), stdin


def _text(node: Node | None) -> str:
    return "" if node is None else node_text(node)
