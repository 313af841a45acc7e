"""Words of a parsed command line, as the shell reads them: quotes removed, escapes applied, and
what cannot be known before the command runs (an expansion, a glob, a brace list, a tilde)
marked as such.

A word's value is exact up to its first unknown part; from there on it is *dynamic*, and its
value holds only the literal prefix before that part. The permission port treats what follows a
dynamic part as unknown text: a deny rule matches when some text there could complete the match,
an allow rule only when its pattern accepts any text there.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tree_sitter import Node

# Tokens the grammar reads as the operators of a test (``[[ a == b ]]``) even as the argument
# of a command, where bash reads a plain word (``echo ==`` prints ``==``).
_OPERATOR_WORDS = frozenset(["==", "=~"])
# Node types that always expand to something unknown until the command runs.
EXPANSIONS = frozenset(
    [
        "simple_expansion",
        "expansion",
        "command_substitution",
        "process_substitution",
        "arithmetic_expansion",
        "brace_expression",
    ]
)
# A brace list or sequence in the unquoted skeleton of a word: ``{a,b}``, ``{1..3}``.
_BRACE = re.compile(r"\{[^{}]*(?:,|\.\.)[^{}]*\}")
_GLOB_CHARS = frozenset("*?[")
# Quoted text in a word's skeleton: brace expansion sees quoted parts as plain characters.
_QUOTED = "\x00"
_ANSI_C_SIMPLE = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}
_HEX = "0123456789abcdefABCDEF"
_OCTAL = "01234567"


@dataclass(frozen=True)
class Word:
    """One word of a simple command.

    ``value`` is the word as the program receives it when ``kind`` is None; otherwise only its
    literal prefix, and ``kind`` names what follows it: ``expansion`` (``$X``, ``$(…)``…),
    ``glob`` (``*``, ``?``, ``[``), ``brace`` (``{a,b}``) or ``tilde`` (``~``)."""

    value: str
    source: str
    kind: str | None = None

    @property
    def dynamic(self) -> bool:
        return self.kind is not None


def literal(value: str) -> Word:
    """A word known exactly (one split out of a string the shell runs, say)."""
    return Word(value, value)


def word_of(node: Node) -> Word:
    """The word a syntax node stands for, quotes removed (``"r"m`` is ``rm``)."""
    source = _text(node)
    parts: list[str] = []
    skeleton: list[str] = []
    kind = _collect(node, parts, skeleton)
    value = "".join(parts)
    if kind is None and _BRACE.search("".join(skeleton)):
        # The shell spells a brace list out into several words: none of them is known.
        value, kind = "", "brace"
    return Word(value, source, kind)


def _collect(node: Node, parts: list[str], skeleton: list[str]) -> str | None:
    """Append ``node``'s literal text to ``parts`` (and its unquoted skeleton, for brace lists);
    the kind of its first unknown part, or None when it is all literal."""
    kind = node.type
    if kind in EXPANSIONS:
        return "expansion"
    if kind == "word":
        text, unknown = _unquoted(_text(node), first=not parts)
        parts.append(text)
        skeleton.append(text if unknown is None else "")
        return unknown
    if kind == "number" or kind in _OPERATOR_WORDS:
        parts.append(_text(node))
        skeleton.append(_text(node))
        return None
    if kind == "raw_string":
        parts.append(_text(node)[1:-1])
        skeleton.append(_QUOTED)
        return None
    if kind == "ansi_c_string":
        parts.append(ansi_c(_text(node)[2:-1]))
        skeleton.append(_QUOTED)
        return None
    if kind in ("string", "translated_string"):
        return _double_quoted(node, parts, skeleton)
    if kind == "concatenation":
        for child in node.children:
            unknown = _collect(child, parts, skeleton)
            if unknown is not None:
                return unknown
        return None
    # Anything else (an extended glob, a construct this reading does not know): unknown.
    return "expansion"


def _double_quoted(node: Node, parts: list[str], skeleton: list[str]) -> str | None:
    own = node.text or b""
    end = node.start_byte
    for child in node.children:
        if child.start_byte > end:  # text the grammar keeps in no node (``" "``: blanks only)
            gap = own[end - node.start_byte : child.start_byte - node.start_byte]
            parts.append(_double_quoted_text(gap.decode("utf-8", "replace")))
        end = child.end_byte
        if child.type == "string":  # ``$"…"`` holds a string
            return _double_quoted(child, parts, skeleton)
        if child.type == '"':
            # The grammar puts blanks before the closing quote into its token (``" "``).
            blanks = (child.text or b'"').decode("utf-8", "replace").replace('"', "", 1)
            if blanks:
                parts.append(blanks)
            continue
        if child.type == "$":  # a lone ``$`` in a string (``"$"``, ``" $"``) is itself
            if node.type != "translated_string":  # its token holds the blanks before it
                parts.append(_double_quoted_text((child.text or b"$").decode("utf-8", "replace")))
            continue
        if child.type == "string_content":
            parts.append(_double_quoted_text(_text(child)))
            continue
        return "expansion"
    skeleton.append(_QUOTED)
    return None


def _double_quoted_text(text: str) -> str:
    """Inside double quotes a backslash escapes only ``$``, backquote, ``"``, ``\\`` and a
    newline (which it removes)."""
    out, i = [], 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text) and text[i + 1] in '$`"\\\n':
            if text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


def _unquoted(text: str, *, first: bool) -> tuple[str, str | None]:
    """An unquoted word's value up to its first glob character (or a leading tilde), with
    backslash escapes applied; and ``glob``/``tilde`` when it stopped there."""
    if first and text.startswith("~"):
        return "", "tilde"
    out, i = [], 0
    while i < len(text):
        char = text[i]
        if char == "\\":
            if i + 1 < len(text) and text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
            continue
        if char in _GLOB_CHARS:
            return "".join(out), "glob"
        out.append(char)
        i += 1
    return "".join(out), None


def ansi_c(body: str) -> str:
    """The text of ``$'…'``: backslash escapes as bash reads them (``\\x72`` is ``r``)."""
    out, i = [], 0
    while i < len(body):
        char = body[i]
        if char != "\\" or i + 1 == len(body):
            out.append(char)
            i += 1
            continue
        code = body[i + 1]
        i += 2
        if code in _ANSI_C_SIMPLE:
            out.append(_ANSI_C_SIMPLE[code])
        elif code in _OCTAL:
            digits = code + _take(body, i, _OCTAL, 2)
            i += len(digits) - 1
            out.append(chr(int(digits, 8) & 0xFF))
        elif code in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[code]
            digits = _take(body, i, _HEX, width)
            i += len(digits)
            out.append(chr(min(int(digits, 16), 0x10FFFF)) if digits else "\\" + code)
        elif code == "c" and i < len(body):
            out.append(chr(ord(body[i]) & 0x1F))
            i += 1
        else:
            out.append("\\" + code)
    return "".join(out)


def _take(text: str, start: int, allowed: str, most: int) -> str:
    end = start
    while end < len(text) and end - start < most and text[end] in allowed:
        end += 1
    return text[start:end]


def _text(node: Node) -> str:
    return node_text(node)


# tree-sitter-bash (0.25.1, the latest release) reads outside its memory when a `{` is followed,
# anywhere later in the text, by a character outside the Basic Multilingual Plane (four UTF-8
# bytes: most emoji, CJK extensions B and later, mathematical letters, tags…) and the process
# dies of a segmentation fault, on Linux about one parse in two (upstream issue
# tree-sitter/tree-sitter-bash#337, open). A command line is therefore parsed with each such
# character replaced by a private-use character of the Basic Multilingual Plane, a word
# character for bash as much as the one it stands for, that the command line does not hold; the
# texts read from the tree are translated back. More distinct such characters than there are
# free private-use ones (6,400): the caller does not parse (not plain).
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_PRIVATE = range(0xE000, 0xF900)
_back = threading.local()


def bmp_only(command: str) -> tuple[str, dict[int, str]] | None:
    """``command`` with every character outside the Basic Multilingual Plane replaced by a free
    private-use one, and the table that turns them back; ``None`` when there are not enough."""
    if _ASTRAL.search(command) is None:
        return command, {}
    astral = sorted({ord(ch) for ch in _ASTRAL.findall(command)})
    taken = {ord(ch) for ch in command if 0xE000 <= ord(ch) < 0xF900}
    free = [cp for cp in _PRIVATE if cp not in taken][: len(astral)]
    if len(free) < len(astral):
        return None
    pairs = list(zip(astral, free, strict=True))
    return command.translate(dict(pairs)), {cp: chr(a) for a, cp in pairs}


@contextmanager
def texts_translated(back: dict[int, str]) -> Iterator[None]:
    """While a tree parsed from ``bmp_only``'s text is read, ``node_text`` turns its stand-ins
    back (nested parses of strings found in it keep their own tables)."""
    outer = getattr(_back, "table", None)
    _back.table = back
    try:
        yield
    finally:
        _back.table = outer


def node_text(node: Node) -> str:
    """The text of ``node`` as the command line holds it."""
    if node.text is None:
        return ""
    text = node.text.decode("utf-8", "replace")
    table = getattr(_back, "table", None)
    return text.translate(table) if table else text


def escaped(source: bytes, at: int) -> bool:
    """Whether the backslash at ``at`` is itself escaped (an odd run of backslashes before)."""
    run = 0
    while at - run - 1 >= 0 and source[at - run - 1] == 0x5C:
        run += 1
    return run % 2 == 1
