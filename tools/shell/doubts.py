"""Where a command line's reading is in doubt: places the grammar and bash read apart, and places
bash reads as data that can run code. Each makes the line not plain (``parse.py``): no rule
allows it, and it is denied while a deny rule of the tool applies.

Three families, each closed as a class rather than by the forms that showed it:

- **Characters.** bash separates words only at space, tab and newline; the grammar also at
  carriage return, form feed, vertical tab and Unicode spaces, so ``echo x<CR>#; rm -rf v`` is a
  comment to the grammar and ``rm`` to bash. Any control character other than tab and newline,
  and any other character Python calls a space, puts the reading in doubt.
- **Tokens.** A ``$'…'`` string is re-read by bash's own rule (a backslash takes the next
  character, a quote ends it); where that ends elsewhere than the grammar's token, the grammar
  has read the line apart (``echo $'a\\\\'; rm -rf v #'``). A ``!`` is negation to bash only as
  a word of its own; the grammar also reads it so when a word follows it unspaced (``!''``).
- **Code in data.** bash evaluates arithmetic recursively: a variable's *value* is read as an
  expression, and an array subscript in it runs command substitutions
  (``x='a[$(rm -rf v)]'; echo $((x))``). Every arithmetic context that reads anything but
  literal numbers is in doubt: ``$((…))``, ``((…))``, ``for ((…))``, the arithmetic tests of
  ``[[ ]]``, subscripts, substring offsets, ``let``, integer declarations; so is every builtin
  that takes a variable's *name* when the name has a subscript (``read``, ``printf -v``,
  ``mapfile``, ``unset``, ``test -v``…), a name reference, an indirect expansion, prompt
  expansion (``${x@P}``) and a ``mapfile`` callback. Variables that change what a shell runs
  (``PS4``, ``BASH_FUNC_…``, ``BASH_CMDS``…) are in ``runners.RUN_CHANGING_VARIABLES``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tree_sitter import Node

from .words import Word, escaped, node_text

Doubt = tuple[str, str]  # (the construct, the text that shows it)

# Whitespace bash does not split words at: every C0 control but tab and newline, DEL, and the
# Unicode spaces (no-break, en, em…, the line and paragraph separators, BOM).
_DOUBTFUL_CHARACTER = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f\x85\xa0\u1680\u2000-\u200b\u2028\u2029\u202f\u205f\u3000\ufeff]"
)
_ARITHMETIC_TESTS = frozenset(["-eq", "-ne", "-lt", "-le", "-gt", "-ge"])
# Named nodes an arithmetic expression may hold and still read only literal numbers.
_LITERAL_ARITHMETIC = frozenset(
    [
        "number",
        "binary_expression",
        "unary_expression",
        "parenthesized_expression",
        "ternary_expression",
    ]
)
_BLANKS = b" \t\n"
_BLANK = re.compile(rb"[ \t\n]")
# Nodes whose own text between their children is theirs (a string's text around its expansions).
_HOLDS_ITS_TEXT = frozenset(["heredoc_body", "string", "translated_string", "comment"])
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LITERAL_INDEX = re.compile(r"-?[0-9]+|[@*]")


def character_doubt(command: str) -> Doubt | None:
    """A character the grammar may read as a word separator where bash does not."""
    found = _DOUBTFUL_CHARACTER.search(command)
    if found is None:
        return None
    return ("a character the shell reads apart from this reading", f"U+{ord(found.group()):04X}")


def tree_doubt(root: Node, source: bytes) -> Doubt | None:
    """The first construct of the tree of ``source`` whose reading is in doubt (a cursor walk,
    no recursion)."""
    unread = _unread_text(root, source)
    if unread is not None:
        return unread
    cursor = root.walk()
    while True:
        doubt = _node_doubt(cursor.node, source)
        if doubt is not None:
            return doubt
        if cursor.goto_first_child():
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return None


def _unread_text(root: Node, source: bytes) -> Doubt | None:
    """Text the grammar keeps in no token: only blanks may lie between tokens. The grammar skips
    a backslash and a blank as a blank, and drops some words after a here-string (``<<<a {``…);
    bash reads them (``\\ rm`` runs `` rm``). Strings, here-document bodies and comments hold
    their own text between their children."""
    at = 0
    cursor = root.walk()
    while True:
        node = cursor.node
        if node.child_count == 0 or node.type in _HOLDS_ITS_TEXT:
            gap = source[at : node.start_byte]
            if gap.strip(_BLANKS):
                return ("text the grammar does not read", _shown(gap))
            at = max(at, node.end_byte)
        elif cursor.goto_first_child():
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                rest = source[at:]
                return (
                    ("text the grammar does not read", _shown(rest))
                    if rest.strip(_BLANKS)
                    else None
                )


def _shown(text: bytes) -> str:
    return text.strip(_BLANKS)[:40].decode("utf-8", "replace")


def _node_doubt(node: Node, source: bytes) -> Doubt | None:
    kind = node.type
    if kind == "ansi_c_string" and _ansi_c_end(_text(node)) != len(_text(node)):
        return ("a $'…' string the grammar reads apart from bash", _text(node))
    if (
        kind == "arithmetic_expansion"
        or kind == "c_style_for_statement"
        or (kind == "compound_statement" and node.child_count and node.children[0].type == "((")
    ):
        if not _literal_arithmetic(node):
            return ("arithmetic that reads a variable", _text(node))
    elif kind == "test_command":
        return _test_doubt(node)
    elif kind == "expansion":
        return _expansion_doubt(node)
    elif kind == "subscript":
        index = node.child_by_field_name("index")
        if index is None or not _LITERAL_INDEX.fullmatch(_text(index)):
            return ("a subscript read as arithmetic", _text(node))
    elif kind == "array":
        for child in node.children:
            text = _text(child)
            if text.startswith("[") and not re.match(r"\[(-?[0-9]+)\]=", text):
                return ("an array index read as arithmetic", text)
    elif kind == "declaration_command":
        return _declaration_doubt(node)
    elif kind == "command":
        return _command_doubt(node)
    elif kind == "variable_assignment":
        return _assignment_doubt(node)
    elif kind == "word" and _unescaped_blank(node.text or b""):
        # An unquoted word ends at a blank: ``x<newline>\\a`` is two commands to bash, and
        # ``<<<{ {`` a here-string and a command.
        return ("a word the grammar reads across a blank", _text(node))
    elif kind in ("compound_statement", "negated_command"):
        return _reserved_word_doubt(node, source)
    return None


def _assignment_doubt(node: Node) -> Doubt | None:
    """``*x=`` and ``1a=2`` are no assignments to bash (the name is no identifier): it runs
    them as commands."""
    name = node.child_by_field_name("name")
    if name is not None and name.type == "subscript":
        name = name.child_by_field_name("name")
    if name is None or not _IDENTIFIER.fullmatch(_text(name)):
        return ("an assignment bash reads as a command", _text(node))
    return None


def _reserved_word_doubt(node: Node, source: bytes) -> Doubt | None:
    """``{`` and ``!`` are reserved words only as words of their own: ``{}`` runs a program
    named ``{}``, ``!''`` one named ``!``."""
    if not node.child_count:
        return None
    first = node.children[0]
    if first.type not in ("{", "!"):
        return None
    after = source[first.end_byte : first.end_byte + 1]
    if after in (b" ", b"\t", b"\n"):
        return None
    return (f"a {first.type} joined to the word after it", _text(node))


def _unescaped_blank(word: bytes) -> bool:
    return any(not escaped(word, found.start()) for found in _BLANK.finditer(word))


def _command_doubt(node: Node) -> Doubt | None:
    """Words of one command are parted by blanks: the grammar parts ``}\\a`` in two, where bash
    reads one word."""
    children = node.children
    for before, child in zip(children, children[1:], strict=False):
        joined = before.end_byte == child.start_byte
        if joined and not _redirect(before) and not _redirect(child):
            return ("words the grammar parts where bash does not", _text(node))
    return None


def _redirect(node: Node) -> bool:
    return node.type.endswith("_redirect")


def _ansi_c_end(text: str) -> int:
    """Where bash ends the ``$'…'`` string that ``text`` starts (its length when unended)."""
    i = 2
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == "'":
            return i + 1
        i += 1
    return len(text) + 1


def _literal_arithmetic(node: Node) -> bool:
    """Whether the arithmetic under ``node`` holds only literal numbers and operators."""
    stack = [c for c in node.children if c.is_named]
    while stack:
        child = stack.pop()
        if child.type not in _LITERAL_ARITHMETIC:
            return False
        stack.extend(c for c in child.children if c.is_named)
    return True


def _test_doubt(node: Node) -> Doubt | None:
    """``[[ a -eq b ]]`` reads both sides as arithmetic; ``[[ -v a[i] ]]`` a subscript."""
    stack = [node]
    while stack:
        current = stack.pop()
        operators = [c for c in current.children if c.type == "test_operator"]
        for operator in operators:
            operands = [c for c in current.children if c.is_named and c.type != "test_operator"]
            if _text(operator) in _ARITHMETIC_TESTS and any(c.type != "number" for c in operands):
                return ("an arithmetic test on a variable", _text(current))
            if _text(operator) == "-v" and any("[" in _text(c) for c in operands):
                return ("a variable test on a subscript", _text(current))
        stack.extend(c for c in current.children if c.is_named)
    return None


def _expansion_doubt(node: Node) -> Doubt | None:
    tokens = [c for c in node.children if not c.is_named]
    kinds = [c.type for c in tokens]
    if "!" in kinds:
        return ("an indirect expansion", _text(node))
    if "@" in kinds:
        after = kinds[kinds.index("@") + 1 :]
        if after[:1] == ["P"]:
            return ("a prompt expansion", _text(node))
    children = node.children
    for at, child in enumerate(children):
        if child.type == ":" and at + 1 < len(children):
            offset = children[at + 1]
            if offset.type != "number":
                return ("a substring offset read as arithmetic", _text(node))
    return None


def _declaration_doubt(node: Node) -> Doubt | None:
    """``declare -i x=y`` evaluates ``y``; ``declare -n r=x`` makes ``r`` name whatever ``x``
    names; a name with a subscript evaluates it."""
    typed = _text(node.children[0]) in ("declare", "typeset", "local") if node.children else False
    for child in node.children[1:]:
        text = _text(child)
        if typed and child.type == "word" and text[:1] in "-+" and set(text[1:]) & {"i", "n"}:
            return ("an integer or reference declaration", _text(node))
        name = text.split("=", 1)[0]
        if child.type in ("word", "raw_string", "string", "concatenation") and "[" in name:
            return ("a variable name with a subscript", text)
    return None


# --- builtins that take a variable's name ----------------------------------------------------
# Options that take a value, per builtin; the names it assigns are its operands (and, for some,
# an option's value). A name with a subscript, or one from an expansion, is in doubt.
_NAME_TAKERS: dict[str, tuple[str, str]] = {
    # builtin: (short options with a value, options whose value is a name)
    "read": ("adinNptu", "a"),
    "mapfile": ("dnOsuCc", ""),
    "readarray": ("dnOsuCc", ""),
    "printf": ("v", "v"),
    "unset": ("", ""),
    "wait": ("p", "p"),
    "getopts": ("", ""),
}


def command_doubt(words: Sequence[Word]) -> Doubt | None:
    """A simple command whose arguments bash reads as code: ``let``, ``mapfile -C``, a name
    with a subscript given to a builtin that assigns it, ``test -v`` on one."""
    if not words or words[0].dynamic:
        return None
    program = words[0].value
    arguments = list(words[1:])
    shown = " ".join(w.source for w in words)
    if program == "let":
        return ("arithmetic that reads a variable", shown)
    if program in ("test", "["):
        for at, word in enumerate(arguments[:-1]):
            if word.value == "-v" and ("[" in arguments[at + 1].value or arguments[at + 1].dynamic):
                return ("a variable test on a subscript", shown)
        return None
    if program not in _NAME_TAKERS:
        return None
    valued, name_options = _NAME_TAKERS[program]
    names: list[Word] = []
    operands: list[Word] = []
    at = 0
    while at < len(arguments):
        word = arguments[at]
        if word.dynamic and not operands:
            return ("a variable name from an expansion", shown)
        text = word.value
        if text == "--" and not operands:
            operands.extend(arguments[at + 1 :])
            break
        if text.startswith("-") and len(text) > 1 and not operands:
            for pos, letter in enumerate(text[1:], start=1):
                if letter == "C" and program in ("mapfile", "readarray"):
                    return ("a callback run by mapfile", shown)
                if letter in valued:
                    attached = text[pos + 1 :]
                    value = Word(attached, attached) if attached else None
                    if value is None and at + 1 < len(arguments):
                        at += 1
                        value = arguments[at]
                    if value is not None and letter in name_options:
                        names.append(value)
                    break
            at += 1
            continue
        operands.append(word)
        at += 1
    if program in ("read", "mapfile", "readarray", "unset"):
        names.extend(operands)
    elif program == "getopts":
        names.extend(operands[1:2])
    for name in names:
        if name.dynamic or "[" in name.value:
            return ("a variable name with a subscript", shown)
    return None


def _text(node: Node) -> str:
    return node_text(node)
