"""The admin for support staff (docs/admin.md).

Its first page is the support console (``console``): what needs a person now. Every call id,
unfinished or settled, has one page (``callpage``, served by the tool-call admin's change view),
whose buttons run one service each (``operations``: approve, deny, cancel, release an expired
claim, recovery). Every other row is read-only here and changes only through the services;
conversations are deleted through ``conversation_delete``. Times read with seconds and zone
(``times``).

Modules: ``common`` (display helpers, the capped paginator, the read-only and exact-search
mixins), ``times``, ``filters``, ``timeline``, ``console``, ``callpage``, ``operations``,
``conversations`` (conversations, turns), ``events`` (events, tool activities, assets),
``calls`` (tool calls, execution claims), ``exits`` (how commands ended), ``tokens`` (API
tokens), ``mcp_sessions`` (MCP clients' sessions) and ``accounts`` (Django's users and groups, counted like the rest).
"""

from django.contrib import admin

# Importing the admin modules registers their ModelAdmins (Django autodiscovers this package).
from . import accounts, calls, conversations, events, exits, mcp_sessions, tokens
from .common import (
    ExactSearchMixin,
    ReadOnlyAdmin,
    SupportAdmin,
    call_url,
    changelist_url,
    link,
    link_to_call,
)
from .timeline import call_timeline, response_timeline

admin.site.site_header = "Toolcore support"
admin.site.site_title = "Toolcore support"
admin.site.index_title = "Support console"
# The app sidebar takes a fifth of a 1280 px screen from every list; the console on the first
# page and the breadcrumbs lead everywhere it did.
admin.site.enable_nav_sidebar = False

__all__ = [
    "ExactSearchMixin",
    "accounts",
    "ReadOnlyAdmin",
    "SupportAdmin",
    "call_timeline",
    "call_url",
    "calls",
    "changelist_url",
    "conversations",
    "events",
    "exits",
    "link",
    "link_to_call",
    "mcp_sessions",
    "response_timeline",
    "tokens",
]
