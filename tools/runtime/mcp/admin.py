"""The admin of the MCP servers Toolcore is a client of (docs/mcp.md, docs/admin.md).

Staff register a server here (or with ``manage.py mcp_add``); a stdio server only with the
permission ``tools.run_commands``, since saving one (and refreshing its tools) starts its
command. The form writes through the
services (``mcp_server_save``, ``mcp_server_delete``), and saving lists the server's tools
(``mcp_server_refresh``), as the action "Refresh tools" does. Secret values (environment
variables, header values) are write-only: the form takes new ``NAME=value`` lines and names to
remove; the page shows the names, never a value.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from conversations.admin import ExactSearchMixin, ReadOnlyAdmin, SupportAdmin
from conversations.errors import ValidationFailed
from conversations.grants import RUN_COMMANDS, may_run_commands
from tools.catalog import mcp_tool_name
from tools.models import McpServer, McpTool

from .services import (
    McpUnavailable,
    mcp_server_check,
    mcp_server_delete,
    mcp_server_refresh,
    mcp_server_save,
    secret_names_check,
)
from .specs import tool_risk

# Saving a stdio server lists its tools, which starts its command: running a command.
STDIO_NEEDS = (
    f"Registering or changing a stdio MCP server runs its command: it needs the permission "
    f"{RUN_COMMANDS}."
)
_SECRET_HELP = (
    "One NAME=value a line, set or replaced; the others are kept. Values are stored sealed and "
    "never shown again."
)


def _pairs(text: str, field: str) -> dict[str, str]:
    pairs = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise forms.ValidationError(f"Line {number} is not NAME=value.", code=field)
        pairs[name.strip()] = value
    return pairs


class McpServerForm(forms.ModelForm):
    arguments_text = forms.CharField(
        label="arguments",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="A stdio server's arguments, one a line.",
    )
    set_environment = forms.CharField(
        label="set environment variables",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "autocomplete": "off"}),
        help_text=f"A stdio server's environment. {_SECRET_HELP}",
    )
    remove_environment = forms.MultipleChoiceField(
        label="remove environment variables",
        required=False,
        widget=forms.CheckboxSelectMultiple,
    )
    set_headers = forms.CharField(
        label="set headers",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "autocomplete": "off"}),
        help_text=f"Headers sent to an HTTP server. {_SECRET_HELP}",
    )
    remove_headers = forms.MultipleChoiceField(
        label="remove headers", required=False, widget=forms.CheckboxSelectMultiple
    )

    class Meta:
        model = McpServer
        fields = ("name", "transport", "command", "url", "enabled", "owner")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        server = self.instance
        self.fields["arguments_text"].initial = "\n".join(server.arguments or [])
        self.fields["remove_environment"].choices = [(n, n) for n in sorted(server.environment)]
        self.fields["remove_headers"].choices = [(n, n) for n in sorted(server.headers)]

    user: Any = None  # who saves (McpServerAdmin.get_form)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        stdio = data.get("transport") == McpServer.Transport.STDIO
        if stdio and not (self.user is not None and may_run_commands(self.user)):
            raise forms.ValidationError(STDIO_NEEDS)
        data["arguments"] = [a for a in data.get("arguments_text", "").splitlines() if a]
        data["environment"] = _pairs(data.get("set_environment", ""), "set_environment")
        data["headers"] = _pairs(data.get("set_headers", ""), "set_headers")
        try:
            mcp_server_check(
                name=data.get("name", ""),
                transport=data.get("transport", ""),
                command=data.get("command", ""),
                url=data.get("url", ""),
                arguments=data["arguments"],
            )
            secret_names_check("environment", data["environment"])
            secret_names_check("headers", data["headers"])
        except ValidationFailed as exc:
            raise forms.ValidationError(exc.message) from None
        return data


class McpToolInline(admin.TabularInline):
    model = McpTool
    fields = ("catalog_name", "risk", "description", "refreshed_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="name in the catalog")
    def catalog_name(self, obj: McpTool) -> str:
        return mcp_tool_name(obj.server.name, obj.name)

    @admin.display(description="risk")
    def risk(self, obj: McpTool) -> str:
        return tool_risk(obj.annotations or {})


@admin.register(McpServer)
class McpServerAdmin(ExactSearchMixin, SupportAdmin):
    form = McpServerForm
    list_display = ("name", "transport", "enabled", "served", "tool_count", "tools_listed_at")
    list_filter = ("enabled", "transport")
    list_select_related = ("owner",)
    search_fields = ("name", "command", "url", "owner__username")
    raw_id_fields = ("owner",)
    inlines = (McpToolInline,)
    actions = ("refresh_tools",)
    readonly_fields = ("environment_names", "header_names", "tools_listed_at", "tools_error")
    fieldsets = (
        (None, {"fields": ("name", "transport", "enabled", "owner")}),
        (
            "stdio",
            {
                "fields": (
                    "command",
                    "arguments_text",
                    "environment_names",
                    "set_environment",
                    "remove_environment",
                )
            },
        ),
        ("Streamable HTTP", {"fields": ("url", "header_names", "set_headers", "remove_headers")}),
        ("Tools", {"fields": ("tools_listed_at", "tools_error")}),
    )

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any):
        form = super().get_form(request, obj, change=change, **kwargs)
        form.user = request.user  # a class made for this request
        return form

    @admin.display(description="serves")
    def served(self, obj: McpServer) -> str:
        return obj.owner.get_username() if obj.owner_id else "every owner"

    @admin.display(description="tools")
    def tool_count(self, obj: McpServer) -> int:
        return obj.tools.count()

    @admin.display(description="environment variables")
    def environment_names(self, obj: McpServer) -> str:
        return _names(obj.environment)

    @admin.display(description="headers")
    def header_names(self, obj: McpServer) -> str:
        return _names(obj.headers)

    def save_model(self, request: HttpRequest, obj: McpServer, form: Any, change: bool) -> None:
        data = form.cleaned_data
        saved = mcp_server_save(
            server=McpServer.objects.get(pk=obj.pk) if change else None,
            name=data["name"],
            transport=data["transport"],
            command=data.get("command", ""),
            arguments=data["arguments"],
            url=data.get("url", ""),
            environment=data["environment"],
            headers=data["headers"],
            remove_environment=data.get("remove_environment") or (),
            remove_headers=data.get("remove_headers") or (),
            enabled=data.get("enabled", True),
            owner=data.get("owner"),
        )
        obj.pk = obj.id = saved.pk
        self._refresh(request, saved)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        pass  # the tools are the server's listing, never a form's

    def construct_change_message(
        self, request: HttpRequest, form: Any, formsets: Any, add: bool = False
    ) -> Any:
        # The history names the fields changed (never a value), not the tools' read-only rows.
        return super().construct_change_message(request, form, [], add)

    def delete_model(self, request: HttpRequest, obj: McpServer) -> None:
        mcp_server_delete(server=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        for server in queryset:
            mcp_server_delete(server=server)

    @admin.action(description="Refresh tools (list them again)", permissions=["change"])
    def refresh_tools(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        for server in queryset[:20]:
            self._refresh(request, server)

    def _refresh(self, request: HttpRequest, server: McpServer) -> None:
        if server.transport == McpServer.Transport.STDIO and not may_run_commands(request.user):
            self.message_user(request, f"MCP server {server.name}: {STDIO_NEEDS}", messages.WARNING)
            return
        try:
            names = mcp_server_refresh(server=server)
        except McpUnavailable as exc:
            self.message_user(request, str(exc), messages.WARNING)
            return
        self.message_user(
            request, f"MCP server {server.name} lists {len(names)} tool(s).", messages.SUCCESS
        )


def _names(sealed: dict[str, str]) -> str:
    return ", ".join(sorted(sealed)) + " (values hidden)" if sealed else "—"


@admin.register(McpTool)
class McpToolAdmin(ReadOnlyAdmin):
    """Every server's tools as they last listed them: read-only, refreshed by the servers."""

    list_display = ("catalog_name", "server", "risk", "refreshed_at")
    list_filter = ("server",)
    list_select_related = ("server",)
    search_fields = ("name", "description", "server__name")
    fields = (
        "server",
        "name",
        "catalog_name",
        "risk",
        "description",
        "input_schema",
        "annotations",
        "refreshed_at",
    )
    readonly_fields = fields

    @admin.display(description="name in the catalog")
    def catalog_name(self, obj: McpTool) -> str:
        return mcp_tool_name(obj.server.name, obj.name)

    @admin.display(description="risk")
    def risk(self, obj: McpTool) -> str:
        return tool_risk(obj.annotations or {})
