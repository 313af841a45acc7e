"""Transcript projection: the few lines a tool card shows (docs/projections.md).

``project_transcript`` returns exactly::

    {"argsPreview": [str, ...], "resultPreview": [str, ...],
     "previewOverflow": {"hidden": int, "noun": "line" | "item",
                         "direction": "head" | "tail"} | None}

Rules (the contract's, plus the choices it leaves open, marked *choice*):

- At most 6 entries per preview. ``argsPreview`` is, for ``bash``, the first lines of
  ``arguments["command"]``; for any other tool (or a ``bash`` call without a string command) one
  entry per top-level argument in key order, ``key: <compact JSON of the value>``
  (``json.dumps(v, ensure_ascii=False, separators=(",", ":"))``). *Choice:* ``arguments`` that
  are not an object show as one entry, their compact JSON; ``None`` shows nothing.
- Secret keys (lower-cased, ``-`` read as ``_``, equal to a listed name or ending with ``_`` plus
  one) are dropped. *Choice:* at any depth of an argument's value too, not only at the top level,
  so ``headers: {"Authorization": …}`` never shows the header.
- URLs with credentials show ``scheme://***@host…``: everything between ``://`` and the last ``@``
  of the authority (which ends at whitespace, ``/``, ``?``, ``#``, ``"``, ``<`` or ``>``) becomes
  ``***``. *Choice:* this applies to argument values (and keys), command lines and result
  entries alike, and also to a user part without ``:`` (``https://TOKEN@host`` is a credential
  too). Masking happens before any cut, so a cut never reveals part of a credential.
- Lines follow docs/architecture.md ("Conventions"): ``\\r\\n`` is one break; a lone ``\\r`` is not a break and stays in
  its line. *Choice:* a ``\\r`` at the very end of the text (no ``\\n`` after it) is therefore kept.
- ``resultPreview``: ``bash`` shows the last lines of ``result_text`` (``direction: tail``);
  ``read`` and other tools the first lines of ``result_text`` (the rendered result);
  ``grep``/``find``/``ls`` the first of ``result_items`` (or, *choice*, the lines of
  ``result_text`` as items when no items are given), ``ls`` directories first (stable).
  ``directories`` is a collection of the items that are directories; *choice:* without it an
  ``ls`` item ending in ``/`` counts as a directory. A non-string item is shown as its compact
  JSON; another tool given only ``result_items`` shows them as its lines.
- Budget: both previews share 8,192 UTF-8 bytes, the arguments at most 2,048 of them (so the
  result preview gets 8,192 minus what the arguments used). Entries are added in order; one that
  would pass the room left keeps its longest prefix of ≤ room − 3 bytes (never splitting a code
  point) plus ``…``, and no entry follows it. *Choices:* a cut ends only its own preview (a long
  argument must not hide the result); when fewer than 3 bytes are left the entry is not shown at
  all; for ``bash`` the entries are added from the last line backwards (the last lines are the
  point of a tail) and shown in output order.
- ``previewOverflow.hidden`` counts the lines or items of the result that have no entry:
  those beyond the 6-entry cap and those dropped by the byte budget. *Choice:* an entry cut with
  ``…`` is shown (its cut is marked by the ``…``) and is not counted. ``None`` when nothing is
  hidden. The argument preview has no overflow marker (the arguments are on the call itself).
- Entries pass ``clean_text`` (no lone surrogate or U+0000 on the wire).

Work is linear in the size of the result, in C-speed passes: line counts use ``str.count``, the
first lines are found with ``str.find`` and the last with ``str.rfind`` (a huge ``bash`` output is
read from its end), and only a bounded prefix of a shown line is copied (an ``ls`` result given
as text is split whole: listings are small).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from projections.json_cost import utf8_size
from projections.units import ELLIPSIS, clean_text

PREVIEW_MAX_ENTRIES = 6
PREVIEW_BUDGET_BYTES = 8192
ARGS_BUDGET_BYTES = 2048
ELLIPSIS_BYTES = len(ELLIPSIS.encode())

ITEM_TOOLS = frozenset({"grep", "find", "ls"})
SECRET_NAMES = frozenset(
    {
        "password",
        "passwd",
        "secret",
        "token",
        "api_key",
        "apikey",
        "authorization",
        "cookie",
        "credential",
        "credentials",
        "private_key",
    }
)
_SECRET_SUFFIXES = tuple("_" + name for name in SECRET_NAMES)

# No entry can keep more code points than the whole budget has bytes; one more tells "too long".
_ENTRY_MAX_CHARS = PREVIEW_BUDGET_BYTES + 1
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_AUTHORITY = re.compile(r'[^\s/?#"<>]*')


def project_transcript(
    *,
    tool_name: str,
    arguments: Any,
    result_text: str | None = None,
    result_items: Iterable[Any] | None = None,
    directories: Collection[str] | None = None,
    result_lines: int | None = None,
    result_count: int | None = None,
) -> dict[str, Any]:
    """The tool card's previews: ≤ 6 entries each, ≤ 8,192 bytes together, secrets masked.

    ``result_lines``: for ``bash``, the line count of the whole output when ``result_text`` is
    only its last lines (``output_tail``). ``result_count``: the number of items of the result
    when ``result_items`` holds only some of them, in order (those an ``ItemCollector`` kept:
    the first ones, and the first directories and first other entries)."""
    args_preview, used = _fit_entries(_argument_entries(tool_name, arguments), ARGS_BUDGET_BYTES)
    room = PREVIEW_BUDGET_BYTES - used

    noun = "item" if tool_name in ITEM_TOOLS else "line"
    direction = "tail" if tool_name == "bash" else "head"
    if tool_name == "bash":
        text = result_text or ""
        total = count_lines(text) if result_lines is None else result_lines
        backwards = (_span_entry(text, s, e) for s, e in _last_line_spans(text))
        shown, _ = _fit_entries(backwards, room)
        result_preview = shown[::-1]
    else:
        if tool_name == "ls" and result_items is None and result_text is not None:
            result_items = split_lines(result_text)  # so directories still come first
        if result_items is not None and (tool_name in ITEM_TOOLS or result_text is None):
            items = list(result_items)
            if tool_name == "ls":
                items = _directories_first(items, directories)
            total = len(items) if result_count is None else max(result_count, len(items))
            candidates = (_item_entry(item) for item in items[:PREVIEW_MAX_ENTRIES])
        else:
            text = result_text or ""
            total = count_lines(text)
            candidates = (_span_entry(text, s, e) for s, e in _first_line_spans(text))
        result_preview, _ = _fit_entries(candidates, room)

    hidden = total - len(result_preview)
    overflow = {"hidden": hidden, "noun": noun, "direction": direction} if hidden > 0 else None
    return {
        "argsPreview": args_preview,
        "resultPreview": result_preview,
        "previewOverflow": overflow,
    }


def is_secret_key(key: str) -> bool:
    """Whether an argument key names a secret (``github_token`` yes, ``max_tokens`` no)."""
    name = key.lower().replace("-", "_")
    return name in SECRET_NAMES or name.endswith(_SECRET_SUFFIXES)


def mask_url_credentials(text: str) -> str:
    """``text`` with every ``scheme://user:pass@host`` shown as ``scheme://***@host``."""
    return _masked_prefix(text, 0, len(text), None)


# A line of a file's tail is kept up to this many bytes: far more than any entry shows, so a
# credential in a URL that starts within the shown part is still seen whole and masked.
TAIL_LINE_KEEP_BYTES = 64 * 1024
_CHUNK_BYTES = 1 << 20


def output_tail(path: str | os.PathLike[str]) -> tuple[str, int]:
    """``(text, lines)`` for a ``bash`` preview of the output file at ``path``, in memory
    bounded whatever its size: ``text`` holds its last ``PREVIEW_MAX_ENTRIES`` lines, each cut to
    its first ``TAIL_LINE_KEEP_BYTES`` (decoded as UTF-8, invalid bytes replaced), and ends with
    a break when the file does; ``lines`` counts all of the file's lines by the same rule as
    ``count_lines``. ``project_transcript(result_text=text, result_lines=lines)`` then gives
    the preview of the whole output."""
    with open(path, "rb") as file:
        breaks, size, last = 0, 0, b""
        while chunk := file.read(_CHUNK_BYTES):
            breaks += chunk.count(b"\n")
            size += len(chunk)
            last = chunk[-1:]
        if size == 0:
            return "", 0
        ends_with_break = last == b"\n"
        lines = breaks if ends_with_break else breaks + 1
        # The starts of the last lines, found reading backwards from before the final break.
        end = size - 1 if ends_with_break else size
        starts: list[int] = []
        position = end
        while position > 0 and len(starts) < PREVIEW_MAX_ENTRIES:
            begin = max(0, position - _CHUNK_BYTES)
            file.seek(begin)
            chunk = file.read(position - begin)
            found = chunk.rfind(b"\n")
            while found >= 0 and len(starts) < PREVIEW_MAX_ENTRIES:
                starts.append(begin + found + 1)
                found = chunk.rfind(b"\n", 0, found)
            position = begin
        if len(starts) < PREVIEW_MAX_ENTRIES and position == 0:
            starts.append(0)
        starts = sorted(set(starts))[-PREVIEW_MAX_ENTRIES:]
        kept = []
        for index, start in enumerate(starts):
            stop = starts[index + 1] - 1 if index + 1 < len(starts) else end
            file.seek(start)
            kept.append(file.read(min(stop - start, TAIL_LINE_KEEP_BYTES)))
    text = b"\n".join(kept).decode("utf-8", "replace")
    return (text + "\n" if ends_with_break else text), lines


def count_lines(text: str) -> int:
    """Lines by the README rule: k ``\\n`` make k lines when the text ends with one, else k + 1."""
    if not text:
        return 0
    breaks = text.count("\n")
    return breaks if text.endswith("\n") else breaks + 1


def split_lines(text: str) -> list[str]:
    """All lines of ``text`` by the README rule (``\\r\\n`` one break, a lone ``\\r`` kept)."""
    return [text[s:e] for s, e in _first_line_spans(text, limit=None)]


# --- entries -------------------------------------------------------------------------------


def _fit_entries(entries: Iterable[str], room: int) -> tuple[list[str], int]:
    """Add ``entries`` (≤ 6) while they fit ``room`` bytes; the first that does not is cut.
    The entries shown, and the bytes they take (each entry is sized once)."""
    shown: list[str] = []
    used = 0
    for entry in entries:
        if len(shown) == PREVIEW_MAX_ENTRIES:
            break
        size = utf8_size(entry)
        if used + size <= room:
            shown.append(entry)
            used += size
            continue
        if room - used >= ELLIPSIS_BYTES:
            cut = _utf8_prefix(entry, room - used - ELLIPSIS_BYTES)
            shown.append(cut + ELLIPSIS)
            used += len(cut.encode("utf-8")) + ELLIPSIS_BYTES
        break
    return shown, used


def _utf8_prefix(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 size is ≤ ``max_bytes`` (whole code points)."""
    return text.encode("utf-8")[:max_bytes].decode("utf-8", "ignore")


def _argument_entries(tool_name: str, arguments: Any) -> list[str]:
    if tool_name == "bash" and isinstance(arguments, dict):
        command = arguments.get("command")
        if isinstance(command, str):
            return [_span_entry(command, s, e) for s, e in _first_line_spans(command)]
    if arguments is None:
        return []
    if not isinstance(arguments, dict):
        return [_bounded(_compact_json(_mask_value(arguments)))]
    entries: list[str] = []
    for key, value in arguments.items():
        if is_secret_key(str(key)):
            continue
        entries.append(
            _bounded(f"{mask_url_credentials(str(key))}: {_compact_json(_mask_value(value))}")
        )
        if len(entries) == PREVIEW_MAX_ENTRIES:
            break
    return entries


def _item_entry(item: Any) -> str:
    if isinstance(item, str):
        return _span_entry(item, 0, len(item))
    return _bounded(_compact_json(_mask_value(item)))


def _span_entry(text: str, start: int, end: int) -> str:
    """The entry for ``text[start:end]``: credentials masked, at most ``_ENTRY_MAX_CHARS`` long."""
    return clean_text(_masked_prefix(text, start, end, _ENTRY_MAX_CHARS))


def _bounded(entry: str) -> str:
    return clean_text(entry[:_ENTRY_MAX_CHARS])


def _compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _mask_value(value: Any) -> Any:
    """A copy of an argument value with secret keys dropped and URL credentials masked."""
    if isinstance(value, str):
        return mask_url_credentials(value)
    if isinstance(value, dict):
        return {
            mask_url_credentials(str(k)): _mask_value(v)
            for k, v in value.items()
            if not is_secret_key(str(k))
        }
    if isinstance(value, list | tuple):
        return [_mask_value(v) for v in value]
    return value


def _masked_prefix(text: str, start: int, end: int, max_chars: int | None) -> str:
    """``text[start:end]`` with credentials masked, stopped once ``max_chars`` are produced.

    Masking comes first, so whatever prefix is produced shows no part of a credential. Each
    character is scanned a bounded number of times: ``://`` is found with ``str.find``, and an
    authority holds no ``/``, so the next ``://`` starts at its last character at the earliest.
    """
    parts: list[str] = []
    produced = 0

    def take(a: int, b: int) -> None:
        nonlocal produced
        if max_chars is not None:
            b = max(a, min(b, a + max_chars - produced))
        parts.append(text[a:b])
        produced += b - a

    pos = start
    while max_chars is None or produced < max_chars:
        window_end = end if max_chars is None else min(end, pos + (max_chars - produced) + 3)
        hit = text.find("://", pos, window_end)
        if hit < 0:
            break
        host = hit + 3
        authority_end = _AUTHORITY.match(text, host, end).end()
        at = text.rfind("@", host, authority_end)
        take(pos, host)
        if at < 0 or hit == start or text[hit - 1] not in _SCHEME_CHARS:
            pos = host
        else:
            parts.append("***")
            produced += 3
            pos = at
    take(pos, end)
    masked = "".join(parts)
    return masked if max_chars is None else masked[:max_chars]


# --- lines and items -----------------------------------------------------------------------


def _line_end(text: str, start: int, newline: int) -> int:
    """End of the line whose break is the ``\\n`` at ``newline``: a ``\\r`` before it is no part."""
    if newline > start and text[newline - 1] == "\r":
        return newline - 1
    return newline


def _first_line_spans(text: str, limit: int | None = PREVIEW_MAX_ENTRIES) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    pos = 0
    while pos < len(text) and (limit is None or len(spans) < limit):
        newline = text.find("\n", pos)
        if newline < 0:
            spans.append((pos, len(text)))
            break
        spans.append((pos, _line_end(text, pos, newline)))
        pos = newline + 1
    return spans


def _last_line_spans(text: str) -> list[tuple[int, int]]:
    """Spans of the last lines, the last one first, found from the end of the text."""
    spans: list[tuple[int, int]] = []
    if not text:
        return spans
    # ``stop`` is the index just past the current line's break (or the text's end).
    stop = len(text)
    newline = stop - 1 if text.endswith("\n") else -1
    while stop > 0 and len(spans) < PREVIEW_MAX_ENTRIES:
        search_end = newline if newline >= 0 else stop
        previous = text.rfind("\n", 0, search_end)
        line_start = previous + 1
        line_end = _line_end(text, line_start, newline) if newline >= 0 else stop
        spans.append((line_start, line_end))
        stop = line_start
        newline = previous
    return spans


def _directories_first(items: Sequence[Any], directories: Collection[str] | None) -> list[Any]:
    if directories is None:
        is_dir = [isinstance(item, str) and item.endswith("/") for item in items]
    else:
        is_dir = [isinstance(item, str) and item in directories for item in items]
    return [item for item, d in zip(items, is_dir, strict=True) if d] + [
        item for item, d in zip(items, is_dir, strict=True) if not d
    ]
