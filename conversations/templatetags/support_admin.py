"""Template helpers of the support admin: ``when`` (a time with seconds and zone) and the
support console on the admin's first page."""

from __future__ import annotations

from typing import Any

from django import template

from ..admin.console import support_console
from ..admin.times import when as when_text

register = template.Library()


@register.filter
def when(value: Any) -> str:
    """``{{ event.created_at|when }}`` → ``2026-11-30 18:04:05 UTC``."""
    return when_text(value)


@register.inclusion_tag("admin/conversations/console.html")
def console() -> dict[str, Any]:
    """The support console's sections (``conversations/admin/console.py``)."""
    return {"sections": support_console()}
