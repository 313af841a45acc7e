"""Every reference to the code in the docs resolves: no page names a file, a function or a class
that is not where it says (docs/architecture.md, "Citing the code", is the writers' version).

Read: every ``.md`` file under ``docs/`` and ``README.md``, outside fenced code blocks. A
reference is an inline code span; the grammar below says which spans are references and how
each is resolved. Anything else in backticks is prose and is not checked.

**Paths.** A span is a path when it is a file name ending in ``.py``, ``.js``, ``.html``,
``.css``, ``.sh``, ``.toml``, ``.yaml`` or ``.yml``, or a relative path with a ``/`` whose last
part has a suffix or which ends with ``/`` (a folder). Globs (``sql/*.py``) and braces
(``services/{calls,turns}.py``) must match at least one file each. A path is looked up:

- from the repository's root, when its first part is a folder there (``tools/runtime/bash.py``);
- else in the folders of the paths cited before it in the same paragraph, list item or table
  row, the latest first (after ``conversations/admin/``, ``calls.py`` is
  ``conversations/admin/calls.py``); then in ``conversations/``, by the convention "module
  paths without an app name are in ``conversations/``" (``services/settlement.py``); then at
  the root;
- a bare file name found nowhere of those is looked for anywhere in the repository.

A path found nowhere is broken. Not the repository's, so not checked: a relative path whose
first folder is in none of those places (the example ``src/app.py``, the ``DATA_DIR`` folder
``g1/``), a bare ``.md`` name (pages are cited by links; ``notes.md`` is an example file), and a
path ``.gitignore`` ignores (``bench/.fragments/``).

**Names.** A name is an identifier, dotted for a class's member (``Watchers.kill``), with or
without a call's parentheses (``activity_fold(tracked=True)``). In a Python module it must be
defined at the top level: a function, a class, an assignment (an import does not count: the name
lives elsewhere); ``Class.member`` a method or attribute of that class or of one of its project
bases. In a JavaScript file: ``function name``, ``const|let|var name``, a method ``name(`` at a
line's start or ``name: function``. Names after another kind of file (a template, a stylesheet,
TOML) or a folder are not looked up. A name is cited with its module as:

- ``path.py:name``; ``tests/...py::test_name`` (a pytest node, ``Class::method`` too);
- a path, then names separated only by commas, spaces, ``and`` or parentheses:
  ```services/calls.py` `model_call_id`, `command_call_id``` or
  ```services/runners.py` (`announce`, `listen`)```. Any other word or mark (``;``, ``→``,
  "called by") ends the list, and so does a ``)`` that is not a name's detail's; a new path
  starts a new list. Parentheses right after a name hold its detail, not names:
  ```services/activity.py` `activity_create` (`after_sequence`)```;
- a name, ``in``, its path: ```LOGGING` in `config/settings.py```;
- a dotted name whose head is a module of an app (``tools.runtime.handlers.register()``) or of
  ``conversations/`` (``models.EVENT_TYPES``, ``bodies.strict_loads``), or a path written
  so (``services/exits.command_exit_record``). A dotted name whose head is only an app
  (``tools.run_commands``, a permission) or no module (``tool_call.changed``) is prose;
- ``Class.member`` alone, when the class is one of the apps' classes (``Watchers.kill``);
- in a table whose first column is headed ``function``, each row's first name, which must be
  defined in one of the modules cited by the page's ``Code:`` paragraph or by the text between
  the heading above the table and the table (a folder there stands for its modules).

**Links.** The file of a relative Markdown link exists (anchors are not checked).
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]

APPS = ("config", "conversations", "tools", "projections")
CONVENTION = ROOT / "conversations"  # where a module path without an app name is
BARE_SUFFIXES = (".py", ".js", ".html", ".css", ".sh", ".toml", ".yaml", ".yml")
# What the last part of `folder/x.y` may end with and still be a file, not the module `x`'s `y`.
FILE_SUFFIXES = frozenset(
    {"py", "js", "html", "css", "sh", "toml", "yaml", "yml", "md", "json", "txt", "conf"}
    | {"example", "timer", "service", "png", "svg", "ico", "sqlite3", "cfg", "ini", "lock"}
)
NOT_WALKED = frozenset({".git", "__pycache__", "node_modules", ".venv"})

IDENTIFIER = r"[A-Za-z_]\w*"
NAME = re.compile(rf"({IDENTIFIER}(?:\.{IDENTIFIER})*)(?:\(.*\))?")
SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
PATH_CHARACTERS = re.compile(r"[\w.*{},\-/]+")
LIST_SEPARATOR = re.compile(r"(?:[\s,()]|\band\b)*")
TABLE_RULE = re.compile(r"[\s:|-]+")


# --- what the code defines -------------------------------------------------------------------


@dataclass(frozen=True)
class Definitions:
    """What a module defines at its top level (imports left out), and its classes."""

    names: frozenset[str]
    classes: dict[str, tuple[frozenset[str], tuple[str, ...]]]  # name: (members, bases' names)


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of a body, those under an ``if``, ``try`` or ``with`` included."""
    for node in body:
        if isinstance(node, ast.If | ast.Try | ast.With):
            for part in (node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])):
                yield from _statements(part)
            for handler in getattr(node, "handlers", []):
                yield from _statements(handler.body)
        else:
            yield node


def _names_defined(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if type(node).__name__ == "TypeAlias":  # `type X = ...` (Python 3.12)
        return [node.name.id]
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        targets = [node.target]
    else:
        return []
    names = []
    for target in targets:
        elements = target.elts if isinstance(target, ast.Tuple | ast.List) else [target]
        names += [element.id for element in elements if isinstance(element, ast.Name)]
    return names


@functools.cache
def python_definitions(path: Path) -> Definitions:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    classes = {}
    for node in _statements(tree.body):
        names.update(_names_defined(node))
        if isinstance(node, ast.ClassDef):
            members = frozenset(
                n for child in _statements(node.body) for n in _names_defined(child)
            )
            bases = tuple(
                base.id if isinstance(base, ast.Name) else base.attr
                for base in node.bases
                if isinstance(base, ast.Name | ast.Attribute)
            )
            classes[node.name] = (members, bases)
    return Definitions(frozenset(names), classes)


@functools.cache
def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def javascript_defines(path: Path, name: str) -> bool:
    text, word = _text(path), re.escape(name)
    return any(
        re.search(pattern, text, re.MULTILINE)
        for pattern in (
            rf"\bfunction\*?\s+{word}\s*\(",
            rf"\b(?:const|let|var)\s+{word}\b",
            rf"^\s*(?:async\s+)?{word}\s*\(",
            rf"\b{word}\s*:\s*(?:async\s+)?(?:function\b|\()",
        )
    )


@functools.cache
def class_index() -> dict[str, tuple[Path, ...]]:
    """The apps' classes by name (migrations left out)."""
    index: dict[str, list[Path]] = {}
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" not in path.parts:
                for name in python_definitions(path).classes:
                    index.setdefault(name, []).append(path)
    return {name: tuple(paths) for name, paths in index.items()}


def class_members(path: Path, name: str, seen: frozenset[str] = frozenset()) -> set[str] | None:
    """The members of class ``name`` of ``path`` with those of its project bases; None when the
    module has no such class."""
    found = python_definitions(path).classes.get(name)
    if found is None:
        return None
    members, bases = found
    result = set(members)
    for base in bases:
        if base in seen or base == name:
            continue
        same_module = base in python_definitions(path).classes
        for base_path in [path] if same_module else class_index().get(base, ()):
            result |= class_members(base_path, base, seen | {name}) or set()
    return result


def defines(module: Path, name: str) -> bool:
    """Whether ``module`` (a file, or a folder of modules) defines ``name`` or ``Class.member``."""
    if module.is_dir():
        return any(defines(path, name) for path in sorted(module.glob("*.py")))
    parts = name.split(".")
    if module.suffix == ".js":
        return javascript_defines(module, parts[0])
    if module.suffix != ".py":
        return True  # a template, a stylesheet: the file is the reference
    if len(parts) == 1:
        return name in python_definitions(module).names
    members = class_members(module, parts[0])  # a nested class's members are not followed
    return members is not None and parts[1] in members


def module_of_dotted(parts: list[str]) -> tuple[Path, list[str]] | None:
    """The module a dotted name starts with and the rest of it; None when its head is none."""
    if parts[0] in APPS:
        base = ROOT
    elif (CONVENTION / f"{parts[0]}.py").is_file() or (CONVENTION / parts[0]).is_dir():
        base = CONVENTION
    else:
        return None
    for cut in range(len(parts), 0, -1):
        stem = base.joinpath(*parts[:cut])
        for module in (stem.with_suffix(".py"), stem / "__init__.py"):
            if module.is_file():
                if base == ROOT and cut == 1 and len(parts) > 1:
                    return None  # `tools.run_commands`: an app and a word
                return module, parts[cut:]
    return None


# --- the repository's files ------------------------------------------------------------------


@functools.cache
def _ignore_patterns() -> tuple[str, ...]:
    lines = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    return tuple(line.strip().strip("/") for line in lines if line.strip()[:1] not in ("", "#"))


def ignored(path: Path) -> bool:
    """Whether ``.gitignore`` ignores ``path`` (generated: not the repository's)."""
    if not path.is_relative_to(ROOT) or path == ROOT:
        return False
    relative = path.relative_to(ROOT).as_posix()
    for pattern in _ignore_patterns():
        if "/" in pattern:  # anchored at the root
            if fnmatch.fnmatch(relative, pattern) or relative.startswith(pattern + "/"):
                return True
        elif any(fnmatch.fnmatch(part, pattern) for part in relative.split("/")):
            return True
    return False


@functools.cache
def files_by_name() -> dict[str, tuple[Path, ...]]:
    found: dict[str, list[Path]] = {}
    for folder, dirs, files in os.walk(ROOT):
        here = Path(folder)
        dirs[:] = [d for d in dirs if d not in NOT_WALKED and not ignored(here / d)]
        for name in files:
            found.setdefault(name, []).append(here / name)
    return {name: tuple(paths) for name, paths in found.items()}


def expand(base: Path, path: str) -> list[Path]:
    """The existing paths ``path`` names under ``base``: braces, then globs, expanded."""
    brace = re.search(r"\{([^{}]*)\}", path)
    if brace:
        found = []
        for choice in brace.group(1).split(","):
            matched = expand(base, path[: brace.start()] + choice + path[brace.end() :])
            if not matched:
                return []  # every choice must exist
            found += matched
        return found
    if any(c in path for c in "*?["):
        return sorted(base.glob(path))
    return [base / path] if (base / path).exists() else []


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


@dataclass(frozen=True)
class Target:
    """A cited path: the files (several for a glob) or the folder it stands for."""

    paths: tuple[Path, ...]

    @property
    def is_module(self) -> bool:
        return all(path.is_file() for path in self.paths)

    @property
    def folders(self) -> list[Path]:
        return [path if path.is_dir() else path.parent for path in self.paths]

    def __str__(self) -> str:
        return ", ".join(relative(path) for path in self.paths)


NOT_A_PATH = None
BROKEN = False


def resolve(span: str, context: list[Path]) -> Target | None | bool:
    """The Target a span cites; None when it is no path of the repository; False when it
    is one, and not there."""
    span = span.removeprefix("./")
    if not span or " " in span or "://" in span or span.startswith(("/", "~", ".", "*")):
        return NOT_A_PATH
    is_folder = span.endswith("/")
    path = span.rstrip("/")
    if not PATH_CHARACTERS.fullmatch(path):
        return NOT_A_PATH
    last = path.rsplit("/", 1)[-1]
    if "/" not in path and not is_folder:
        return _look_up(path, context, bare=True) if last.endswith(BARE_SUFFIXES) else NOT_A_PATH
    if not is_folder and "." not in last:
        return NOT_A_PATH  # `conversations/0004` (a migration), `.ci/run`
    return _look_up(path, context, bare=False)


def _look_up(path: str, context: list[Path], bare: bool) -> Target | None | bool:
    first = path.split("/", 1)[0]
    if not bare and (ROOT / first).is_dir() and not ignored(ROOT / first):
        bases = [ROOT]
    else:
        bases = [*context, CONVENTION, ROOT]
        if not bare:
            bases = [base for base in bases if (base / first).is_dir()]
            if not bases:
                return NOT_A_PATH  # an example, a folder of DATA_DIR
    for base in bases:
        found = [p for p in expand(base, path) if not ignored(p)]
        if found:
            return Target(tuple(found))
    if any(ignored(base / path) for base in bases):
        return NOT_A_PATH
    if bare and files_by_name().get(path):
        return Target(files_by_name()[path])
    return BROKEN


# --- the pages -------------------------------------------------------------------------------


@dataclass
class Block:
    """A heading, a paragraph, a list item or a table row, with the line it starts on."""

    line: int
    text: str
    cells: list[str] = field(default_factory=list)  # a table row's

    @property
    def is_heading(self) -> bool:
        return self.text.startswith("#")


def blocks_of(text: str) -> Iterator[Block]:
    current: Block | None = None
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
        ends = fenced or not stripped or stripped.startswith(("```", "~~~", "|", "#"))
        if current and (ends or re.match(r"\s*(?:[-*+]|\d+\.)\s", line)):
            yield current
            current = None
        if fenced or stripped.startswith(("```", "~~~")) or not stripped:
            continue
        if stripped.startswith("|"):
            cells = [cell.strip() for cell in stripped.strip("|").split("|")]
            yield Block(number, stripped, cells)
        elif stripped.startswith("#"):
            yield Block(number, stripped)
        elif current is None:
            current = Block(number, line)
        else:
            current.text += "\n" + line
    if current:
        yield current


class Page:
    """One page's references, checked."""

    def __init__(self, label: str, text: str):
        self.label = label  # the page's path from the root
        self.text = text
        self.problems: list[str] = []

    def problem(self, line: int, span: str, why: str) -> None:
        self.problems.append(f"{self.label}:{line}: `{span}`: {why}")

    def check(self) -> list[str]:
        code: list[Target] = []  # what the page's `Code:` paragraph cites
        section: list[Target] = []  # what the section cited so far
        function_table: list[Target] | None = None  # the modules of the table being read
        for block in blocks_of(self.text):
            self.check_links(block)
            if block.is_heading:
                section, function_table = [], None
                continue
            if not block.cells:
                function_table = None
            elif function_table is None and block.cells[0].strip("` ") == "function":
                function_table = code + section
                continue
            elif TABLE_RULE.fullmatch(block.text):
                continue
            elif function_table is not None:
                self.check_function_row(block, function_table)
            cited = self.check_block(block)
            section += cited
            if block.text.startswith("Code:"):
                code = cited
        return self.problems

    def check_links(self, block: Block) -> None:
        for match in LINK.finditer(block.text):
            target = match.group(1).split("#", 1)[0]
            if not target or re.match(r"[a-z]+:", target):
                continue  # an anchor of the page, a URL
            if not ((ROOT / self.label).parent / target).exists():
                line = block.line + block.text.count("\n", 0, match.start())
                self.problems.append(f"{self.label}:{line}: ({match.group(1)}): no such file")

    def check_function_row(self, block: Block, modules: list[Target]) -> None:
        first = SPAN.search(block.cells[0])
        name = first and NAME.fullmatch(first.group(2).strip())
        if not name:
            return
        if not modules:
            self.problem(block.line, name.group(0), "a function table with no module cited above")
        elif not any(defines(path, name.group(1)) for t in modules for path in t.paths):
            cited = ", ".join(str(t) for t in modules)
            self.problem(block.line, name.group(0), f"defined in none of {cited}")

    def check_block(self, block: Block) -> list[Target]:
        """Check the references of one block; answer the paths it cites."""
        text = block.text.replace("|", " ; ") if block.cells else block.text  # cells: lists end
        spans = []  # (the text before, the span, its line)
        end = 0
        for match in SPAN.finditer(text):
            line = block.line + text.count("\n", 0, match.start())
            spans.append((text[end : match.start()], match.group(2).strip(), line))
            end = match.end()
        spans.append((text[end:], "", block.line))

        context: list[Path] = []  # folders of the paths cited so far, the latest first
        cited: list[Target] = []
        module: Target | None = None  # the module names attach to while its list goes on
        last = None  # what the span before was: "path", "name" or None
        detail = 0  # open parentheses of a name's detail
        for index, (before, span, line) in enumerate(spans[:-1]):
            if not LIST_SEPARATOR.fullmatch(before):
                module, last, detail = None, None, 0
            for char in before if module or last else "":
                if char == "(" and last == "name":
                    detail += 1
                elif char == ")" and detail:
                    detail -= 1
                elif char == ")":  # the list's parenthesis, or one opened before the path
                    module = None
            after, next_span, _ = spans[index + 1]
            named = NAME.fullmatch(span)
            if named and after.strip() == "in":
                its_module = resolve(next_span.partition(":")[0], context)
                if isinstance(its_module, Target):
                    self.check_name(its_module, named.group(1), line, f"{span}` in `{next_span}")
                    module, last = None, "name"
                    continue
            if "::" in span:
                self.check_node(span, line, context)
                module, last = None, None
                continue
            if self.check_dotted_path(span, line, context):
                module, last = None, None
                continue
            path, colon, name = span.partition(":")
            target = resolve(path, context)
            if target is BROKEN:
                self.problem(line, span, "no such file or folder in the repository")
                module, last = None, None
                continue
            if isinstance(target, Target):
                cited.append(target)
                context[:0] = [folder for folder in target.folders if folder not in context]
                if colon and NAME.fullmatch(name):
                    self.check_name(target, NAME.fullmatch(name).group(1), line, span)
                if not detail:  # in a detail, as in `call_settle` (`path`): no list
                    module = target if target.is_module and not colon else None
                    last = "path"
                continue
            if not named:
                module, last = None, None
                continue
            if not detail:
                if module is not None and not self.is_dotted_module(named.group(1)):
                    self.check_name(module, named.group(1), line, span)
                else:
                    self.check_alone(named.group(1), line, span)
                    module = None
            last = "name"
        return cited

    @staticmethod
    def is_dotted_module(name: str) -> bool:
        return "." in name and module_of_dotted(name.split(".")) is not None

    def check_name(self, module: Target, name: str, line: int, span: str) -> None:
        if not any(defines(path, name) for path in module.paths):
            self.problem(line, span, f"{name} is not defined in {module}")

    def check_alone(self, name: str, line: int, span: str) -> None:
        """A dotted name with no path before it."""
        parts = name.split(".")
        if len(parts) < 2:
            return
        found = module_of_dotted(parts)
        if found is not None:
            module, rest = found
            if rest and not defines(module, ".".join(rest[:2])):
                self.problem(line, span, f"{'.'.join(rest)} is not defined in {relative(module)}")
        elif parts[0] in class_index():
            paths = class_index()[parts[0]]
            if not any(parts[1] in (class_members(path, parts[0]) or ()) for path in paths):
                where = ", ".join(relative(path) for path in paths)
                self.problem(line, span, f"the class {parts[0]} ({where}) has no {parts[1]}")

    def check_dotted_path(self, span: str, line: int, context: list[Path]) -> bool:
        """``services/exits.command_exit_record``: a module's path, then one of its names."""
        folder, _, last = span.rpartition("/")
        stem, dot, name = last.partition(".")
        named = NAME.fullmatch(name)
        if not folder or not dot or not named or name.split("(")[0] in FILE_SUFFIXES:
            return False
        module = resolve(f"{folder}/{stem}.py", context)
        if not isinstance(module, Target):
            return False
        self.check_name(module, named.group(1), line, span)
        return True

    def check_node(self, span: str, line: int, context: list[Path]) -> None:
        """``tests/.../test_x.py::test_name``: the test is there."""
        path, *names = span.split("::")
        module = resolve(path, context)
        if module is BROKEN:
            self.problem(line, span, "no such file in the repository")
        elif isinstance(module, Target) and names:
            names = [re.sub(r"\[.*\]$", "", name) for name in names[:2]]
            self.check_name(module, ".".join(names), line, span)


def check_page(path: Path) -> list[str]:
    return Page(relative(path), path.read_text(encoding="utf-8")).check()


# --- the tests -------------------------------------------------------------------------------


def test_every_code_reference_in_the_docs_resolves():
    problems = [problem for path in DOC_FILES for problem in check_page(path)]
    assert not problems, "references that do not resolve:\n" + "\n".join(problems)


def test_the_paths_pyproject_cites_exist():
    """Its comments cite modules too (`see config/http.py`)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    folders = "|".join(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("."))
    cited = re.findall(rf"\b(?:{folders})/[\w/.-]*\w", text)
    assert cited, "the pattern finds no path"
    missing = [path for path in cited if not (ROOT / path).exists()]
    assert not missing, missing


# What each form of reference catches, and the prose it leaves alone: the drift these tests were
# written for is here (a name gone, a name cited in the wrong module, a module gone).
BROKEN_REFERENCES = [
    ("`sql/postgresql.py` `ready_candidates`", "ready_candidates"),
    ("`services/claims.py` (`claim_process_record`, `claims_left_by`)", "claims_left_by"),
    ("`tools/runtime/capture.py` `kill_group`", "kill_group"),
    ("`tools/runtime/capture.py` `LiveOutput`", "LiveOutput"),
    ("`tools/runtime/watchers.py` `Watchers.kill_orphans`", "Watchers.kill_orphans"),
    ("sweeps (`Watchers.kill_orphans`):", "kill_orphans"),
    ("`bodies.py` `_field_of`", "_field_of"),
    ("`tools/runtime/worker.py` (`Worker.run`, `_pick_up`)", "_pick_up"),  # a method, bare
    ("`config/hook_thread.py`", "hook_thread"),
    ("`projections/process.py:read_page`", "read_page"),
    ("`read_page` in `projections/process.py`", "read_page"),
    ("(`models.NO_SUCH_NAME`)", "NO_SUCH_NAME"),
    ("`conversations.selectors.no_such_selector`", "no_such_selector"),
    ("`services/exits.no_such_name`", "no_such_name"),
    ("`tools/runtime/paths.py` `Confinement.no_such_member`", "no_such_member"),
    ("`tests/test_layers.py::test_no_such_test`", "test_no_such_test"),
    ("`conversations/services/{calls,no_such}.py`", "no_such"),
    ("`conversations/sql/*.sql`", "*.sql"),
    ("`conversations/admin/` (`console.py`, `no_such_page.py`)", "no_such_page.py"),
    ("`static/toolcore/common.js` `noSuchFunction`", "noSuchFunction"),
    (
        "Code: `conversations/services/claims.py`.\n\n| function | does |\n|---|---|\n"
        "| `claims_left_by(host)` | gone |",
        "claims_left_by",
    ),
    ("See [the claims](subsystems/no_such_page.md#claims).", "no_such_page.md"),
]

PROSE = [
    "`services/activity.py` `activity_create` (`after_sequence`); indexes `event_messages`",
    "`services/messages.py` `message_post`; the constraint `event_message_id_unique`",
    "`grants.py` `run_commands_require` (one check, called by `_check_approval`)",
    "a handler (`tools/runtime/base.py`), `bash` (`bash.py`), `ask_user` (`handlers.py`)",
    "`call_settle` (`conversations/services/settlement.py`) settles; `SIGTERM` (`manage.py`)",
    "`LOGGING` in `config/settings.py`; `shapes.py` `call_wire(bounded=True)`",
    "`tool_call.changed`, `queue.changed`, `publish.batch`, `tools.run_commands`, `json.dumps`",
    "`src/app.py`, `notes.md`, `g1/`, `DATA_DIR/launches/`, `result.json`, `./data`, `/ws/`",
    "`conversations/0004`, `bench/.fragments/`, `static/` (`STATICFILES_DIRS`)",
    "`conversations/admin/` (`calls.py` `ToolCallAdmin`), `tools/runtime/` (`files/`, `walk.py`)",
    "`services/{calls,turns}.py`, `sql/*.py` (`now`, `clock`), `Toolcore.fold`",
    "`tools/runtime/worker.py` `Worker._renew`, `Worker.run`; `ProcessCapture.terminate`",
    "`tests/tools/test_bash.py::test_a_cancelled_commands_capture_is_linked_and_stays_verifiable`",
    "| rule | page | code |\n|---|---|---|\n| x | [a](architecture.md#layers) | `storage/local.py` |",
]


@pytest.mark.parametrize(("text", "named"), BROKEN_REFERENCES)
def test_a_broken_reference_is_found(text, named):
    problems = Page("docs/sample.md", text).check()
    assert len(problems) == 1, problems
    assert named in problems[0]


@pytest.mark.parametrize("text", PROSE)
def test_prose_and_good_references_pass(text):
    assert Page("docs/sample.md", text).check() == []
