"""How a person reads a time or a duration, on the pages and in the admin alike (docs/web.md,
"Times").

A time reads in UTC with seconds and the zone, ``2026-11-30 18:04:05 UTC``, the same string for
everyone whatever their zone, so a team in several zones can quote it to each other and find it
in the logs and on the wire. ``when_html`` wraps it in a ``<time>`` whose ``datetime`` is the
wire's form (``2026-11-30T18:04:05.000Z``); the pages' script (``static/toolcore/common.js``,
which does the same for the times it draws) gives each one a ``title`` with the reader's local
time and zone, shown on hover.

A duration reads ``23 ms`` under a second, ``4.2 s`` under ten, then ``42 s``, ``3 min 12 s``,
``2 h 5 min``, ``3 d 4 h``: ``Toolcore.duration`` in common.js follows the same rules (tested
against this one).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils.dateparse import parse_datetime
from django.utils.html import format_html
from django.utils.safestring import SafeString

from .shapes import iso

DASH = "—"


def as_datetime(value: Any) -> datetime | None:
    """A datetime from a datetime or an ISO 8601 text (the wire's ``startedAt``), else None.
    A naive one is taken as UTC (what the database and the wire hold)."""
    moment = value if isinstance(value, datetime) else None
    if isinstance(value, str) and value:
        try:
            moment = parse_datetime(value)
        except ValueError:
            return None
    if moment is not None and moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment


def when(value: Any) -> str:
    """``2026-11-30 18:04:05 UTC``; a dash for none."""
    moment = as_datetime(value)
    if moment is None:
        return DASH
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def when_html(value: Any) -> SafeString:
    """``when`` in a ``<time datetime="2026-11-30T18:04:05.000Z">``, which the pages' script
    gives the reader's local time on hover; a dash for none."""
    moment = as_datetime(value)
    if moment is None:
        return format_html("{}", DASH)
    return format_html('<time datetime="{}">{}</time>', iso(moment), when(moment))


def duration_text(delta: timedelta | None) -> str:
    """``23 ms``, ``4.2 s``, ``42 s``, ``3 min 12 s``, ``2 h 5 min``, ``3 d 4 h``, each part cut
    (never rounded up); a dash for none or a negative one."""
    if delta is None or delta < timedelta(0):
        return DASH
    millis = delta // timedelta(milliseconds=1)  # exact: no float on the way
    if millis < 1_000:
        return f"{millis} ms"
    if millis < 10_000:
        return f"{millis // 1_000}.{millis % 1_000 // 100} s"
    days, rest = divmod(millis // 1_000, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"


def between(start: Any, end: Any) -> timedelta | None:
    """``end - start`` when both are times, else None."""
    first, last = as_datetime(start), as_datetime(end)
    return None if first is None or last is None else last - first
