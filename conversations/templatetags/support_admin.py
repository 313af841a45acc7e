"""Template helpers of the support admin: ``when`` (a time with seconds and zone),
``tool_label`` (a call's tool, an MCP server's with its server) and the support console on the
admin's first page."""

from __future__ import annotations

from typing import Any

from django import template

from ..admin.common import tool_label
from ..admin.console import support_console
from .times import when

register = template.Library()
register.filter("when", when)
register.filter("tool_label", tool_label)


@register.inclusion_tag("admin/conversations/console.html")
def console() -> dict[str, Any]:
    """The support console's sections (``conversations/admin/console.py``)."""
    return {"sections": support_console()}
