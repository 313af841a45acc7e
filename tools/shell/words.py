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
from dataclasses import dataclass

from tree_sitter import Node

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
    if kind == "number":
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
    for child in node.children:
        if child.type == "string":  # ``$"…"`` holds a string
            return _double_quoted(child, parts, skeleton)
        if child.type in ('"', "$"):
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
    return node.text.decode("utf-8", "replace") if node.text is not None else ""
