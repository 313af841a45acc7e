"""Model projection: the text the model sees of a tool result (docs/projections.md).

A result within its profile's inline budget is returned unchanged, without a path; otherwise the
profile's strategy summarises it within the overflow budget and names the absolute path of the
whole. Django-free, no I/O except streaming the one file ``project_process`` is handed.

Process results follow the process contract in ``projections/process.py``;
``project_process`` and its public constants (``CHUNK_BYTES``, ``LINE_KEEP_BYTES``, …) are
re-exported here. The re-exported constants are copies: to change the streaming pass (a test's
chunk size), patch ``projections.process``.

Counting and rules resolved where the contract leaves room:

* Lines follow docs/architecture.md ("Conventions"): ``k`` newlines make ``k`` lines when the text ends with ``\\n``,
  else ``k + 1``; the empty text has 0 lines; a lone ``\\r`` is no break. When a line-based
  strategy shows lines it drops the ``\\r`` of a ``\\r\\n`` break (it belongs to the break, not to
  the line) and joins the shown lines with ``\\n``.
* Byte budgets count UTF-8 bytes of the whole returned text, footer, index and newlines included
  (a lone surrogate counts 3). Every overflow result respects the overflow lines and bytes as a
  whole: the footer line (and the artifact index) is reserved first, shown lines fill the rest.
* ``head`` / ``tail`` / ``continuation_aware``: when not even one whole line fits, the first
  (``tail``: last) line is shown cut to the room, ending (``tail``: starting) with ``…``, and
  counted as shown. ``source_text`` results whose lines are not all ``N\\ttext`` (``ask_user``)
  use ``head``. A numbered ``read`` result ends with the Range line only, no path: the rest is
  read from the same file by offset. ``T`` is taken from the tool's own Range line when present,
  else from the last line number (the tool returned the file's end).
* ``conservative_fallback``: the artifact index follows the footer; only the overflow projection
  carries it (an inline result is unchanged). It takes at most half the budget; artifacts beyond
  it are counted in a ``- N more artifacts not listed.`` line. ``SIZE`` is ``size_words`` of an
  integer size, other values printed as given.
* ``project_items`` (``projections/items.py``, re-exported here with the profile table of
  ``projections/profiles.py``): the footer is reserved at its widest (``D`` and ``O`` written
  with as many digits as ``N``); a tool's closing note is shown before it. Each item costs its
  own lines (``count("\\n") + 1``) and bytes plus one separator.
* ``project_terminal``: the tool name keeps ≤ 256 bytes of its first line and the resource ≤ 8
  lines and 1,000 bytes (head kept, ``…`` appended); the reason (trailing newlines stripped) gets
  the rest of the 40 lines / 4,000 bytes and, being usually an error message whose end matters
  most, keeps its last lines and bytes behind a leading ``…`` (the profile's ``tail``). An
  empty reason counts as none (the default; ``failed`` then raises ``ValueError``).
* ``project_text`` serves the line-based profiles; item and process profiles raise
  ``ValueError`` (use ``project_items`` / ``project_process``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from projections.items import project_items  # re-exported, as the process contract is
from projections.process import (  # re-exported: result.py is the model projection's one entry
    CHUNK_BYTES,
    DIAGNOSTIC_LINES,
    ENTRY_MAX_BYTES,
    ENTRY_MIN_BYTES,
    HEAD_LINES,
    LINE_KEEP_BYTES,
    PROCESS_INLINE_BYTES,
    PROCESS_INLINE_LINES,
    SUMMARY_MAX_BYTES,
    TAIL_LINES,
    project_process,
)
from projections.profiles import PROFILES, Profile, profile_of
from projections.units import (
    ELLIPSIS,
    clean_text,
    line_count,
    path_text,
    size_words,
    utf8_len,
    utf8_prefix,
)

__all__ = [
    "CHUNK_BYTES",
    "DIAGNOSTIC_LINES",
    "ENTRY_MAX_BYTES",
    "ENTRY_MIN_BYTES",
    "HEAD_LINES",
    "LINE_KEEP_BYTES",
    "PROCESS_INLINE_BYTES",
    "PROCESS_INLINE_LINES",
    "PROFILES",
    "Profile",
    "SUMMARY_MAX_BYTES",
    "TAIL_LINES",
    "project_items",
    "project_process",
    "project_terminal",
    "project_text",
]


# --- text helpers -----------------------------------------------------------------------------


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _lines(text: str) -> list[str]:
    """The README lines of ``text``, each without the ``\\r`` of a ``\\r\\n`` break."""
    if not text:
        return []
    parts = text.split("\n")
    if text.endswith("\n"):
        parts.pop()
    last = len(parts) - 1
    for i, part in enumerate(parts):
        if part.endswith("\r") and (i < last or text.endswith("\n")):
            parts[i] = part[:-1]
    return parts


def _suffix(data: bytes, limit: int) -> bytes:
    """Longest suffix of UTF-8 ``data`` of at most ``limit`` bytes that splits no code point."""
    if len(data) <= limit:
        return data
    cut = len(data) - max(limit, 0)
    while cut < len(data) and data[cut] & 0xC0 == 0x80:
        cut += 1
    return data[cut:]


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogatepass")


def _cut_head(text: str, *, max_lines: int, max_bytes: int) -> str:
    """``text`` within ``max_lines`` / ``max_bytes``, keeping its start and ending with ``…``."""
    if line_count(text) <= max_lines and utf8_len(text) <= max_bytes:
        return text
    kept = "\n".join(text.split("\n")[: max(max_lines, 1)])
    return _decode(utf8_prefix(_utf8(kept), max_bytes - 3)) + ELLIPSIS


def _cut_tail(text: str, *, max_lines: int, max_bytes: int) -> str:
    """``text`` within ``max_lines`` / ``max_bytes``, keeping its end behind a leading ``…``."""
    if line_count(text) <= max_lines and utf8_len(text) <= max_bytes:
        return text
    kept = "\n".join(text.split("\n")[-max(max_lines, 1) :])
    return ELLIPSIS + _decode(_suffix(_utf8(kept), max_bytes - 3))


# --- terminal outcomes ------------------------------------------------------------------------

_TERMINAL = {
    # outcome: (headline, default reason, next action)
    "denied": (
        "Tool call denied.",
        "Denied by permission policy.",
        "Do not retry this call as is; ask the user or take another approach.",
    ),
    "cancelled": ("Tool call cancelled.", "Cancelled.", "Continue only if the user asks for it."),
    "indeterminate": (
        "Tool call outcome unknown: it was stopped while running and its effect could not be "
        "confirmed.",
        "Stopped; the external effect could not be confirmed.",
        "Check the current state before retrying.",
    ),
    "failed": (
        "Tool call failed.",
        None,
        "Fix the cause, then retry if it still makes sense.",
    ),
}
TOOL_NAME_MAX_BYTES = 256
RESOURCE_MAX_LINES = 8
RESOURCE_MAX_BYTES = 1_000


def project_terminal(
    *, outcome: str, tool_name: str, reason: str | None = None, resource: str | None = None
) -> str:
    """The ``terminal_outcome`` text of a settled outcome, within 40 lines and 4,000 bytes.

    ``outcome`` is ``denied``, ``cancelled``, ``indeterminate`` or ``failed``; ``reason``
    defaults per that table (``failed`` requires the error message; a user denial passes
    ``"Approval denied."``); ``resource`` (the command, or the path) is left out when ``None``.
    """
    if outcome not in _TERMINAL:
        raise ValueError(f"not a terminal outcome: {outcome!r}")
    headline, default_reason, next_action = _TERMINAL[outcome]
    reason = (reason or "").rstrip("\r\n") or default_reason
    if not reason:
        raise ValueError(f"a {outcome} outcome needs a reason (the error message)")
    profile = PROFILES["terminal_outcome"]
    name = _cut_head(clean_text(tool_name), max_lines=1, max_bytes=TOOL_NAME_MAX_BYTES)
    lines = [headline, f"Tool: {name}"]
    if resource:
        cut = _cut_head(
            clean_text(resource), max_lines=RESOURCE_MAX_LINES, max_bytes=RESOURCE_MAX_BYTES
        )
        lines.append(f"Resource: {cut}")
    lines.append(f"Next action: {next_action}")
    others = "\n".join(lines)
    reason = _cut_tail(
        clean_text(reason),
        max_lines=profile.overflow_lines - line_count(others),
        max_bytes=profile.overflow_bytes - utf8_len(others) - len("\nReason: "),
    )
    lines.insert(2, f"Reason: {reason}")
    return "\n".join(lines)


# --- plain text: head, tail, continuation_aware -----------------------------------------------

_NUMBERED = re.compile(r"(\d+)\t")
_RANGE = re.compile(r"Range: lines (\d+)-(\d+) of (\d+)\. Continue with offset=(\d+)\.")
ARTIFACT_INDEX_SHARE = 2  # the index takes at most 1/2 of the overflow budget


def project_text(
    text: str,
    *,
    profile: str | Profile,
    path: str | os.PathLike[str],
    artifacts: Iterable[Mapping[str, Any]] = (),
) -> str:
    """The model text of a plain-text result under a line-based profile.

    Unchanged when within the inline lines and bytes; otherwise ``head`` / ``tail`` (with
    ``Showing lines S-E of T. Full result: PATH.``), ``continuation_aware`` (``source_text``) or
    ``head`` plus the artifact index (``conservative_fallback`` with ``artifacts``: dicts of
    ``label``, ``kind``, ``size``, ``path``), the whole within the overflow lines and bytes.
    ``path`` is absolute: ``result.json`` of the attempt, or the ``report`` asset's file for
    ``delegated_reports``.
    Item and process profiles raise ``ValueError``: use ``project_items`` / ``project_process``.
    """
    p = profile_of(profile)
    if p.strategy not in ("head", "tail", "continuation_aware"):
        raise ValueError(f"profile {p.name!r} is not line-based ({p.strategy})")
    if line_count(text) <= p.inline_lines and utf8_len(text) <= p.inline_bytes:
        return text
    if p.strategy == "continuation_aware":
        numbered = _numbered_lines(text)
        if numbered is not None:
            return _continuation(*numbered, p)
    index = _artifact_index(list(artifacts), p) if p.artifact_index else []
    return _lines_window(
        _lines(text), p, path_text(path), from_end=p.strategy == "tail", trailer=index
    )


def _lines_window(
    lines: list[str], p: Profile, path: str, *, from_end: bool, trailer: list[str]
) -> str:
    total = len(lines)

    def footer(shown: int) -> str:
        first, last = (total - shown + 1, total) if from_end else (1, shown)
        return f"Showing lines {first}-{last} of {total}. Full result: {path}."

    room_lines = p.overflow_lines - 1 - len(trailer)
    room_bytes = p.overflow_bytes - sum(utf8_len(t) + 1 for t in trailer)
    shown: list[str] = []
    used = 0
    for line in reversed(lines) if from_end else lines:
        cost = used + utf8_len(line) + 1
        if len(shown) + 1 > room_lines or cost + utf8_len(footer(len(shown) + 1)) > room_bytes:
            break
        shown.append(line)
        used = cost
    if not shown and lines and room_lines >= 1:
        room = room_bytes - utf8_len(footer(1)) - 1
        if room >= 4:  # room for at least one byte and "…"
            line = lines[-1] if from_end else lines[0]
            data = _utf8(line)
            cut = (
                ELLIPSIS + _decode(_suffix(data, room - 3))
                if from_end
                else _decode(utf8_prefix(data, room - 3)) + ELLIPSIS
            )
            shown.append(cut)
    if from_end:
        shown.reverse()
    return "\n".join([*shown, footer(len(shown)), *trailer])


def _numbered_lines(text: str) -> tuple[list[tuple[int, str]], int] | None:
    """The ``N\\ttext`` lines of a ``read`` result and the file's line count, or None."""
    lines = _lines(text)
    total = None
    if lines and (m := _RANGE.fullmatch(lines[-1])):
        total = int(m.group(3))
        lines.pop()
    numbered = []
    for line in lines:
        m = _NUMBERED.match(line)
        if m is None:
            return None
        numbered.append((int(m.group(1)), line))
    if not numbered:
        return None
    return numbered, max(total or 0, numbered[-1][0])


def _continuation(numbered: list[tuple[int, str]], total: int, p: Profile) -> str:
    start = numbered[0][0]

    def range_line(last: int) -> str:
        if last >= total:
            return ""
        return f"Range: lines {start}-{last} of {total}. Continue with offset={last + 1}."

    def cost(text: str) -> int:
        return utf8_len(text) + 1 if text else 0

    shown: list[str] = []
    used = 0
    for number, line in numbered:
        more = used + utf8_len(line) + 1
        closing = range_line(number)
        if len(shown) + 1 + (1 if closing else 0) > p.overflow_lines:
            break
        if more + cost(closing) - 1 > p.overflow_bytes:
            break
        shown.append(line)
        used = more
    last = numbered[len(shown) - 1][0] if shown else start
    if not shown:
        room = p.overflow_bytes - cost(range_line(start))
        shown.append(_decode(utf8_prefix(_utf8(numbered[0][1]), max(room - 3, 0))) + ELLIPSIS)
    closing = range_line(last)
    return "\n".join([*shown, closing] if closing else shown)


def _artifact_index(artifacts: list[Mapping[str, Any]], p: Profile) -> list[str]:
    """``Artifacts:``, one line per file, the advice line; ≤ half the overflow budget."""
    if not artifacts:
        return []
    opening, closing = "Artifacts:", "Inspect them with read or grep; do not rerun the tool."
    room_lines = p.overflow_lines // ARTIFACT_INDEX_SHARE - 2
    room_bytes = (
        p.overflow_bytes // ARTIFACT_INDEX_SHARE - utf8_len(opening) - utf8_len(closing) - 2
    )
    listed: list[str] = []
    for i, a in enumerate(artifacts):
        size = a.get("size")
        words = size_words(size) if isinstance(size, int) else str(size)
        line = clean_text(f"- {a.get('label')} ({a.get('kind')}, {words}): {a.get('path')}")
        left = len(artifacts) - i - 1
        more = f"- {left} more artifact{'s' if left != 1 else ''} not listed." if left else ""
        need = utf8_len(line) + 1 + (utf8_len(more) + 1 if more else 0)
        if len(listed) + 1 + (1 if more else 0) > room_lines or need > room_bytes:
            unlisted = len(artifacts) - i
            listed.append(f"- {unlisted} more artifact{'s' if unlisted != 1 else ''} not listed.")
            break
        listed.append(line)
        room_bytes -= utf8_len(line) + 1
    return [opening, *listed, closing]
