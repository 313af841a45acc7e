"""The tools app's admin (docs/admin.md): permission rules (where global rules are made) and the
workers' heartbeats here; async runs, launches, the process groups dead workers left and the MCP
servers in the runtime's features, whose admins are imported below so that Django's
autodiscovery, which imports this module, finds them.

Every admin of the app shares the support admin's ways (``conversations.admin.SupportAdmin``):
times with seconds and zone, no count of the whole table.

``PermissionRule`` is plain configuration: the admin form saves it directly (``save_model`` sets
``created_by`` and ``source = admin``). That is the one direct write of the admin; everything
else is read-only and changes through the services and workers.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone

from conversations.admin import ExactSearchMixin, ReadOnlyAdmin, SupportAdmin, link

from .models import PermissionRule, WorkerHeartbeat
from .runtime.async_runs import admin as async_runs_admin  # noqa: F401 - registers its models
from .runtime.launches import admin as launches_admin  # noqa: F401 - registers its models
from .runtime.left_processes import admin as left_processes_admin  # noqa: F401 - the same
from .runtime.mcp import admin as mcp_admin  # noqa: F401 - the same


class RuleScopeFilter(admin.SimpleListFilter):
    title = "scope"
    parameter_name = "scope"

    def lookups(self, request, model_admin):
        return [("global", "Global"), ("conversation", "One conversation")]

    def queryset(self, request, queryset):
        if self.value() == "global":
            return queryset.filter(conversation__isnull=True)
        if self.value() == "conversation":
            return queryset.filter(conversation__isnull=False)
        return queryset


@admin.register(PermissionRule)
class PermissionRuleAdmin(ExactSearchMixin, SupportAdmin):
    list_display = (
        "tool_name",
        "pattern_or_all",
        "decision",
        "scope",
        "source",
        "created_by",
        "created_at",
    )
    list_filter = ("decision", "source", RuleScopeFilter, "tool_name")
    list_select_related = ("conversation", "created_by")
    search_fields = (
        "tool_name",
        "pattern",
        "reason",
        "conversation__title",
        "created_by__username",
    )
    uuid_search_fields = ("conversation_id",)
    raw_id_fields = ("conversation",)
    fields = (
        "conversation",
        "tool_name",
        "pattern",
        "decision",
        "reason",
        "source",
        "created_by",
        "created_at",
        "updated_at",
    )
    readonly_fields = ("source", "created_by", "created_at", "updated_at")

    @admin.display(description="pattern")
    def pattern_or_all(self, obj: PermissionRule) -> str:
        return obj.pattern or "* (all)"

    @admin.display(description="scope")
    def scope(self, obj: PermissionRule) -> str:
        return "global" if obj.conversation_id is None else link(obj.conversation)

    def save_model(
        self, request: HttpRequest, obj: PermissionRule, form: Any, change: bool
    ) -> None:
        # Rules are configuration, not call state: saving the row is the whole operation.
        if not change:
            obj.created_by = request.user
            obj.source = PermissionRule.Source.ADMIN
        super().save_model(request, obj, form, change)


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(ReadOnlyAdmin):
    """The tool workers that said they were alive within the last day (a row a worker, renewed
    every third of the lease; ``tools/runtime/presence.py``), by host, each with its state:
    running (a heartbeat within the lease), stopped (in order, at "stopped at") or silent (no
    heartbeat for longer than the lease: it died, or cannot reach the database)."""

    list_display = ("name", "host", "state", "started_at", "heartbeat_at", "stopped_at")
    list_filter = ("host",)
    search_fields = ("name", "host")
    fields = list_display
    readonly_fields = fields

    @admin.display(description="state")
    def state(self, obj: WorkerHeartbeat) -> str:
        if obj.stopped_at is not None:
            return "stopped"
        lease = timedelta(seconds=settings.TOOLCORE_CLAIM_LEASE)
        return "running" if timezone.now() - obj.heartbeat_at <= lease else "silent"
