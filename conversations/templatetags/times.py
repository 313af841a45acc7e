"""``{% load times %}``: the one way a template shows a time (docs/web.md, "Times").

``{{ value|when }}`` → ``<time datetime="2026-11-30T18:04:05.000Z">2026-11-30 18:04:05 UTC</time>``;
the pages' script adds the reader's local time on hover.
"""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.safestring import SafeString

from ..times import when_html

register = template.Library()


@register.filter
def when(value: Any) -> SafeString:
    """A time in UTC with seconds and zone, in a ``<time>``; a dash for none."""
    return when_html(value)
