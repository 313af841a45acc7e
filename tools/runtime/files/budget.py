"""How many items one answer of ``grep``, ``find`` or ``ls`` holds.

The item tools stop where more items could not be shown anyway: at the **inline** budget of
their projection profile (``search_matches``: 80 lines, 16,000 bytes; ``file_listing``: 120
items, 120 lines, 12,000 bytes). Their answer therefore always reaches the model unchanged,
and one line is kept for the closing note (``(Stopped at 79 matches …)``), which is then always
seen. The budget is read from the profile table, not copied, so a profile change carries over.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from projections.result import PROFILES
from projections.units import cut_text, utf8_len
from tools.catalog import CORE_TOOLS

# Room kept for the closing note (it never quotes user input beyond a number or two).
NOTE_MAX_BYTES = 400


@dataclass
class ItemBudget:
    """Items taken in order while the whole answer, note included, fits the inline budget."""

    max_items: int
    max_bytes: int
    items: list[str] = field(default_factory=list)
    used_bytes: int = 0

    @classmethod
    def for_tool(cls, tool_name: str) -> ItemBudget:
        profile = PROFILES[CORE_TOOLS[tool_name].profile]
        most = profile.inline_lines
        if profile.inline_items is not None:
            most = min(most, profile.inline_items)
        return cls(max_items=most - 1, max_bytes=profile.inline_bytes - NOTE_MAX_BYTES)

    def add(self, item: str) -> bool:
        """Take ``item`` (one line) if it fits; False when it does not (the answer is full)."""
        cost = utf8_len(item) + (1 if self.items else 0)
        if len(self.items) >= self.max_items or self.used_bytes + cost > self.max_bytes:
            return False
        self.items.append(item)
        self.used_bytes += cost
        return True

    def answer(self, note: str | None) -> list[str]:
        """The items, then the note (cut to ``NOTE_MAX_BYTES`` - 1 bytes) when there is one."""
        if note is None:
            return list(self.items)
        return [*self.items, cut_text(note, NOTE_MAX_BYTES - 1)]
