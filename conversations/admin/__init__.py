"""The admin for support staff (docs/subsystems/settings.md, "Admin").

Every row here changes only through the services: the forms are read-only, and the actions
(cancel, release a claim, recovery sweep, revoke, verify) call a service and report with
``message_user``. The timeline panels are built by the read-only selectors in ``timeline``.
Conversations are deleted through ``conversation_delete``; nothing else can be deleted here.

Modules: ``common`` (display helpers and the read-only and exact-search mixins), ``filters``,
``timeline``, ``conversations`` (conversations, turns), ``events`` (events, tool activities,
assets), ``calls`` (unfinished calls, execution claims) and ``tokens`` (API tokens).
"""

# Importing the admin modules registers their ModelAdmins (Django autodiscovers this package).
from . import calls, conversations, events, tokens
from .common import ExactSearchMixin, ReadOnlyAdmin, call_url, changelist_url, link
from .timeline import call_timeline, response_timeline

__all__ = [
    "ExactSearchMixin",
    "ReadOnlyAdmin",
    "call_timeline",
    "call_url",
    "calls",
    "changelist_url",
    "conversations",
    "events",
    "link",
    "response_timeline",
    "tokens",
]
