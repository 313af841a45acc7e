"""What a user may do beyond owning a thing: run programs of their own choosing.

Typing a ``!command``, approving a tool that runs programs and starting a launch all need the
Django permission ``tools.run_commands``. One check, so that every path (REST, websocket, admin,
web page) refuses alike, with the same 403 ``forbidden``. The grant itself is given and taken
here too (``manage.py run_commands``; the admin's user page edits the same row).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db.models import Q

from .errors import Forbidden

RUN_COMMANDS = "tools.run_commands"
_APP_LABEL, _CODENAME = RUN_COMMANDS.split(".")


def may_run_commands(user: Any) -> bool:
    """Whether ``user`` holds ``tools.run_commands`` (directly, by a group, or as superuser)."""
    return bool(user.has_perm(RUN_COMMANDS))


def run_commands_require(*, user: Any, doing: str) -> None:
    """``Forbidden`` ("<doing> needs the permission tools.run_commands.") unless ``user`` may
    run commands. Called before anything is written."""
    if not may_run_commands(user):
        raise Forbidden(f"{doing} needs the permission {RUN_COMMANDS}.")


def _permission() -> Permission:
    return Permission.objects.get(codename=_CODENAME, content_type__app_label=_APP_LABEL)


def run_commands_grant(*, user: Any) -> bool:
    """Give ``user`` the permission directly: True when it was given now, False when the user
    held the direct grant already (nothing written)."""
    permission = _permission()
    if user.user_permissions.filter(pk=permission.pk).exists():
        return False
    user.user_permissions.add(permission)
    return True


def run_commands_revoke(*, user: Any) -> bool:
    """Take the direct grant from ``user``: True when it was taken now, False when there was
    none. A group's grant and a superuser's every permission stay (``run_commands_sources``)."""
    permission = _permission()
    if not user.user_permissions.filter(pk=permission.pk).exists():
        return False
    user.user_permissions.remove(permission)
    return True


@dataclass(frozen=True)
class Holder:
    """A user who may run commands, and why: ``direct``, ``superuser``, and the groups."""

    username: str
    is_active: bool
    sources: tuple[str, ...]


def run_commands_sources(user: Any) -> tuple[str, ...]:
    """Why ``user`` may run commands: ``superuser``, ``direct``, ``group <name>`` for each
    group holding the permission; empty when nothing gives it. Read fresh from the database
    (Django caches a user's permissions on the object)."""
    permission = _permission()
    sources = []
    if user.is_superuser:
        sources.append("superuser")
    if user.user_permissions.filter(pk=permission.pk).exists():
        sources.append("direct")
    groups = user.groups.filter(permissions=permission).order_by("name")
    sources += [f"group {name}" for name in groups.values_list("name", flat=True)]
    return tuple(sources)


def run_commands_holders() -> list[Holder]:
    """Every user whom the permission reaches, by username (inactive ones too: they hold it
    again once reactivated)."""
    permission = _permission()
    users = (
        get_user_model()
        .objects.filter(
            Q(is_superuser=True)
            | Q(user_permissions=permission)
            | Q(groups__permissions=permission)
        )
        .distinct()
        .order_by(get_user_model().USERNAME_FIELD)
    )
    return [
        Holder(user.get_username(), user.is_active, run_commands_sources(user)) for user in users
    ]
