"""The listing of ``grep``, ``find`` and ``ls``: every item found goes into ``result.json``, as
it is found (docs/subsystems/path_tools.md, "Results keep the whole").

``result.json`` is written while the tool walks, never built in memory first: the tool's own
fields (``head``), the list of items under ``key``, then the fields known at the end
(``tail``: counts, ``truncated``, ``notStored``, why it stopped), as one compact JSON object
(the same text ``json.dumps`` would give). It is written as ``result.json.part`` and renamed
when complete, so a cancelled or failed call never leaves a partial ``result.json``.

**The cap.** The items' JSON counts toward ``RESULT_MAX_BYTES`` (16 MiB, the capture cap of
process output): each stored item's compact JSON, plus one byte for the comma before every item
but the first. An item is stored while that total stays within the cap; from the first one
that would pass it, no further item is stored (what is stored is always the first items found),
``truncated`` is true and ``notStored`` counts the items found but not stored. The other
fields come on top of the 16 MiB (a few hundred bytes). The tool goes on counting what it
finds after the cap, up to its time limit.

What the model and the transcript's card are shown is chosen by an ``ItemCollector``
(``projections/items.py``) fed with the stored items: memory does not grow with the listing.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from conversations.fields import dumps
from conversations.storage import CAPTURE_MAX_BYTES
from projections.items import ItemCollector
from projections.model import item_noun
from tools.catalog import CORE_TOOLS

from ..base import AttemptFile, CallContext, HandlerResult, ToolError

RESULT_MAX_BYTES = CAPTURE_MAX_BYTES
RESULT_NAME = "result.json"


class Listing:
    """``result.json`` of one item tool's call, written as the items come (a context manager:
    leaving it by an exception removes the part written)."""

    def __init__(self, ctx: CallContext, *, head: dict[str, Any], key: str) -> None:
        self.path = Path(ctx.attempt_dir) / RESULT_NAME
        self._part = self.path.with_name(RESULT_NAME + ".part")
        self.noun = item_noun(ctx.tool_name)
        self.collector = ItemCollector(
            profile=CORE_TOOLS[ctx.tool_name].profile, path=self.path, noun=self.noun
        )
        self.found = 0
        self.stored = 0
        self.truncated = False
        self._bytes = 0
        opening = dumps(head)[:-1] + ("," if head else "") + dumps(key) + ":["
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file: IO[bytes] = open(self._part, "wb")  # noqa: SIM115 - closed by finish()
            self._file.write(opening.encode())
        except OSError as exc:
            raise _not_stored(exc) from None

    def __enter__(self) -> Listing:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is not None:
            self.discard()

    @property
    def not_stored(self) -> int:
        return self.found - self.stored

    def add(self, value: Any, item: str) -> None:
        """One item found: ``value`` as ``result.json`` keeps it, ``item`` as the model reads
        it (one line)."""
        self.found += 1
        if self.truncated:
            return
        data = dumps(value).encode()
        cost = len(data) + (1 if self.stored else 0)
        if self._bytes + cost > RESULT_MAX_BYTES:
            self.truncated = True
            return
        try:
            self._file.write(b"," + data if self.stored else data)
        except OSError as exc:
            raise _not_stored(exc) from None
        self._bytes += cost
        self.stored += 1
        self.collector.add(item)

    def finish(self, tail: dict[str, Any]) -> AttemptFile:
        """Close the list with ``tail`` (after ``truncated`` and ``notStored``), make the file
        durable and name it ``result.json``; the asset to register."""
        tail = {"truncated": self.truncated, "notStored": self.not_stored, **tail}
        try:
            self._file.write(("]," + dumps(tail)[1:]).encode())
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            os.replace(self._part, self.path)
            _sync_folder(self.path.parent)
        except OSError as exc:
            self.discard()
            raise _not_stored(exc) from None
        return AttemptFile(self.path, "payload", "application/json", truncated=self.truncated)

    def discard(self) -> None:
        self._file.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._part)

    def answer(self, tail: dict[str, Any], *, note: str | None, empty: str) -> HandlerResult:
        """The handler's result: ``result.json`` finished with ``tail``; what the projections
        need of the items, the count of all, and the closing note (``empty`` when nothing was
        found: then it is the whole answer). A cut at the cap is said in the note."""
        file = self.finish(tail)
        if self.found == 0:
            return HandlerResult(outcome="completed", files=[file], items=[empty])
        if self.truncated:
            kept = (
                f"(result.json holds the first {self.stored} {self.noun} found: the other "
                f"{self.not_stored} passed its 16 MiB cap and were not stored.)"
            )
            note = kept if note is None else f"{note} {kept}"
        return HandlerResult(
            outcome="completed",
            files=[file],
            items=self.collector.items,
            item_count=self.found,
            note=note,
        )


def _not_stored(exc: OSError) -> ToolError:
    return ToolError(f"The result could not be stored in DATA_DIR: {exc.strerror}.")


def _sync_folder(folder: Path) -> None:
    """``fsync`` the folder, so the new name survives a power loss too."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
