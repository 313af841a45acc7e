"""The result profiles of the model projection: each tool's inline and overflow budgets and its
strategy (docs/projections.md). ``projections/result.py`` re-exports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class Profile:
    """A result policy of the table in docs/projections.md: inline budget, overflow budget and strategy.

    ``inline_items`` / ``overflow_items`` are ``None`` where the table says "–".
    ``artifact_index`` marks ``conservative_fallback``, whose ``head`` adds the artifact index.
    """

    name: str
    inline_lines: int
    inline_bytes: int
    inline_items: int | None
    overflow_lines: int
    overflow_bytes: int
    overflow_items: int | None
    strategy: str
    artifact_index: bool = False


PROFILES: Mapping[str, Profile] = MappingProxyType(
    {
        p.name: p
        for p in (
            Profile("process_diagnostics", 84, 12_000, None, 16, 4_000, None, "compact_diagnostic"),
            Profile("source_text", 202, 24_000, None, 202, 24_000, None, "continuation_aware"),
            Profile("search_matches", 80, 16_000, None, 80, 16_000, None, "item_aware"),
            Profile("file_listing", 120, 12_000, 120, 120, 12_000, 120, "item_aware"),
            Profile("mutation_acknowledgement", 40, 4_000, None, 40, 4_000, None, "head"),
            Profile("terminal_outcome", 40, 4_000, None, 40, 4_000, None, "tail"),
            Profile("delegated_reports", 60, 6_000, None, 12, 3_000, None, "head"),
            Profile("conservative_fallback", 200, 24_000, None, 200, 24_000, None, "head", True),
        )
    }
)


def profile_of(profile: str | Profile) -> Profile:
    """The profile named ``profile`` (or ``profile`` itself); ``ValueError`` when unknown."""
    if isinstance(profile, Profile):
        return profile
    try:
        return PROFILES[profile]
    except KeyError:
        raise ValueError(f"unknown result profile {profile!r}") from None
