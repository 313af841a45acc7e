"""Times in the admin: always with seconds and the zone (``2026-11-30 18:04:05 UTC``), and
durations in words a person reads at a glance (``3 min 12 s``).

Django shows a ``DateTimeField`` as ``Nov. 30, 2026, 6:04 p.m.``: no seconds, no zone, while a
support case is about which of two things happened first. ``SecondsMixin`` swaps every time
column and read-only time field of an admin for one that shows ``when``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.contrib import admin
from django.db import models
from django.utils import timezone
from django.utils.dateparse import parse_datetime

DASH = "—"


def as_datetime(value: Any) -> datetime | None:
    """A datetime from a datetime or an ISO 8601 text (the wire's ``startedAt``), else None."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        try:
            return parse_datetime(value)
        except ValueError:
            return None
    return None


def when(value: Any) -> str:
    """``2026-11-30 18:04:05 UTC``, in the site's zone (``TIME_ZONE``); a dash for none."""
    moment = as_datetime(value)
    if moment is None:
        return DASH
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, timezone.get_current_timezone())
    local = timezone.localtime(moment)
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}"


def duration_text(delta: timedelta | None) -> str:
    """``850 ms``, ``42 s``, ``3 min 12 s``, ``2 h 5 min``, ``3 d 4 h``; a dash for none."""
    if delta is None:
        return DASH
    seconds = delta.total_seconds()
    if seconds < 0:
        return DASH
    if seconds < 10:
        return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"
    whole = int(seconds)
    days, rest = divmod(whole, 86_400)
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


def time_column(field: models.DateTimeField) -> Any:
    """A list column or read-only field showing ``field`` with ``when``, sorted by the field."""

    @admin.display(description=field.verbose_name, ordering=field.name)
    def show(obj: Any) -> str:
        return when(getattr(obj, field.name))

    show.__name__ = f"when_{field.name}"
    return show


class SecondsMixin:
    """Every time column and read-only time field of this admin reads with seconds and zone.

    At start, each ``DateTimeField`` named in ``list_display`` or in ``readonly_fields`` (and so
    in ``fields`` or ``fieldsets``) is replaced by a ``when_<name>`` attribute made by
    ``time_column``. Editable time fields and ``date_hierarchy`` are left as they are.
    """

    def __init__(self, model: Any, admin_site: Any) -> None:
        super().__init__(model, admin_site)  # type: ignore[call-arg]
        times = {
            field.name: field
            for field in model._meta.concrete_fields
            if isinstance(field, models.DateTimeField)
        }
        readonly = {name for name in self.readonly_fields if isinstance(name, str)}  # type: ignore[attr-defined]

        def swap(names: Any, *, only_readonly: bool) -> tuple[Any, ...]:
            swapped = []
            for name in names:
                shown = isinstance(name, str) and name in times
                if shown and (not only_readonly or name in readonly):
                    setattr(self, f"when_{name}", time_column(times[name]))
                    name = f"when_{name}"
                swapped.append(name)
            return tuple(swapped)

        self.list_display = swap(self.list_display, only_readonly=False)  # type: ignore[attr-defined]
        self.readonly_fields = swap(self.readonly_fields, only_readonly=False)  # type: ignore[attr-defined]
        if self.fields:  # type: ignore[attr-defined]
            self.fields = swap(self.fields, only_readonly=True)  # type: ignore[attr-defined]
        if self.fieldsets:  # type: ignore[attr-defined]
            self.fieldsets = tuple(  # type: ignore[attr-defined]
                (title, {**options, "fields": swap(options["fields"], only_readonly=True)})
                for title, options in self.fieldsets  # type: ignore[attr-defined]
            )
