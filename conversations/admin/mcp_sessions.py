"""MCP sessions (docs/mcp.md): who is connected through which client, on which conversation;
ended through ``mcp_session_end`` (the client's next request is then 404 and it initializes
again)."""

from __future__ import annotations

from django.contrib import admin, messages

from ..models import McpSession
from ..services.mcp_sessions import mcp_session_end
from .common import ReadOnlyAdmin, link


@admin.register(McpSession)
class McpSessionAdmin(ReadOnlyAdmin):
    """Read-only; the session id is shown by its first characters, to recognise a row."""

    list_display = (
        "id_prefix",
        "user",
        "client",
        "conversation_link",
        "created_at",
        "last_seen_at",
    )
    list_select_related = ("user", "conversation")
    search_fields = ("user__username",)
    fields = (
        "id_prefix",
        "user",
        "conversation_link",
        "client_info",
        "capabilities",
        "protocol_version",
        "created_at",
        "last_seen_at",
    )
    readonly_fields = fields
    actions = ("end_sessions",)

    @admin.display(description="session")
    def id_prefix(self, obj: McpSession) -> str:
        return f"{obj.pk[:8]}…"

    @admin.display(description="client")
    def client(self, obj: McpSession) -> str:
        info = obj.client_info or {}
        return " ".join(str(info.get(k, "")) for k in ("name", "version")).strip() or "—"

    @admin.display(description="conversation")
    def conversation_link(self, obj: McpSession) -> str:
        return link(obj.conversation, str(obj.conversation))

    @admin.action(description="End selected sessions", permissions=["operate"])
    def end_sessions(self, request, queryset):
        ended = sum(mcp_session_end(session_id=pk) for pk in queryset.values_list("pk", flat=True))
        self.message_user(request, f"Ended {ended} session(s).", messages.SUCCESS)
