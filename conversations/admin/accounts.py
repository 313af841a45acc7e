"""Users and groups: Django's own admins, made to count like every other list here (no count of
the whole table, a capped count of the filtered rows); and the failed logins counted against
addresses (django-axes' rows)."""

from __future__ import annotations

from typing import Any

from axes.models import AccessAttempt
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.http import HttpRequest

from .common import CappedCountPaginator, SupportAdmin

User = get_user_model()

admin.site.unregister(User)
admin.site.unregister(Group)


@admin.register(User)
class SupportUserAdmin(UserAdmin):
    show_full_result_count = False
    paginator = CappedCountPaginator


@admin.register(Group)
class SupportGroupAdmin(GroupAdmin):
    show_full_result_count = False
    paginator = CappedCountPaginator


@admin.register(AccessAttempt)
class FailedLoginAdmin(SupportAdmin):
    """Failed logins django-axes counts (conversations/api/throttle.py): one row per address,
    username and browser, with its failures and the last one's time. Read-only; deleting a
    row forgets its failures (``manage.py throttle_reset ADDRESS`` does it for an address)."""

    list_display = ("ip_address", "username", "failures_since_start", "attempt_time", "path_info")
    search_fields = ("ip_address", "username")
    fields = ("ip_address", "username", "user_agent", "failures_since_start", "attempt_time")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
