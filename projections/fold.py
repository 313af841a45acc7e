"""``tool.updated``: the field rules of an update and the fold that is the only way state changes.

Django-free (docs/projections.md, "`tool.updated`"; docs/subsystems/activity.md). The same fold runs
on the server and in every client; tests/projections/vectors/fold.json holds the cases a port
must pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from projections.json_cost import json_cost
from projections.tool_output import HEAD, TAIL, TOOL_OUTPUT_MAX_BYTES, append_tool_output
from projections.vocabulary import (
    FINAL_TOOL_STATUSES,
    HOST_TOOL_STATUSES,
    TOOL_KINDS,
    TOOL_STATUSES,
)

# The vocabularies (projections/vocabulary.py) as sets, for the field rules.
KINDS = frozenset(TOOL_KINDS)
STATUSES = frozenset(TOOL_STATUSES)
FINAL_STATUSES = frozenset(FINAL_TOOL_STATUSES)
HOST_STATUSES = frozenset(HOST_TOOL_STATUSES)
FIELDS = frozenset(
    {
        "toolCallId",
        "turnId",
        "rev",
        "toolName",
        "title",
        "kind",
        "status",
        "input",
        "inputOmitted",
        "output",
        "outputDelta",
        "locations",
        "lineChanges",
        "startedAt",
        "finishedAt",
        "interaction",
    }
)
NAME_MAX_CODE_POINTS = 256  # toolName and title
LOCATIONS_MAX = 16
PATH_MAX_CODE_POINTS = 1024
_WHOLE_MAX_BYTES = HEAD + TAIL

# Call states and outcomes (docs/subsystems/lifecycle.md) as statuses: every one of
# vocabulary.CALL_STATES and OUTCOMES (tests/projections/test_vocabulary.py checks it).
_STATUS_OF_STATE = {
    "supervising": "pending",
    "ready": "pending",
    "running": "in_progress",
    "awaiting_approval": "awaiting_approval",
    "awaiting_input": "awaiting_input",
    "completed": "completed",
    "failed": "failed",
    "denied": "declined",
    "cancelled": "cancelled",
    "indeterminate": "indeterminate",
}


class ToolUpdateError(ValueError):
    """A malformed ``tool.updated``: refused whole. ``field`` names the field at fault."""

    def __init__(self, field: str | None, problem: str) -> None:
        self.field = field
        super().__init__(f"{field}: {problem}" if field else problem)


def status_for_state(state: str) -> str:
    """The ``tool.updated`` status of a call state or outcome (``denied`` reads ``declined``).

    Raises ``ValueError`` for a name that is neither.
    """
    try:
        return _STATUS_OF_STATE[state]
    except KeyError:
        raise ValueError(f"unknown call state or outcome: {state!r}") from None


def _is_final(state: Mapping[str, Any]) -> bool:
    status = state.get("status")
    return isinstance(status, str) and status in FINAL_STATUSES


def _is_one_of(value: object, names: frozenset[str]) -> bool:
    return isinstance(value, str) and value in names


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_json(value: object) -> bool:
    """Whether ``value`` is JSON as decoded: dict with str keys, list, str, int, finite float,
    bool, None. Walked without recursion, so any depth is fine."""
    pending = [value]
    while pending:
        item = pending.pop()
        if item is None or isinstance(item, bool | str | int):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return False
        elif isinstance(item, dict):
            if not all(isinstance(key, str) for key in item):
                return False
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        else:
            return False
    return True


def _check_text(update: Mapping[str, Any], field: str, *, max_code_points: int | None) -> None:
    value = update[field]
    if not isinstance(value, str):
        raise ToolUpdateError(field, "must be a string")
    if max_code_points is not None and len(value) > max_code_points:
        raise ToolUpdateError(field, f"must be at most {max_code_points} code points")


def _check_output(value: object) -> None:
    field = "output"
    if not isinstance(value, dict):
        raise ToolUpdateError(field, "must be a bounded output object")
    keys = set(value)
    if keys == {"text"}:
        if not isinstance(value["text"], str):
            raise ToolUpdateError(field, "text must be a string")
        if json_cost(value["text"]) > _WHOLE_MAX_BYTES:
            raise ToolUpdateError(field, f"text must cost at most {_WHOLE_MAX_BYTES} JSON bytes")
        return
    if keys != {"text", "omittedBytes", "tail"}:
        raise ToolUpdateError(field, 'must hold exactly "text", or "text", "omittedBytes", "tail"')
    head, omitted, tail = value["text"], value["omittedBytes"], value["tail"]
    if not isinstance(head, str) or not isinstance(tail, str):
        raise ToolUpdateError(field, "text and tail must be strings")
    if not _is_int(omitted) or omitted <= 0:
        raise ToolUpdateError(field, "omittedBytes must be an integer above 0")
    if json_cost(head) > HEAD:
        raise ToolUpdateError(field, f"text of a cut output must cost at most {HEAD} JSON bytes")
    if json_cost(tail) > TAIL:
        raise ToolUpdateError(field, f"tail must cost at most {TAIL} JSON bytes")


def _check_locations(value: object) -> None:
    field = "locations"
    if not isinstance(value, list) or len(value) > LOCATIONS_MAX:
        raise ToolUpdateError(field, f"must be a list of at most {LOCATIONS_MAX} locations")
    for location in value:
        if not isinstance(location, dict) or "path" not in location:
            raise ToolUpdateError(field, 'each location must be an object with a "path"')
        if not set(location) <= {"path", "line"}:
            raise ToolUpdateError(field, 'a location holds only "path" and "line"')
        path = location["path"]
        if not isinstance(path, str) or not 1 <= len(path) <= PATH_MAX_CODE_POINTS:
            raise ToolUpdateError(
                field, f"path must be a string of 1 to {PATH_MAX_CODE_POINTS} code points"
            )
        if "line" in location and (not _is_int(location["line"]) or location["line"] < 1):
            raise ToolUpdateError(field, "line must be an integer of at least 1")


def _check_line_changes(value: object) -> None:
    field = "lineChanges"
    if not isinstance(value, dict) or set(value) != {"added", "removed"}:
        raise ToolUpdateError(field, 'must be an object with exactly "added" and "removed"')
    for count in value.values():
        if not _is_int(count) or count < 0:
            raise ToolUpdateError(field, "added and removed must be integers of at least 0")


def validate_tool_update(update: object, *, from_host: bool = False) -> None:
    """Refuses a malformed update whole: raises ``ToolUpdateError`` naming the first bad field.

    Enforces every field rule of ``tool.updated``: ``toolCallId`` and ``turnId`` non-empty
    strings (required); ``rev`` an integer ≥ 1, refused from a host; ``toolName`` and ``title``
    strings of ≤ 256 code points; ``kind`` and ``status`` from their enums; ``input`` any JSON;
    ``inputOmitted`` a bool; ``output`` exactly a bounded output within its bounds;
    ``outputDelta`` a string of JSON cost 1…16384, never with ``output``; ``locations`` ≤ 16
    ``{path, line?}``; ``lineChanges`` ``{added, removed}`` ≥ 0; ``startedAt`` and
    ``finishedAt`` strings; ``interaction`` a JSON object or null; no other key.

    ``from_host`` applies the host tool port's rules (docs/subsystems/activity.md): no ``rev``, ``status`` only
    ``pending`` or ``in_progress``, and ``output`` may also be a plain string holding the whole
    raw output so far, which the caller hands to the per-turn tracker (projections/tracker.py).
    """
    if not isinstance(update, dict):
        raise ToolUpdateError(None, "a tool update must be a JSON object")
    for key in update:
        if key not in FIELDS:
            raise ToolUpdateError(str(key), "unknown field")
    if "output" in update and "outputDelta" in update:
        raise ToolUpdateError("outputDelta", "output and outputDelta cannot come together")
    for field in ("toolCallId", "turnId"):
        if field not in update:
            raise ToolUpdateError(field, "is required")
        if not isinstance(update[field], str):
            raise ToolUpdateError(field, "must be a string")
    if "rev" in update:
        if from_host:
            raise ToolUpdateError("rev", "is set by the server, not by a host")
        if not _is_int(update["rev"]) or update["rev"] < 1:
            raise ToolUpdateError("rev", "must be an integer of at least 1")
    for field in ("toolName", "title"):
        if field in update:
            _check_text(update, field, max_code_points=NAME_MAX_CODE_POINTS)
    for field in ("startedAt", "finishedAt"):
        if field in update:
            _check_text(update, field, max_code_points=None)
    if "kind" in update and not _is_one_of(update["kind"], KINDS):
        raise ToolUpdateError("kind", f"must be one of {', '.join(sorted(KINDS))}")
    if "status" in update:
        allowed = HOST_STATUSES if from_host else STATUSES
        if not _is_one_of(update["status"], allowed):
            raise ToolUpdateError("status", f"must be one of {', '.join(sorted(allowed))}")
    if "input" in update and not _is_json(update["input"]):
        raise ToolUpdateError("input", "must be JSON (finite numbers, string keys)")
    if "inputOmitted" in update and not isinstance(update["inputOmitted"], bool):
        raise ToolUpdateError("inputOmitted", "must be a boolean")
    if "output" in update and not (from_host and isinstance(update["output"], str)):
        _check_output(update["output"])
    if "outputDelta" in update:
        delta = update["outputDelta"]
        if not isinstance(delta, str) or not 1 <= json_cost(delta) <= TOOL_OUTPUT_MAX_BYTES:
            raise ToolUpdateError(
                "outputDelta", f"must be a string of JSON cost 1 to {TOOL_OUTPUT_MAX_BYTES}"
            )
    if "locations" in update:
        _check_locations(update["locations"])
    if "lineChanges" in update:
        _check_line_changes(update["lineChanges"])
    if "interaction" in update:
        interaction = update["interaction"]
        if interaction is not None and not (
            isinstance(interaction, dict) and _is_json(interaction)
        ):
            raise ToolUpdateError("interaction", "must be a JSON object or null")


def apply_tool_update(prev: Mapping[str, Any] | None, update: Mapping[str, Any]) -> dict[str, Any]:
    """The state after ``update``: a new dict of exactly the fields received so far.

    ``prev`` (``None`` for an unseen call) is never modified. ``output`` together with
    ``outputDelta`` is refused (``ToolUpdateError``) before anything else; nothing else is
    checked here (``validate_tool_update`` does that at the boundary). An update to a call whose
    status is final changes nothing. Otherwise present fields replace held ones and absent ones
    are kept; ``outputDelta`` is appended to the output with ``append_tool_output`` and never
    held itself; ``startedAt`` is written once; ``finishedAt`` is written once, and only when
    the status after this update is final. No field gets a default.
    """
    if "output" in update and "outputDelta" in update:
        raise ToolUpdateError("outputDelta", "output and outputDelta cannot come together")
    state = dict(prev) if prev is not None else {}
    if _is_final(state):
        return state
    for field, value in update.items():
        if field == "outputDelta":
            state["output"] = append_tool_output(state.get("output"), value)
        elif field in ("startedAt", "finishedAt"):
            continue
        else:
            state[field] = value
    if "startedAt" in update and "startedAt" not in state:
        state["startedAt"] = update["startedAt"]
    if "finishedAt" in update and "finishedAt" not in state and _is_final(state):
        state["finishedAt"] = update["finishedAt"]
    return state


def merge_tool_updates(
    first: Mapping[str, Any], second: Mapping[str, Any], *, max_delta: int = TOOL_OUTPUT_MAX_BYTES
) -> dict[str, Any] | None:
    """One update that folds like ``first`` then ``second`` into any state, or None when their
    ``outputDelta``s joined would cost more than ``max_delta`` JSON bytes.

    ``apply_tool_update(apply_tool_update(s, first), second) == apply_tool_update(s, merged)``
    for every ``s``: a slow reader gets one update instead of two (docs/realtime.md,
    "Backpressure"). The merged update carries ``second``'s ``rev`` (unless ``first`` is
    final: then it is ``first``, as ``second`` could change nothing).
    """
    if _is_final(first):  # the call is final after ``first``: ``second`` changes nothing
        return dict(first)
    merged = {k: v for k, v in first.items() if k not in ("finishedAt", "output", "outputDelta")}
    for field, value in second.items():
        if field == "startedAt" and "startedAt" in first:
            continue  # written once: the first one stands
        if field not in ("output", "outputDelta"):
            merged[field] = value
    if "output" in second:
        merged["output"] = second["output"]
    elif "outputDelta" in second:
        delta = second["outputDelta"]
        if "output" in first:
            merged["output"] = append_tool_output(first["output"], delta)
        elif "outputDelta" in first:
            joined = first["outputDelta"] + delta
            if json_cost(joined) > max_delta:
                return None
            merged["outputDelta"] = joined
        else:
            merged["outputDelta"] = delta
    elif "output" in first:
        merged["output"] = first["output"]
    elif "outputDelta" in first:
        merged["outputDelta"] = first["outputDelta"]
    return merged
