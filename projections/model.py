"""The one entry point from which every settled call gets its model content.

Settlement calls ``model_content`` whatever settles the call; the profile strategies live in
``projections/result.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .items import project_items
from .process import project_log_page
from .result import PROFILES, project_process, project_terminal, project_text

TERMINAL_OUTCOMES = frozenset({"denied", "cancelled", "indeterminate"})
_ITEM_NOUNS = {"grep": "matches", "find": "entries", "ls": "entries"}


def item_noun(tool_name: str) -> str:
    """What the items of a tool's result are called (``matches``, ``entries``)."""
    return _ITEM_NOUNS.get(tool_name, "entries")


def model_content(
    *,
    tool_name: str,
    profile: str,
    outcome: str,
    reason: str | None = None,
    resource: str | None = None,
    text: str | None = None,
    items: Sequence[str] | None = None,
    item_count: int | None = None,
    note: str | None = None,
    process: dict[str, Any] | None = None,
    path: str | None = None,
    artifacts: Sequence[dict[str, Any]] = (),
    page: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The model's view of a settled call, as content blocks.

    ``denied``, ``cancelled``, ``indeterminate`` and ``failed`` without a result use the
    terminal outcome text whatever the tool. A process result (``process`` holds the keyword
    arguments of ``project_process`` and ``path`` its ``output.txt``) uses the process contract;
    a log page (``page`` holds the keyword arguments of ``project_log_page``) the same profile
    on the page; item results the item-aware strategy (``item_count``: how many items there are
    in all when ``items`` holds only those an ``ItemCollector`` kept; ``note``: the tool's closing
    note); any other text the tool's profile.
    """
    has_result = text is not None or items is not None or process is not None or page is not None
    if outcome in TERMINAL_OUTCOMES or (outcome == "failed" and not has_result):
        body = project_terminal(
            outcome=outcome, tool_name=tool_name, reason=reason, resource=resource
        )
    elif process is not None:
        body = project_process(path or "", **process)
    elif page is not None:
        body = project_log_page(**page)
    elif items is not None or PROFILES[profile].strategy == "item_aware":
        if items is None:
            items = (text or "").splitlines()
        noun = item_noun(tool_name)
        body = project_items(
            list(items), profile=profile, path=path or "", noun=noun, count=item_count, note=note
        )
    else:
        if PROFILES[profile].strategy == "compact_diagnostic":
            # A process profile without its capture file (e.g. a host reporting a shell
            # result as text): the generic text profile still bounds it and names the path.
            profile = "conservative_fallback"
        body = project_text(text or "", profile=profile, path=path or "", artifacts=artifacts)
    return [{"type": "text", "text": body}]
