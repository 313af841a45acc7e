"""Users and groups: Django's own admins, made to count like every other list here (no count of
the whole table, a capped count of the filtered rows)."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group

from .common import CappedCountPaginator

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
