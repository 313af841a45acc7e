"""Admin of permission rules (where global rules are made), background commands and launches.

Every admin here shares the support admin's ways (``conversations.admin.SupportAdmin``): times
with seconds and zone, no count of the whole table.

``PermissionRule`` is plain configuration: the admin form saves it directly (``save_model`` sets
``created_by`` and ``source = admin``). That is the one direct write of the admin; everything
else is read-only here and changes through the services and workers.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html

from conversations.admin import (
    ExactSearchMixin,
    ReadOnlyAdmin,
    SupportAdmin,
    changelist_url,
    link,
    link_to_call,
)
from conversations.exits import exit_of, exit_text
from conversations.models import ConversationEvent

from .models import AsyncRun, Launch, LeftProcess, PermissionRule, ProcessStatus


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


# The lifecycle fields of a ProcessRecord, shown the same way for async runs and launches.
PROCESS_FIELDS = ("status", "exit_code", "signal", "pid", "started_at", "finished_at")


@admin.register(AsyncRun)
class AsyncRunAdmin(ExactSearchMixin, ReadOnlyAdmin):
    list_display = (
        "short_command",
        "status",
        "exit_code",
        "signal",
        "pid",
        "conversation_link",
        "started_at",
        "finished_at",
        "acknowledged",
    )
    # Newest first; each filter has an index that also gives the order (run_status_recent,
    # run_acknowledged_recent; run_recent for the whole list).
    list_filter = ("status", "acknowledged")
    list_select_related = ("conversation",)
    search_fields = ("command", "cwd", "conversation__title")
    uuid_search_fields = ("id", "tool_call_id", "conversation_id")
    date_hierarchy = "started_at"
    fields = (
        "id",
        "conversation",
        "call_link",
        "command",
        "cwd",
        *PROCESS_FIELDS,
        "ended",
        "notice_link",
        "acknowledged",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields

    @admin.display(description="command")
    def short_command(self, obj: AsyncRun) -> str:
        return obj.command if len(obj.command) <= 80 else obj.command[:79] + "…"

    @admin.display(description="conversation")
    def conversation_link(self, obj: AsyncRun) -> str:
        return link(obj.conversation)

    @admin.display(description="started by call")
    def call_link(self, obj: AsyncRun) -> str:
        return link_to_call(obj.tool_call_id)

    @admin.display(description="ended")
    def ended(self, obj: AsyncRun) -> str:
        """As its call's card and page say it (a timeout is told from a kill here only)."""
        ended = exit_of(obj.tool_call_id)
        if ended is not None:
            return exit_text(ended)
        return "— (still running)" if obj.status == ProcessStatus.RUNNING else "—"

    @admin.display(description="notice event")
    def notice_link(self, obj: AsyncRun) -> str:
        if obj.notice_sequence is None:
            return "— (still running)"
        url = changelist_url(
            ConversationEvent,
            conversation__id__exact=obj.conversation_id,
            sequence=obj.notice_sequence,
        )
        return format_html('<a href="{}">#{}</a>', url, obj.notice_sequence)


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


@admin.register(LeftProcess)
class LeftProcessAdmin(ReadOnlyAdmin):
    """Process groups dead workers left running, waiting for a worker of their host to kill
    them (each row goes once handled)."""

    list_display = ("label", "host", "pgid", "process_start", "created_at")
    list_filter = ("host",)
    search_fields = ("label", "host")
    fields = list_display
    readonly_fields = fields
