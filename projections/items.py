"""The ``item_aware`` strategy (``grep`` matches, ``find`` and ``ls`` entries) and the stream
that feeds it (docs/projections.md). ``projections/result.py`` re-exports ``project_items``.

A tool writes every item it found into its ``result.json``; the model sees what fits. Within
the profile's inline lines, bytes and items the answer is the items, unchanged. Otherwise: whole
items in order, skipping one that does not fit so a later smaller one can, then
``Showing D of N NOUN; O omitted. Full result: PATH.`` naming ``result.json``.

Rules resolved where the contract leaves room:

* The footer is reserved at its widest: ``D`` and ``O`` written with as many digits as ``N``.
  Each item costs its own lines (``count("\\n") + 1``) and bytes plus one separator.
* A tool may close its answer with one **note** (a time limit it hit, a result it could not
  store whole): one line of at most ``NOTE_MAX_BYTES``, never counted as an item. Inline it is
  the answer's last line; in an overflow summary it stands just before the footer, and its room
  (1 line, ``NOTE_MAX_BYTES + 1`` bytes) is reserved whatever its length.

**Streams.** A listing may hold millions of items; the projection needs only a few of them.
``ItemCollector`` takes the items one at a time and keeps, in order, every item that
``project_items`` could show whatever the final count turns out to be: the items while the whole
could still be inline, and each item that the overflow choice would take, tracked for every
number of digits ``N`` may still reach, with and without a note (a greedy choice run over a
subsequence that holds its picks picks the same). It also keeps the first items, and the
first directories and first other entries, for the transcript's card (``ls`` shows directories
first). What it holds is bounded by the budgets, never by the number of items.
``project_items(collector.items, count=collector.count, …)`` is then exactly the projection of
the whole stream, provided the collector was given the same ``path`` and ``noun``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from projections.profiles import Profile, profile_of
from projections.transcript import PREVIEW_MAX_ENTRIES
from projections.units import clean_text, cut_text, line_count, path_text, utf8_len

__all__ = ["NOTE_MAX_BYTES", "ItemCollector", "noun_forms", "project_items"]

NOTE_MAX_BYTES = 400
# No listing can reach 10**18 items: the collector tracks every digit count below that.
MAX_COUNT_DIGITS = 18

_NOUNS = {
    "match": ("match", "matches"),
    "matches": ("match", "matches"),
    "entry": ("entry", "entries"),
    "entries": ("entry", "entries"),
}


def noun_forms(noun: str) -> tuple[str, str]:
    """``(singular, plural)`` of a noun given in either form."""
    if noun in _NOUNS:
        return _NOUNS[noun]
    if noun.endswith("ies"):
        return noun[:-3] + "y", noun
    if noun.endswith(("ches", "shes", "sses", "xes")):
        return noun[:-2], noun
    if noun.endswith("s"):
        return noun[:-1], noun
    return noun, noun + "s"


def note_line(note: str) -> str:
    """A tool's closing note as the one line it is shown as (cut to ``NOTE_MAX_BYTES``)."""
    return cut_text(clean_text(note).replace("\r", " ").replace("\n", " "), NOTE_MAX_BYTES)


@dataclass
class _Room:
    """What an overflow summary has left for items: bytes, lines, and items (None: no cap)."""

    bytes: int
    lines: int
    items: int | None

    def take(self, size: int, lines: int) -> bool:
        """Take an item costing ``size`` bytes and ``lines`` lines if it fits."""
        if self.items == 0 or size > self.bytes or lines > self.lines:
            return False
        self.bytes -= size
        self.lines -= lines
        if self.items is not None:
            self.items -= 1
        return True

    @property
    def full(self) -> bool:
        return self.items == 0 or self.bytes < 1 or self.lines < 1


def _footer(shown: int, count: int, word: str, where: str) -> str:
    return f"Showing {shown} of {count} {word}; {count - shown} omitted. Full result: {where}."


def _overflow_room(p: Profile, *, word: str, where: str, digits: int, note: bool) -> _Room:
    """The room for items once the footer (at its widest for ``digits``) and, with ``note``,
    the note's line are reserved."""
    widest = utf8_len(_footer(0, 0, word, where)) - 3 + 3 * digits  # D, N, O of `digits` each
    room = _Room(p.overflow_bytes - widest, p.overflow_lines - 1, p.overflow_items)
    if note:
        room.bytes -= NOTE_MAX_BYTES + 1
        room.lines -= 1
    return room


def project_items(
    items: Sequence[str],
    *,
    profile: str | Profile,
    path: str | os.PathLike[str],
    noun: str,
    count: int | None = None,
    note: str | None = None,
) -> str:
    """The model text of an item result (``grep`` matches, ``find`` / ``ls`` entries).

    ``items`` are all the items in order, or, with ``count`` (how many there are in all), the
    ones an ``ItemCollector`` kept of them. Unchanged (items, then the note, joined by ``\\n``)
    within the inline lines, bytes and items; otherwise the whole items that fit in order,
    skipping one that does not fit so a later smaller one can, the note, then
    ``Showing D of N NOUN; O omitted. Full result: PATH.`` (``noun`` singular or plural; the
    singular is used when N is 1), the whole within the overflow budget.
    """
    p = profile_of(profile)
    if p.strategy != "item_aware":
        raise ValueError(f"profile {p.name!r} is not item-based ({p.strategy})")
    items = list(items)
    total = len(items) if count is None else count
    if total < len(items):
        raise ValueError(f"count {total} is less than the {len(items)} items given")
    closing = [note_line(note)] if note else []
    joined = "\n".join([*items, *closing])
    if (
        total == len(items)
        and (p.inline_items is None or total <= p.inline_items)
        and line_count(joined) <= p.inline_lines
        and utf8_len(joined) <= p.inline_bytes
    ):
        return joined
    singular, plural = noun_forms(noun)
    word = singular if total == 1 else plural
    where = path_text(path)
    room = _overflow_room(p, word=word, where=where, digits=len(str(total)), note=bool(closing))
    shown = []
    for item in items:
        if room.take(utf8_len(item) + 1, item.count("\n") + 1):
            shown.append(item)
    return "\n".join([*shown, *closing, _footer(len(shown), total, word, where)])


class ItemCollector:
    """The items of a stream that ``project_items`` and the transcript's card can show, kept in
    order, with the count of all (see the module docstring); memory bounded by the budgets."""

    def __init__(self, *, profile: str | Profile, path: str | os.PathLike[str], noun: str) -> None:
        self._profile = profile_of(profile)
        self.count = 0
        self._kept: list[str] = []
        # While the whole could still be inline: its bytes (exact) and lines (at least).
        self._inline = True
        self._inline_bytes = -1
        self._inline_lines = 0
        self._first = {"directory": 0, "other": 0}
        plural, where = noun_forms(noun)[1], path_text(path)
        self._rooms = [
            (digits, _overflow_room(self._profile, word=plural, where=where, digits=digits, note=n))
            for digits in range(1, MAX_COUNT_DIGITS + 1)
            for n in (False, True)
        ]

    @property
    def items(self) -> list[str]:
        return list(self._kept)

    def add(self, item: str) -> None:
        self.count += 1
        keep = self.count <= PREVIEW_MAX_ENTRIES
        kind = "directory" if item.endswith("/") else "other"
        if self._first[kind] < PREVIEW_MAX_ENTRIES:
            self._first[kind] += 1
            keep = True
        if self._inline or self._rooms:
            size, lines = utf8_len(item) + 1, item.count("\n") + 1
            keep = self._could_be_inline(size, lines) or keep
            digits = len(str(self.count))
            live = []
            for at, room in self._rooms:
                if at < digits:
                    continue  # the count has more digits now: never this footer
                keep = room.take(size, lines) or keep
                if not room.full:
                    live.append((at, room))
            self._rooms = live
        if keep:
            self._kept.append(item)

    def _could_be_inline(self, size: int, lines: int) -> bool:
        if not self._inline:
            return False
        p = self._profile
        # Joined by "\n", n items hold their own breaks and n - 1 more: at least that many lines.
        self._inline_bytes += size
        self._inline_lines += lines if self.count > 1 else lines - 1
        if (
            (p.inline_items is not None and self.count > p.inline_items)
            or self._inline_lines > p.inline_lines
            or self._inline_bytes > p.inline_bytes
        ):
            self._inline = False
        return True
