"""``ls``: the entries of one directory, sorted by name, as items.

* ``path`` defaults to the workspace; a file is refused (``read`` it instead).
* Each entry is its name; a directory ends with ``/`` and a symlink with ``@`` (as ``ls -F``
  marks them). A symlink is not followed, so its target, wherever it is, is never looked at.
* Every entry goes into ``result.json`` (``listing.py``: up to 16 MiB of names, then
  ``truncated`` and a count of the rest); the model is shown what its ``file_listing`` profile
  fits, with the path of ``result.json``.
* Sorting needs every name, but never all of them in memory: the listing is read in runs of
  ``RUN_ENTRIES`` names, each run beyond the first sorted and spilled to a temporary file in the
  attempt's folder, and the runs are merged as they are written out.

``result.json``: ``{path, entries, truncated, notStored, total}``; ``total`` counts every entry.
"""

from __future__ import annotations

import heapq
import json
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import IO

from ..base import CallContext, HandlerResult, ToolError
from ..paths import Confinement, NotADirectory, quoted, shown_below
from .blocking import in_thread
from .listing import Listing

RUN_ENTRIES = 65_536
_STOPPED = "Stopped: the call was cancelled."


async def ls(ctx: CallContext) -> HandlerResult:
    """Every entry of the directory ``path``, sorted."""
    return await in_thread(lambda stop: _ls(ctx, ctx.arguments.get("path"), stop))


def _entries(fd: int, stop: threading.Event) -> Iterator[tuple[str, str]]:
    """``(name, mark)`` of each entry, streamed."""
    with os.scandir(fd) as scan:
        for entry in scan:
            if stop.is_set():
                raise ToolError(_STOPPED)
            if entry.is_symlink():
                yield entry.name, "@"
            elif entry.is_dir(follow_symlinks=False):
                yield entry.name, "/"
            else:
                yield entry.name, ""


def _spill(run: list[tuple[str, str]], folder: Path, files: ExitStack) -> IO[str]:
    """A sorted run written to an unnamed temporary file, one JSON pair a line (ASCII, so any
    name, newlines and undecodable bytes included, stays on its line)."""
    folder.mkdir(parents=True, exist_ok=True)
    temporary = tempfile.TemporaryFile("w+", encoding="ascii", dir=folder)  # noqa: SIM115
    spilled = files.enter_context(temporary)  # closed with the ExitStack
    spilled.writelines(json.dumps(pair) + "\n" for pair in sorted(run))
    spilled.seek(0)
    return spilled


def _read_back(spilled: IO[str]) -> Iterator[tuple[str, str]]:
    for line in spilled:
        name, mark = json.loads(line)
        yield name, mark


def _sorted(
    entries: Iterator[tuple[str, str]], folder: Path, files: ExitStack
) -> Iterator[tuple[str, str]]:
    """``entries`` sorted, holding at most ``RUN_ENTRIES`` of them at once (plus one line per
    spilled run while merging)."""
    runs: list[Iterator[tuple[str, str]]] = []
    run: list[tuple[str, str]] = []
    for entry in entries:
        run.append(entry)
        if len(run) == RUN_ENTRIES:
            runs.append(_read_back(_spill(run, folder, files)))
            run = []
    run.sort()
    return heapq.merge(*runs, iter(run)) if runs else iter(run)


def _ls(ctx: CallContext, raw: str | None, stop: threading.Event) -> HandlerResult:
    confinement = Confinement.ready(ctx)
    real = str(confinement.resolve(raw))
    shown = quoted(confinement.shown(real))
    try:
        fd = confinement.open(real, directory=True)
    except NotADirectory:
        raise NotADirectory(f"Not a directory: {shown}; read it with read.", field="path") from None
    with ExitStack() as files, Listing(ctx, head={"path": real}, key="entries") as listing:
        try:
            entries = _sorted(_entries(fd, stop), Path(ctx.attempt_dir), files)
        except OSError as exc:
            raise ToolError(f"Cannot list {shown}: {exc.strerror}.", field="path") from None
        finally:
            os.close(fd)
        for name, mark in entries:
            if listing.found % 1024 == 0 and stop.is_set():
                raise ToolError(_STOPPED)
            item = shown_below(".", name) + mark
            listing.add(item, item)
        return listing.answer({"total": listing.found}, note=None, empty="(Empty directory.)")
