"""What a conversation has recorded: its events, tool activities and assets. All read only; the
one action, verifying an asset's digest, re-hashes a file and writes nothing."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models.fields.json import KT
from django.http import HttpRequest, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme

from ..assets import asset_verify
from ..errors import AssetCorrupt
from ..models import Asset, ConversationEvent, ToolActivity
from ..shapes import activity_state
from .common import (
    ExactSearchMixin,
    ReadOnlyAdmin,
    RowColumnsMixin,
    asset_absolute_path,
    asset_verify_url,
    call_url,
    change_url,
    link_to_call,
    pre,
)
from .filters import ActivityStatusFilter, EventOutcomeFilter
from .timeline import response_timeline


@admin.register(ConversationEvent)
class ConversationEventAdmin(RowColumnsMixin, ExactSearchMixin, ReadOnlyAdmin):
    change_form_template = "admin/conversations/conversationevent/change_form.html"
    list_display = (
        "id",
        "sequence",
        "type",
        "outcome",
        "conversation_link",
        "turn_ordinal",
        "call_link",
        "created_at",
    )
    # Newest first by id; type is served by event_type_id, outcome by event_response_outcome.
    list_filter = ("type", EventOutcomeFilter)
    list_select_related = ("conversation", "turn")
    search_fields = ("message_id", "conversation__title", "conversation__owner__username")
    uuid_search_fields = ("tool_call_id", "conversation_id", "turn_id")
    int_search_fields = ("id",)
    ordering = ("-id",)
    fields = (
        "id",
        "conversation",
        "sequence",
        "type",
        "turn",
        "tool_call_id",
        "message_id",
        "created_at",
        "payload_pretty",
    )
    readonly_fields = fields

    def get_ordering(self, request):
        # Filtered by outcome, the list reads index event_response_outcome (outcome,
        # created_at) in its order: newest first by time, which is the order of ids.
        if request.GET.get(EventOutcomeFilter.parameter_name):
            return ("-created_at", "-id")
        return super().get_ordering(request)

    def get_queryset(self, request):
        # Payloads can be large: the list reads only the outcome, in the database; the change
        # page loads the payload when it shows it.
        queryset = super().get_queryset(request).defer("payload")
        return queryset.annotate(_outcome=KT("payload__outcome"))

    @admin.display(description="outcome")
    def outcome(self, obj: ConversationEvent) -> str:
        return getattr(obj, "_outcome", None) or ""

    @admin.display(description="call")
    def call_link(self, obj: ConversationEvent) -> str:
        return link_to_call(obj.tool_call_id) if obj.tool_call_id else ""

    @admin.display(description="payload")
    def payload_pretty(self, obj: ConversationEvent) -> str:
        return pre(obj.payload)

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None and obj.type == ConversationEvent.Type.TOOL_CALL_RESPONSE:
            context["timeline"] = response_timeline(obj)
            context["call_page_url"] = call_url(obj.tool_call_id)
        return super().render_change_form(request, context, add, change, form_url, obj)


def verify_assets(modeladmin: admin.ModelAdmin, request: HttpRequest, assets: Any) -> None:
    """Re-hash each asset's file (``asset_verify(force=True)``) and report OK or corrupt."""
    for asset in assets:
        of_call = f" of call {asset.tool_call_id}" if asset.tool_call_id else ""
        label = f"Asset {asset.pk} ({asset.kind}, {asset.size} bytes){of_call}"
        try:
            asset_verify(asset, force=True)
        except AssetCorrupt as exc:
            modeladmin.message_user(
                request, f"{label}: mismatch, the file is corrupt: {exc.message}", messages.ERROR
            )
        else:
            modeladmin.message_user(request, f"{label}: OK, SHA-256 matches.", messages.SUCCESS)


@admin.register(Asset)
class AssetAdmin(RowColumnsMixin, ExactSearchMixin, ReadOnlyAdmin):
    list_display = (
        "short_id",
        "kind",
        "size",
        "digest",
        "media_type",
        "truncated",
        "conversation_link",
        "call_link",
        "created_at",
    )
    # Each filter has an index that also gives the order: asset_kind_recent,
    # asset_truncated_recent (asset_recent for the whole list).
    list_filter = ("kind", "truncated")
    list_select_related = ("conversation",)
    ordering = ("-created_at",)
    search_fields = ("path", "^sha256", "conversation__title")
    uuid_search_fields = ("id", "tool_call_id", "conversation_id", "event__tool_call_id")
    actions = ("verify_digest",)
    fields = (
        "id",
        "conversation",
        "call_link",
        "event",
        "kind",
        "path",
        "absolute_path",
        "size",
        "sha256",
        "media_type",
        "truncated",
        "created_at",
        "verify_link",
    )
    readonly_fields = fields

    @admin.display(description="sha256")
    def digest(self, obj: Asset) -> str:
        return obj.sha256[:12]

    @admin.display(description="call")
    def call_link(self, obj: Asset) -> str:
        return link_to_call(obj.tool_call_id)

    @admin.display(description="absolute path")
    def absolute_path(self, obj: Asset) -> str:
        return asset_absolute_path(obj)

    @admin.display(description="verify")
    def verify_link(self, obj: Asset) -> str:
        return format_html(
            '<a href="{}">Verify digest (re-hash the file)</a>', asset_verify_url(obj)
        )

    @admin.action(description="Verify digest (re-hash the file)", permissions=["view"])
    def verify_digest(self, request, queryset):
        verify_assets(self, request, queryset)

    def get_urls(self):
        verify = path(
            "<uuid:asset_id>/verify/",
            self.admin_site.admin_view(self.verify_view),
            name="conversations_asset_verify",
        )
        return [verify, *super().get_urls()]

    def verify_view(self, request, asset_id):
        """Re-hash one asset (reads only; safe as a link), then back to where it came from."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        asset = get_object_or_404(Asset, pk=asset_id)
        verify_assets(self, request, [asset])
        target = request.GET.get("next", "")
        if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
            target = change_url(asset)
        return HttpResponseRedirect(target)


@admin.register(ToolActivity)
class ToolActivityAdmin(RowColumnsMixin, ExactSearchMixin, ReadOnlyAdmin):
    list_display = (
        "tool_call_link",
        "status",
        "tool_name",
        "kind",
        "rev",
        "ordinal",
        "payload_bytes",
        "is_final",
        "conversation_link",
        "updated_at",
    )
    # Newest first by id; status is served by activity_status_id, is_final by its own index.
    list_filter = (ActivityStatusFilter, "is_final")
    list_select_related = ("conversation",)
    ordering = ("-id",)
    search_fields = ("state_json__toolName", "state_json__title", "conversation__title")
    uuid_search_fields = ("tool_call_id", "conversation_id", "turn_id")
    fields = (
        "tool_call_link",
        "conversation",
        "turn",
        "ordinal",
        "rev",
        "is_final",
        "payload_bytes",
        "raw_length",
        "raw_sha1",
        "created_at",
        "updated_at",
        "wire_state",
    )
    readonly_fields = fields

    def get_queryset(self, request):
        # The list shows small fields only; the change page loads the payload when it shows it.
        return super().get_queryset(request).defer("payload_json")

    @admin.display(description="call")
    def tool_call_link(self, obj: ToolActivity) -> str:
        return link_to_call(obj.tool_call_id)

    @admin.display(description="status")
    def status(self, obj: ToolActivity) -> str:
        return str(obj.state_json.get("status", ""))

    @admin.display(description="tool")
    def tool_name(self, obj: ToolActivity) -> str:
        return str(obj.state_json.get("toolName", ""))

    @admin.display(description="kind")
    def kind(self, obj: ToolActivity) -> str:
        return str(obj.state_json.get("kind", ""))

    @admin.display(description="tool.updated state (wire projection)")
    def wire_state(self, obj: ToolActivity) -> str:
        return pre(activity_state(obj))
