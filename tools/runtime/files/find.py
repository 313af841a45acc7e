"""``find``: the files and directories whose name or path matches a glob, as items.

* ``pattern`` follows ``globs.py``: without ``/`` it matches names anywhere (``*.py``), with
  ``/`` the path below ``path`` (``src/**/test_*.py``).
* ``path`` (default the workspace) must be a directory; it is walked as ``walk.py`` says
  (streamed, sorted per directory, symlinks leading outside skipped, ``.git`` listed but not
  entered). Symlinks inside are listed like their targets but not entered.
* Items are paths relative to the workspace (absolute for the conversation's managed files),
  directories with a trailing ``/``, in walk order (depth first, names sorted).
* It stops at the result budget (what the ``file_listing`` profile shows inline: 119 entries
  at most, less with long paths) or at ``TIME_LIMIT_SECONDS``, and its last item says which.

``result.json``: ``{pattern, path, entries, entryCount, stopped, walked: {directories, entries,
skippedOutside, skippedUnreadable}, timeLimitSeconds}``.
"""

from __future__ import annotations

import threading
import time

from ..base import CallContext, HandlerResult, ToolError
from ..paths import Confinement, NotADirectory, quoted, shown_below
from . import walk
from .blocking import in_thread
from .budget import ItemBudget
from .globs import NamePattern

TIME_LIMIT_SECONDS = 30.0
_DIRECTORIES = (walk.DIRECTORY, walk.LINK_DIRECTORY)


async def find(ctx: CallContext) -> HandlerResult:
    """The entries under ``path`` matching ``pattern``, within the budget and the time limit."""
    pattern = ctx.arguments.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise ToolError("Missing required argument 'pattern'.", field="pattern")
    names = NamePattern.compile(pattern)
    return await in_thread(lambda stop: _find(ctx, names, ctx.arguments.get("path"), stop))


def _find(
    ctx: CallContext, names: NamePattern, raw: str | None, stop: threading.Event
) -> HandlerResult:
    deadline = time.monotonic() + TIME_LIMIT_SECONDS
    confinement = Confinement.ready(ctx)
    root = str(confinement.resolve(raw))
    shown_root = confinement.shown(root)
    budget = ItemBudget.for_tool("find")
    stopped: list[str] = []

    def should_stop() -> bool:
        if not stopped:
            if stop.is_set():
                stopped.append("cancelled")
            elif time.monotonic() > deadline:
                stopped.append("time")
        return bool(stopped)

    tree = walk.Walk(confinement, root, should_stop)
    try:
        for entry in tree:
            if not names.matches(entry.relative, entry.name):
                continue
            item = shown_below(shown_root, entry.relative)
            if entry.kind in _DIRECTORIES:
                item += "/"
            if not budget.add(item):
                stopped.append("budget")
                break
    except NotADirectory:
        raise NotADirectory(
            f"Not a directory: {quoted(shown_root)}; find searches a directory.", field="path"
        ) from None
    count = len(budget.items)
    reason = stopped[0] if stopped else None
    entries = "entry" if count == 1 else "entries"
    if reason == "budget":
        note = (
            f"(Stopped at {count} {entries}: one answer shows no more. More entries match; "
            "narrow the pattern or path to see them.)"
        )
    elif reason == "time":
        note = (
            f"(Stopped at the {TIME_LIMIT_SECONDS:g} s time limit after {tree.stats.entries} "
            f"entries; {count} {entries} matched so far. Narrow the path to search the rest.)"
        )
    elif count == 0:
        walked = tree.stats.entries
        note = f"(No entries match among {walked} {'entry' if walked == 1 else 'entries'}.)"
    else:
        note = None
    result = {
        "pattern": names.text,
        "path": root,
        "entries": list(budget.items),
        "entryCount": count,
        "stopped": reason,
        "walked": tree.stats.as_result(),
        "timeLimitSeconds": TIME_LIMIT_SECONDS,
    }
    return HandlerResult(outcome="completed", result=result, items=budget.answer(note))
