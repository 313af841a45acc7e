"""How commands ended (``CommandExit``), read only: the list behind the support console's
"Non-zero exits", each row linking to its call's page."""

from __future__ import annotations

from django.contrib import admin

from ..exits import exit_text
from ..models import CommandExit
from .common import ExactSearchMixin, ReadOnlyAdmin, RowColumnsMixin, link_to_call


@admin.register(CommandExit)
class CommandExitAdmin(RowColumnsMixin, ExactSearchMixin, ReadOnlyAdmin):
    list_display = (
        "call_link",
        "ended",
        "succeeded",
        "exit_code",
        "signal",
        "timed_out",
        "async_run_id",
        "conversation_link",
        "created_at",
    )
    # Newest first; the filter has exit_succeeded_recent (exit_recent for the whole list).
    list_filter = ("succeeded",)
    list_select_related = ("conversation",)
    ordering = ("-created_at",)
    search_fields = ("conversation__title",)
    uuid_search_fields = ("tool_call_id", "async_run_id", "conversation_id")
    fields = (
        "call_link",
        "ended",
        "conversation",
        "async_run_id",
        "exit_code",
        "signal",
        "timed_out",
        "timeout_seconds",
        "succeeded",
        "created_at",
    )
    readonly_fields = fields

    @admin.display(description="call")
    def call_link(self, obj: CommandExit) -> str:
        return link_to_call(obj.tool_call_id)

    @admin.display(description="ended")
    def ended(self, obj: CommandExit) -> str:
        return exit_text(obj)
