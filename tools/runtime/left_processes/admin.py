"""The admin of the process groups dead workers left (docs/admin.md): read-only."""

from __future__ import annotations

from django.contrib import admin

from conversations.admin import ReadOnlyAdmin
from tools.models import LeftProcess


@admin.register(LeftProcess)
class LeftProcessAdmin(ReadOnlyAdmin):
    """Process groups dead workers left running, waiting for a worker of their host to kill
    them (each row goes once handled)."""

    list_display = ("label", "host", "pgid", "process_start", "created_at")
    list_filter = ("host",)
    search_fields = ("label", "host")
    fields = list_display
    readonly_fields = fields
