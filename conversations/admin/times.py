"""Times in the admin: always with seconds and the zone (``2026-11-30 18:04:05 UTC``, the local
time on hover), and durations in words a person reads at a glance (``3 min 12 s``): the pages'
convention, from ``conversations/times.py``.

Django shows a ``DateTimeField`` as ``Nov. 30, 2026, 6:04 p.m.``: no seconds, no zone, while a
support case is about which of two things happened first. ``SecondsMixin`` swaps every time
column and read-only time field of an admin for one that shows ``when``.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import models

# The one way times and durations read, on the pages too (conversations/times.py).
from ..times import DASH, as_datetime, between, duration_text, when, when_html

__all__ = [
    "DASH",
    "SecondsMixin",
    "as_datetime",
    "between",
    "duration_text",
    "time_column",
    "when",
    "when_html",
]


def time_column(field: models.DateTimeField) -> Any:
    """A list column or read-only field showing ``field`` with ``when``, sorted by the field."""

    @admin.display(description=field.verbose_name, ordering=field.name)
    def show(obj: Any) -> str:
        return when_html(getattr(obj, field.name))

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
