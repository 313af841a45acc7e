"""Shared units of the projections: size words and text entering the server.

Django-free: see docs/architecture.md.
"""

from __future__ import annotations

import os
import re
from decimal import ROUND_HALF_UP, Decimal

KIB = 1024
MIB = 1024 * 1024
ELLIPSIS = "\u2026"  # 3 UTF-8 bytes
# Reasons and messages built from user input (supervision reasons, error messages) stay small.
REASON_MAX_BYTES = 1024

_TENTH = Decimal("0.1")
# A lone surrogate (U+D800..U+DFFF) or U+0000: neither may be stored or sent.
_UNSAFE = re.compile("[\ud800-\udfff\x00]")


def size_words(n: int) -> str:
    """Human size of ``n`` bytes: ``1 byte``, ``N bytes``, ``X.Y KiB`` or ``X.Y MiB``.

    One decimal, rounded half up; the unit is chosen before rounding, so 1,048,575 bytes
    reads ``1024.0 KiB``.
    """
    if n == 1:
        return "1 byte"
    if n < KIB:
        return f"{n} bytes"
    if n < MIB:
        value, unit = Decimal(n) / KIB, "KiB"
    else:
        value, unit = Decimal(n) / MIB, "MiB"
    return f"{value.quantize(_TENTH, rounding=ROUND_HALF_UP)} {unit}"


def clean_text(text: str) -> str:
    """``text`` with lone surrogates and U+0000 replaced by U+FFFD (docs/architecture.md, "Conventions")."""
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub("\ufffd", text)


def clean_json(value: object) -> object:
    """A copy of a decoded JSON value whose strings (keys included) pass ``clean_text``."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(k): clean_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean_json(v) for v in value]
    return value


def utf8_len(text: str) -> int:
    """UTF-8 size of ``text`` (a lone surrogate counts 3, as ``surrogatepass`` writes it)."""
    return len(text.encode("utf-8", "surrogatepass"))


def line_count(text: str) -> int:
    """Lines by the README rule: k ``\\n`` make k lines when the text ends with one, else k + 1."""
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def utf8_prefix(data: bytes, limit: int) -> bytes:
    """Longest prefix of UTF-8 ``data`` of at most ``limit`` bytes that splits no code point."""
    if len(data) <= limit:
        return data
    cut = max(limit, 0)
    while cut > 0 and data[cut] & 0xC0 == 0x80:
        cut -= 1
    return data[:cut]


def cut_text(text: str, max_bytes: int = REASON_MAX_BYTES) -> str:
    """``text`` when its UTF-8 fits ``max_bytes``, else its longest prefix that splits no code
    point followed by ``…``, the whole within ``max_bytes``."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return text
    keep = utf8_prefix(data, max_bytes - len(ELLIPSIS.encode()))
    return keep.decode("utf-8", "surrogatepass") + ELLIPSIS


def path_text(path: str | os.PathLike[str]) -> str:
    """A file path as text that may be stored and sent."""
    return clean_text(os.fsdecode(path))
