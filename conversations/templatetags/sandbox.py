"""``{% load sandbox %}{% sandbox_notice %}``: the line every page and the admin show when
commands run unsandboxed (``tools/sandbox.py``; docs/security.md, "The command sandbox")."""

from __future__ import annotations

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from tools.sandbox import sandbox_report

register = template.Library()


@register.simple_tag
def sandbox_notice() -> SafeString | str:
    """Nothing while commands run in the sandbox; else a ``role="status"`` line saying why."""
    report = sandbox_report()
    if report["on"]:
        return ""
    return format_html(
        '<p class="sandbox-off" role="status"><strong>Commands run unsandboxed</strong>: {}. '
        "They run as the server's OS user and see what it sees.</p>",
        report["why"],
    )
