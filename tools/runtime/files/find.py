"""``find``: the files and directories whose name or path matches a glob, as items.

* ``pattern`` follows ``globs.py``: without ``/`` it matches names anywhere (``*.py``), with
  ``/`` the path below ``path`` (``src/**/test_*.py``).
* ``path`` (default the workspace) must be a directory; it is walked as ``walk.py`` says
  (streamed, sorted per directory, symlinks leading outside skipped, ``.git`` listed but not
  entered). Symlinks inside are listed like their targets but not entered.
* Items are paths relative to the workspace (absolute for the conversation's managed files),
  directories with a trailing ``/``, in walk order (depth first, names sorted).
* Every entry found goes into ``result.json`` as it is found (``listing.py``: up to 16 MiB of
  entries, then ``truncated`` and a count of the rest); the model is shown what its
  ``file_listing`` profile fits, with the path of ``result.json``. It stops at the end of the
  walk or at ``TIME_LIMIT_SECONDS``, which its closing note then says.

``result.json``: ``{pattern, path, entries, truncated, notStored, entryCount, stopped, walked:
{directories, entries, skippedOutside, skippedUnreadable}, timeLimitSeconds}``; ``entryCount``
counts every entry found, stored or not.
"""

from __future__ import annotations

import threading
import time

from ..base import CallContext, HandlerResult, ToolError
from ..paths import Confinement, NotADirectory, quoted, shown_below
from . import walk
from .blocking import in_thread
from .globs import NamePattern
from .listing import Listing

TIME_LIMIT_SECONDS = 30.0
_DIRECTORIES = (walk.DIRECTORY, walk.LINK_DIRECTORY)


async def find(ctx: CallContext) -> HandlerResult:
    """Every entry under ``path`` matching ``pattern``, within the time limit."""
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
    stopped: list[str] = []

    def should_stop() -> bool:
        if not stopped:
            if stop.is_set():
                stopped.append("cancelled")
            elif time.monotonic() > deadline:
                stopped.append("time")
        return bool(stopped)

    tree = walk.Walk(confinement, root, should_stop)
    with Listing(ctx, head={"pattern": names.text, "path": root}, key="entries") as listing:
        try:
            for entry in tree:
                if not names.matches(entry.relative, entry.name):
                    continue
                item = shown_below(shown_root, entry.relative)
                if entry.kind in _DIRECTORIES:
                    item += "/"
                listing.add(item, item)
        except NotADirectory:
            raise NotADirectory(
                f"Not a directory: {quoted(shown_root)}; find searches a directory.", field="path"
            ) from None
        count = listing.found
        reason = stopped[0] if stopped else None
        if reason == "cancelled":  # nobody reads the answer: no result.json is left behind
            raise ToolError("Stopped: the call was cancelled.")
        note = None
        if reason == "time":
            note = (
                f"(Stopped at the {TIME_LIMIT_SECONDS:g} s time limit after {tree.stats.entries} "
                f"entries; {count} {'entry' if count == 1 else 'entries'} matched so far. Narrow "
                "the path to search the rest.)"
            )
        walked = tree.stats.entries
        tail = {
            "entryCount": count,
            "stopped": reason,
            "walked": tree.stats.as_result(),
            "timeLimitSeconds": TIME_LIMIT_SECONDS,
        }
        return listing.answer(
            tail,
            note=note,
            empty=note
            or f"(No entries match among {walked} {'entry' if walked == 1 else 'entries'}.)",
        )
