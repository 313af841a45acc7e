"""``ls``: the entries of one directory, sorted by name, as items.

* ``path`` defaults to the workspace; a file is refused (``read`` it instead).
* Each entry is its name; a directory ends with ``/`` and a symlink with ``@`` (as ``ls -F``
  marks them). A symlink is not followed, so its target, wherever it is, is never looked at.
* At most what the ``file_listing`` profile shows inline (119 names, less with long names):
  the first names in order, then a last item counting the rest. Only that many names are held,
  however large the directory (``heapq.nsmallest`` over the streamed listing).

``result.json``: ``{path, entries, total, shown}``.
"""

from __future__ import annotations

import heapq
import os
import threading
from collections.abc import Iterator

from ..base import CallContext, HandlerResult, ToolError
from ..paths import Confinement, NotADirectory, quoted, shown_below
from .blocking import in_thread
from .budget import ItemBudget


async def ls(ctx: CallContext) -> HandlerResult:
    """The sorted entries of the directory ``path``, bounded, with a count of the rest."""
    return await in_thread(lambda stop: _ls(ctx, ctx.arguments.get("path"), stop))


def _entries(fd: int, stop: threading.Event) -> Iterator[tuple[str, str]]:
    """``(name, mark)`` of each entry, streamed."""
    with os.scandir(fd) as scan:
        for entry in scan:
            if stop.is_set():
                raise ToolError("Stopped: the call was cancelled.")
            if entry.is_symlink():
                yield entry.name, "@"
            elif entry.is_dir(follow_symlinks=False):
                yield entry.name, "/"
            else:
                yield entry.name, ""


def _ls(ctx: CallContext, raw: str | None, stop: threading.Event) -> HandlerResult:
    confinement = Confinement.ready(ctx)
    real = str(confinement.resolve(raw))
    shown = quoted(confinement.shown(real))
    try:
        fd = confinement.open(real, directory=True)
    except NotADirectory:
        raise NotADirectory(f"Not a directory: {shown}; read it with read.", field="path") from None
    budget = ItemBudget.for_tool("ls")
    total = 0

    def counted() -> Iterator[tuple[str, str]]:
        nonlocal total
        for entry in _entries(fd, stop):
            total += 1
            yield entry

    try:
        first = heapq.nsmallest(budget.max_items, counted())
    except OSError as exc:
        raise ToolError(f"Cannot list {shown}: {exc.strerror}.", field="path") from None
    finally:
        os.close(fd)
    for name, mark in first:
        if not budget.add(shown_below(".", name) + mark):
            break
    rest = total - len(budget.items)
    if total == 0:
        note = "(Empty directory.)"
    elif rest:
        note = (
            f"({rest} more {'entry' if rest == 1 else 'entries'} not shown, {total} in all. "
            "Use find with a pattern, or ls a subdirectory.)"
        )
    else:
        note = None
    result = {
        "path": real,
        "entries": list(budget.items),
        "total": total,
        "shown": len(budget.items),
    }
    return HandlerResult(outcome="completed", result=result, items=budget.answer(note))
