"""Tool calls and their execution claims.

The tool-call list holds the unfinished calls; a search for any call id, unfinished or settled,
lands on the call's page (``callpage.py``), which is also where ``call_url`` points. The page's
buttons post to ``<call id>/<operation>/`` and run one of ``operations.CALL_OPERATIONS``; the
lists' actions run the same services on a selection. None writes a row itself.
"""

from __future__ import annotations

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, re_path

from ..models import ConversationEvent, ExecutionClaim, ToolCall
from .callpage import call_page, is_call
from .common import (
    ExactSearchMixin,
    ReadOnlyAdmin,
    RowColumnsMixin,
    as_uuid,
    call_url,
    changelist_url,
    link_to_call,
    subject_columns,
    subject_text,
    tool_label,
)
from .filters import ClaimExpiredFilter, ExecutionClaimExpiredFilter
from .operations import CALL_OPERATIONS, cancel_and_report, release_claims, sweep
from .timeline import claim_summary

RELEASE_DESCRIPTION = "Release expired claim (run recovery for this call)"

# --- Read-only helpers -----------------------------------------------------------------------


def lease_left_text(claim: ExecutionClaim | None) -> str:
    """Seconds left on the claim's lease, ``expired``, or a dash when there is no claim."""
    summary = claim_summary(claim)
    if summary is None:
        return "—"
    return "expired" if summary["expired"] else str(summary["lease_left"])


# --- Admins ----------------------------------------------------------------------------------


@admin.register(ToolCall)
class ToolCallAdmin(RowColumnsMixin, ExactSearchMixin, ReadOnlyAdmin):
    change_list_template = "admin/conversations/toolcall/change_list.html"
    call_page_template = "admin/conversations/toolcall/call_page.html"
    list_display = (
        "short_id",
        "tool",
        "state",
        "subject",
        "conversation_link",
        "turn_ordinal",
        "claim_column",
        "generation_attempt",
        "created_at",
    )
    list_filter = ("state", "tool_name", "origin", ClaimExpiredFilter, "claim__worker")
    list_select_related = ("conversation", "turn", "claim")
    search_fields = ("provider_call_id", "tool_name", "arguments__command", "conversation__title")
    uuid_search_fields = ("id", "conversation_id", "turn_id")
    date_hierarchy = "created_at"
    actions = ("cancel_calls", "release_expired_claims", "run_recovery_sweep")

    def get_queryset(self, request):
        # The list reads the call's subject in the database, not whole arguments.
        return (
            super()
            .get_queryset(request)
            .defer("arguments", "supervision", "interaction", "resolution", "resolved_interaction")
            .annotate(**subject_columns("arguments"))
        )

    @admin.display(description="tool", ordering="tool_name")
    def tool(self, obj: ToolCall) -> str:
        return tool_label(obj.tool_name)

    @admin.display(description="command or path")
    def subject(self, obj: ToolCall) -> str:
        return subject_text(obj.tool_name, obj) or "—"

    @admin.display(description="claim (lease left)")
    def claim_column(self, obj: ToolCall) -> str:
        claim = getattr(obj, "claim", None)
        if claim is None:
            return "—"
        left = lease_left_text(claim)
        return f"{claim.worker} ({left if left == 'expired' else f'{left} s'})"

    @admin.display(description="gen. / attempt", ordering="generation")
    def generation_attempt(self, obj: ToolCall) -> str:
        return f"{obj.generation} / {obj.attempt}"

    # Actions: each calls a service and reports; none writes a row itself.

    @admin.action(description="Cancel selected calls", permissions=["operate"])
    def cancel_calls(self, request, queryset):
        cancel_and_report(self, request, queryset.values_list("id", flat=True))

    @admin.action(description=RELEASE_DESCRIPTION, permissions=["operate"])
    def release_expired_claims(self, request, queryset):
        release_claims(self, request, list(queryset.values_list("id", flat=True)))

    @admin.action(
        description="Run recovery sweep (all calls; the selection is ignored)",
        permissions=["operate"],
    )
    def run_recovery_sweep(self, request, queryset):
        sweep(self, request)

    def get_urls(self):
        view = self.admin_site.admin_view
        operations = "|".join(CALL_OPERATIONS)
        return [
            path("recover/", view(self.recover_view), name="conversations_toolcall_recover"),
            re_path(
                rf"^(?P<call_id>[0-9a-f-]{{36}})/(?P<operation>{operations})/$",
                view(self.operate_view),
                name="conversations_toolcall_operate",
            ),
            *super().get_urls(),
        ]

    def recover_view(self, request):
        """The changelist's "Run recovery sweep" button (works with no unfinished call left)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_operate_permission(request):
            raise PermissionDenied
        sweep(self, request)
        return HttpResponseRedirect(changelist_url(ToolCall))

    def operate_view(self, request: HttpRequest, call_id: str, operation: str):
        """A call page's button: one operation on one call, then back to the call's page
        (which, once the call settled, is built from its response)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_operate_permission(request):
            raise PermissionDenied
        call = as_uuid(call_id)
        if call is None:
            raise PermissionDenied
        CALL_OPERATIONS[operation](self, request, call)
        return HttpResponseRedirect(call_url(call))

    def _operate_context(self, request, extra_context):
        return {"can_operate": self.has_operate_permission(request), **(extra_context or {})}

    def changelist_view(self, request, extra_context=None):
        # A search for a call id, unfinished or settled, opens that call's page.
        call_id = as_uuid(request.GET.get("q", "")) if request.method == "GET" else None
        if call_id is not None and is_call(call_id):
            return HttpResponseRedirect(call_url(call_id))
        context = {
            "settled_url": changelist_url(
                ConversationEvent, type__exact=ConversationEvent.Type.TOOL_CALL_RESPONSE
            ),
            **self._operate_context(request, extra_context),
        }
        return super().changelist_view(request, context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        """The call page, for an unfinished call (its row) or a settled one (its response).
        Read only: its buttons post to ``operate_view``."""
        if request.method not in ("GET", "HEAD") or not self.has_view_permission(request):
            raise PermissionDenied
        page = call_page(object_id, viewer=request.user)
        if page is None:  # no such call: Django's "not found" message and redirect
            return super().change_view(request, object_id, form_url, extra_context)
        summary = page.summary
        context = {
            **self.admin_site.each_context(request),
            **self._operate_context(request, extra_context),
            "opts": self.opts,
            "title": summary.title,
            "subtitle": None,
            "summary": summary,
            "timeline": page.timeline,
            "original": page.call,
            "response": page.response,
            "changelist_url": changelist_url(ToolCall),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.call_page_template, context)


@admin.register(ExecutionClaim)
class ExecutionClaimAdmin(ExactSearchMixin, ReadOnlyAdmin):
    list_display = (
        "call_link",
        "tool_name",
        "worker",
        "generation",
        "acquired_at",
        "heartbeat_at",
        "expires_at",
        "lease_left",
    )
    list_filter = (ExecutionClaimExpiredFilter, "worker", "call__tool_name")
    list_select_related = ("call",)
    ordering = ("expires_at",)
    search_fields = ("worker", "call__tool_name", "call__provider_call_id")
    uuid_search_fields = ("call_id",)
    fields = (
        "call",
        "worker",
        "generation",
        "acquired_at",
        "heartbeat_at",
        "expires_at",
        "lease_left",
        "created_at",
    )
    readonly_fields = fields
    actions = ("release_expired_claims",)

    @admin.display(description="call")
    def call_link(self, obj: ExecutionClaim) -> str:
        return link_to_call(obj.call_id)

    @admin.display(description="tool", ordering="call__tool_name")
    def tool_name(self, obj: ExecutionClaim) -> str:
        return obj.call.tool_name

    @admin.display(description="lease left (s)")
    def lease_left(self, obj: ExecutionClaim) -> str:
        return lease_left_text(obj)

    @admin.action(description=RELEASE_DESCRIPTION, permissions=["operate"])
    def release_expired_claims(self, request, queryset):
        release_claims(self, request, list(queryset.values_list("call_id", flat=True)))
