"""The admin of async runs (docs/admin.md): read-only, each run with its call, how it ended and
its notice event."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html

from conversations.admin import (
    ExactSearchMixin,
    ReadOnlyAdmin,
    changelist_url,
    link,
    link_to_call,
)
from conversations.exits import exit_of, exit_text
from conversations.models import ConversationEvent
from tools.models import PROCESS_FIELDS, AsyncRun, ProcessStatus


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
