"""Conversations and their turns. A conversation is the one row deleted here, and only through
``conversation_delete``."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html_join

from tools.models import AsyncRun, PermissionRule

from ..models import Asset, Conversation, ConversationEvent, ToolActivity, ToolCall, Turn
from ..services.conversations import conversation_delete
from .common import ExactSearchMixin, ReadOnlyAdmin, RowColumnsMixin, changelist_url
from .filters import UnfinishedCallsFilter


def _links(targets: list[tuple[str, str]]) -> str:
    return format_html_join(" · ", '<a href="{}">{}</a>', ((url, label) for label, url in targets))


def conversation_links(conversation_id: Any) -> str:
    cid = {"conversation__id__exact": conversation_id}
    targets = [
        ("events", changelist_url(ConversationEvent, **cid)),
        ("unfinished calls", changelist_url(ToolCall, **cid)),
        ("turns", changelist_url(Turn, **cid)),
        ("activities", changelist_url(ToolActivity, **cid)),
        ("assets", changelist_url(Asset, **cid)),
        ("background commands", changelist_url(AsyncRun, **cid)),
        ("permission rules", changelist_url(PermissionRule, **cid)),
    ]
    return _links(targets)


def turn_links(turn_id: Any) -> str:
    tid = {"turn__id__exact": turn_id}
    targets = [
        ("events", changelist_url(ConversationEvent, **tid)),
        ("unfinished calls", changelist_url(ToolCall, **tid)),
        ("activities", changelist_url(ToolActivity, **tid)),
    ]
    return _links(targets)


@admin.register(Conversation)
class ConversationAdmin(RowColumnsMixin, ExactSearchMixin, ReadOnlyAdmin):
    """No inlines: event tables are huge, so the page links to filtered changelists instead."""

    list_display = ("__str__", "short_id", "owner", "last_sequence", "created_at", "updated_at")
    list_filter = (UnfinishedCallsFilter,)
    list_select_related = ("owner",)
    search_fields = ("title", "owner__username", "owner__email", "workspace")
    uuid_search_fields = ("id",)
    date_hierarchy = "created_at"
    fields = (
        "id",
        "title",
        "owner",
        "workspace",
        "last_sequence",
        "created_at",
        "updated_at",
        "related",
    )
    readonly_fields = fields

    @admin.display(description="related rows")
    def related(self, obj: Conversation) -> str:
        return conversation_links(obj.pk)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return admin.ModelAdmin.has_delete_permission(self, request, obj)

    def get_deleted_objects(self, objs, request):
        """Counts instead of listing every cascaded row (events can be millions)."""
        objs = list(objs)
        ids = [obj.pk for obj in objs]
        model_count = {
            model._meta.verbose_name_plural: model.objects.filter(conversation_id__in=ids).count()
            for model in (Turn, ConversationEvent, ToolCall, Asset, ToolActivity)
        }
        perms_needed = set() if self.has_delete_permission(request) else {self.opts.verbose_name}
        return [str(obj) for obj in objs], model_count, perms_needed, []

    def delete_model(self, request, obj):
        conversation_delete(conversation_id=obj.pk)

    def delete_queryset(self, request, queryset):
        for conversation_id in queryset.values_list("pk", flat=True):
            conversation_delete(conversation_id=conversation_id)


@admin.register(Turn)
class TurnAdmin(RowColumnsMixin, ExactSearchMixin, ReadOnlyAdmin):
    list_display = (
        "short_id",
        "conversation_link",
        "ordinal",
        "status",
        "origin",
        "end_reason",
        "created_at",
        "ended_at",
    )
    # Newest first; each filter has an index that also gives the order (turn_status_recent,
    # turn_origin_recent).
    list_filter = ("status", "origin")
    list_select_related = ("conversation",)
    ordering = ("-created_at",)
    search_fields = ("command", "input_id", "conversation__title", "conversation__owner__username")
    uuid_search_fields = ("id", "conversation_id")
    fields = (
        "id",
        "conversation",
        "ordinal",
        "status",
        "origin",
        "end_reason",
        "input_id",
        "command",
        "include_in_context",
        "created_at",
        "ended_at",
        "related",
    )
    readonly_fields = fields

    @admin.display(description="related rows")
    def related(self, obj: Turn) -> str:
        return turn_links(obj.pk)
