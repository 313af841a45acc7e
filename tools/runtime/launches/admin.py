"""The admin of workbench launches (docs/admin.md): read-only."""

from __future__ import annotations

from django.contrib import admin

from conversations.admin import ExactSearchMixin, ReadOnlyAdmin
from tools.models import PROCESS_FIELDS, Launch


@admin.register(Launch)
class LaunchAdmin(ExactSearchMixin, ReadOnlyAdmin):
    list_display = (
        "name",
        "owner",
        *PROCESS_FIELDS,
    )
    # Newest first; the status filter has launch_status_recent (launch_recent the whole list).
    list_filter = ("status",)
    list_select_related = ("owner",)
    search_fields = ("name", "command", "cwd", "owner__username")
    uuid_search_fields = ("id",)
    date_hierarchy = "started_at"
    fields = (
        "id",
        "owner",
        "name",
        "command",
        "cwd",
        *PROCESS_FIELDS,
        "created_at",
        "updated_at",
    )
    readonly_fields = fields
