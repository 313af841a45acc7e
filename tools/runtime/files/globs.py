"""File name patterns of ``find`` (its ``pattern``) and ``grep`` (its ``glob``).

The shell's rules, as ripgrep and ``.gitignore`` use them:

* A pattern without ``/`` matches the entry's **name** anywhere in the tree (``*.py``,
  ``test_*``), like ``find -name``.
* A pattern with ``/`` matches the entry's **path relative to the searched directory**
  (``src/*.py``, ``docs/**/*.md``); a leading ``/`` or ``./`` anchors it there too.
* ``*`` and ``?`` never match ``/``; ``**`` matches across directories, and ``**/`` also
  matches no directory at all (``**/*.py`` matches ``a.py``); ``[abc]``, ``[!abc]`` are classes;
  ``{a,b}`` lists alternatives (``*.{ts,tsx}``), at most ``MAX_ALTERNATIVES`` of them.
* Case-sensitive, as file systems here are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_ALTERNATIVES = 64


def _braces(pattern: str) -> list[str]:
    """The alternatives of the first ``{a,b}`` group, expanded recursively (bounded)."""
    start = pattern.find("{")
    while start != -1:
        depth, parts, mark = 0, [], start + 1
        for i in range(start, len(pattern)):
            c = pattern[i]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    parts.append(pattern[mark:i])
                    head, tail = pattern[:start], pattern[i + 1 :]
                    out: list[str] = []
                    for part in parts:
                        for expanded in _braces(head + part + tail):
                            if len(out) == MAX_ALTERNATIVES:
                                return out
                            out.append(expanded)
                    return out
            elif c == "," and depth == 1:
                parts.append(pattern[mark:i])
                mark = i + 1
        start = pattern.find("{", start + 1)  # unbalanced: a literal brace
    return [pattern]


def _translate(pattern: str) -> str:
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**/", i):
                out.append("(?:.*/)?")
                i += 3
                continue
            if pattern.startswith("**", i):
                out.append(".*")
                i += 2
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("!", "]") else i + 1)
            if end == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : end]
                negate = body.startswith("!")
                body = body[1:] if negate else body
                body = body.replace("\\", "\\\\").replace("^", "\\^")
                out.append(f"[{'^/' if negate else ''}{body}]")
                i = end + 1
                continue
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


@dataclass(frozen=True)
class NamePattern:
    """A compiled pattern; ``matches(relative, name)`` for one entry of a walk."""

    text: str
    by_path: bool
    regex: re.Pattern[str]

    @classmethod
    def compile(cls, text: str) -> NamePattern:
        pattern = text.removeprefix("./").lstrip("/") if "/" in text else text
        by_path = "/" in text
        alternatives = _braces(pattern)
        try:
            regex = re.compile("|".join(f"(?:{_translate(a)})" for a in alternatives), re.DOTALL)
        except re.error:  # a class the translation cannot express: match it literally
            regex = re.compile(re.escape(pattern), re.DOTALL)
        return cls(text, by_path, regex)

    def matches(self, relative: str, name: str) -> bool:
        return self.regex.fullmatch(relative if self.by_path else name) is not None
