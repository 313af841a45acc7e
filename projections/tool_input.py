"""Bounded tool input: a copy of a call's arguments within 4 KiB of JSON, edit bodies and
patches dropped (docs/projections.md, "Bounded input").

Django-free.
"""

from __future__ import annotations

import math
from itertools import islice
from typing import Any

from projections.json_cost import json_cost, json_size, prefix_within
from projections.units import ELLIPSIS

INPUT_MAX_BYTES = 4096

EDIT_TOOL_NAMES = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit", "edit", "write"})
EDIT_BODY_KEYS = frozenset(
    {
        "old_string",
        "new_string",
        "oldString",
        "newString",
        "old_text",
        "new_text",
        "oldText",
        "newText",
        "old_source",
        "new_source",
        "content",
        "contents",
    }
)
PATCH_KEYS = frozenset(
    {
        "patch",
        "patchText",
        "patch_text",
        "diff",
        "diffText",
        "diff_text",
        "unifiedDiff",
        "unified_diff",
    }
)
INPUT_MAX_ENTRIES = 64
INPUT_MAX_DEPTH = 8
INPUT_STRING_LIMITS = (2048, 1024, 512, 256, 128, 64)


_DROP = object()  # marks a non-JSON value or a non-finite number


def _is_edit(tool_name: str | None, kind: str | None) -> bool:
    return kind == "edit" or tool_name in EDIT_TOOL_NAMES


def _body_key(key: object, value: object, edit: bool) -> bool:
    if key in PATCH_KEYS:
        return edit or isinstance(value, str)
    return edit and key in EDIT_BODY_KEYS


def _keep_json(value: Any, level: int, edit: bool) -> Any:
    """Steps 1 and 2 of bounding an input: bodies stripped, JSON only, 64 entries, 8 levels."""
    if value is None or isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _DROP
    if isinstance(value, dict):
        if level > INPUT_MAX_DEPTH:
            return None
        entries = (item for item in value.items() if not _body_key(*item, edit))
        kept = {}
        for key, item in islice(entries, INPUT_MAX_ENTRIES):
            if not isinstance(key, str):  # not a JSON key: dropped like a non-JSON value
                continue
            item = _keep_json(item, level + 1, edit)
            if item is not _DROP:
                kept[key] = item
        return kept
    if isinstance(value, list):
        if level > INPUT_MAX_DEPTH:
            return None
        items = (_keep_json(item, level + 1, edit) for item in value[:INPUT_MAX_ENTRIES])
        return [None if item is _DROP else item for item in items]
    return _DROP


def _cut_string(s: str, limit: int) -> str:
    # A string longer than `limit` code points costs more than `limit`.
    if len(s) <= limit and json_cost(s) <= limit:
        return s
    keep, _ = prefix_within(s, limit - 3)
    return s[:keep] + ELLIPSIS


def _cut_strings(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return _cut_string(value, limit)
    if isinstance(value, dict):
        return {key: _cut_strings(item, limit) for key, item in value.items()}
    if isinstance(value, list):
        return [_cut_strings(item, limit) for item in value]
    return value


def bound_tool_input(value: Any, *, tool_name: str | None, kind: str | None = None) -> Any | None:
    """A copy of ``value`` whose ``json_size`` is at most ``INPUT_MAX_BYTES``, or ``None``.

    Edit bodies and string patches are dropped at any depth, only JSON is kept (64 entries per
    container, 8 levels), and string values are cut to the first limit of 2048, 1024, … 64
    JSON bytes that makes the whole fit. ``None`` means the state says ``inputOmitted: true``;
    it is also the answer for a top-level non-JSON or non-finite value (and for a JSON ``null``
    input, which has nothing to show either). Only ``dict``, ``list``, ``str``, ``int``,
    finite ``float``, ``bool`` and ``None`` are JSON here; a tuple, or an entry whose key is not a
    string, is not.
    """
    kept = _keep_json(value, 1, _is_edit(tool_name, kind))
    if kept is _DROP or kept is None:
        return None
    for limit in INPUT_STRING_LIMITS:
        cut = _cut_strings(kept, limit)
        if json_size(cut) <= INPUT_MAX_BYTES:
            return cut
    return None
