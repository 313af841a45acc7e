"""Unfinished calls and their execution claims, and the actions that operate on them: cancel,
release a claim, run the recovery sweep. Each action calls a service and reports with
``message_user``; none writes a row itself."""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import path
from django.utils.html import format_html

from ..errors import DomainError
from ..models import ConversationEvent, ExecutionClaim, ToolCall
from ..services.cancel import call_cancel
from ..services.recovery import recover_all, recover_call
from .common import (
    ExactSearchMixin,
    ReadOnlyAdmin,
    RowColumnsMixin,
    as_uuid,
    change_url,
    changelist_url,
    link_to_call,
    pre,
)
from .filters import ClaimExpiredFilter, ExecutionClaimExpiredFilter
from .timeline import call_timeline, claim_summary

REPORT_MAX_LINES = 20  # lines of a recovery report shown in one message

RELEASE_DESCRIPTION = "Release expired claim (run recovery for this call)"

# --- Read-only helpers -----------------------------------------------------------------------


def lease_left_text(claim: ExecutionClaim | None) -> str:
    """Seconds left on the claim's lease, ``expired``, or a dash when there is no claim."""
    summary = claim_summary(claim)
    if summary is None:
        return "—"
    return "expired" if summary["expired"] else str(summary["lease_left"])


def settled_response(object_id: Any) -> ConversationEvent | None:
    """The response event of the settled call ``object_id`` names; ``None`` if it is no call
    id, the call is unfinished (its row still exists) or it never was."""
    call_id = as_uuid(object_id)
    if call_id is None or ToolCall.objects.filter(pk=call_id).exists():
        return None
    return ConversationEvent.objects.filter(tool_call_id=call_id).only("pk", "tool_call_id").first()


# --- Reports of the service calls ------------------------------------------------------------


def _count_line(counts: Counter[str]) -> str:
    return ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))


def report_recovery(modeladmin: admin.ModelAdmin, request: HttpRequest, actions: list[Any]) -> None:
    if not actions:
        modeladmin.message_user(request, "Recovery sweep: nothing to do.", messages.INFO)
        return
    lines = [str(action) for action in actions[:REPORT_MAX_LINES]]
    if len(actions) > REPORT_MAX_LINES:
        lines.append(f"… and {len(actions) - REPORT_MAX_LINES} more")
    modeladmin.message_user(
        request, f"Recovery sweep: {len(actions)} action(s): " + "; ".join(lines), messages.SUCCESS
    )


def release_claims(modeladmin: admin.ModelAdmin, request: HttpRequest, call_ids: list[Any]) -> None:
    """Recovery for each call whose claim expired. A live claim is left to its worker, which
    still renews it: releasing it would throw away a result that is on its way."""
    done, live, idle = [], [], 0
    for call_id in call_ids:
        action = recover_call(call_id=call_id)
        if action is not None:
            done.append(str(action))
            continue
        claim = ExecutionClaim.objects.filter(call_id=call_id).first()
        summary = claim_summary(claim)
        if summary is not None and not summary["expired"]:
            live.append(f"{call_id} ({summary['lease_left']} s left, {claim.worker})")
        else:
            idle += 1
    if done:
        modeladmin.message_user(request, "Released: " + "; ".join(done), messages.SUCCESS)
    if live:
        modeladmin.message_user(
            request,
            "Not released, the claim is live (its worker renews it): " + "; ".join(live),
            messages.WARNING,
        )
    if idle:
        modeladmin.message_user(
            request,
            f"{idle} call(s) had nothing to recover (already settled or moved on).",
            messages.WARNING,
        )


def cancel_and_report(modeladmin: admin.ModelAdmin, request: HttpRequest, call_ids: Any) -> None:
    """``call_cancel`` for each call; one error message per refusal, one summary of outcomes."""
    outcomes: Counter[str] = Counter()
    for call_id in call_ids:
        try:
            answer = call_cancel(call_id=call_id)
        except DomainError as exc:
            modeladmin.message_user(
                request, f"Call {call_id}: not cancelled: {exc.message}", messages.ERROR
            )
            continue
        settled = "already settled " if answer["alreadySettled"] else ""
        outcomes[f"{settled}{answer['outcome']}"] += 1
    if outcomes:
        modeladmin.message_user(request, f"Cancelled: {_count_line(outcomes)}.", messages.SUCCESS)


# --- Admins ----------------------------------------------------------------------------------


@admin.register(ToolCall)
class ToolCallAdmin(RowColumnsMixin, ExactSearchMixin, ReadOnlyAdmin):
    change_form_template = "admin/conversations/toolcall/change_form.html"
    change_list_template = "admin/conversations/toolcall/change_list.html"
    list_display = (
        "short_id",
        "tool_name",
        "state",
        "origin",
        "conversation_link",
        "turn_ordinal",
        "generation",
        "attempt",
        "claim_worker",
        "lease_left",
        "created_at",
    )
    list_filter = ("state", "tool_name", "origin", ClaimExpiredFilter, "claim__worker")
    list_select_related = ("conversation", "turn", "claim")
    search_fields = ("provider_call_id", "tool_name", "arguments__command", "conversation__title")
    uuid_search_fields = ("id", "conversation_id", "turn_id")
    show_full_result_count = False
    date_hierarchy = "created_at"
    actions = ("cancel_calls", "release_expired_claims", "run_recovery_sweep")
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    "conversation",
                    "turn",
                    "assistant_event",
                    "provider_call_id",
                    "content_index",
                    "origin",
                    "tool_name",
                    "state",
                    "generation",
                    "attempt",
                    "permission_refused",
                    "created_at",
                    "updated_at",
                )
            },
        ),
        ("Arguments and supervision", {"fields": ("arguments_pretty", "supervision_pretty")}),
    )
    readonly_fields = (
        *fieldsets[0][1]["fields"],
        "arguments_pretty",
        "supervision_pretty",
    )

    @admin.display(description="worker")
    def claim_worker(self, obj: ToolCall) -> str:
        claim = getattr(obj, "claim", None)
        return claim.worker if claim else "—"

    @admin.display(description="lease left (s)")
    def lease_left(self, obj: ToolCall) -> str:
        return lease_left_text(getattr(obj, "claim", None))

    @admin.display(description="arguments")
    def arguments_pretty(self, obj: ToolCall) -> str:
        return pre(obj.arguments)

    @admin.display(description="supervision")
    def supervision_pretty(self, obj: ToolCall) -> str:
        return pre(obj.supervision)

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
        report_recovery(self, request, recover_all())

    def get_urls(self):
        sweep = path(
            "recover/",
            self.admin_site.admin_view(self.recover_view),
            name="conversations_toolcall_recover",
        )
        return [sweep, *super().get_urls()]

    def recover_view(self, request):
        """The changelist's "Run recovery sweep" button (works with no unfinished call left)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_operate_permission(request):
            raise PermissionDenied
        report_recovery(self, request, recover_all())
        return HttpResponseRedirect(changelist_url(ToolCall))

    def _operate_context(self, request, extra_context):
        return {"can_operate": self.has_operate_permission(request), **(extra_context or {})}

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(request, self._operate_context(request, extra_context))

    def get_search_results(self, request, queryset, search_term):
        found, duplicates = super().get_search_results(request, queryset, search_term)
        event = settled_response(search_term)
        if event is not None:
            self.message_user(
                request,
                format_html(
                    'Call {} has settled: see <a href="{}">its response</a>.',
                    event.tool_call_id,
                    change_url(event),
                ),
                messages.INFO,
            )
        return found, duplicates

    def change_view(self, request, object_id, form_url="", extra_context=None):
        # Settled calls have no row any more: their timeline is on the response event.
        event = settled_response(object_id)
        if event is not None:
            self.message_user(
                request,
                f"Call {event.tool_call_id} has settled; this is its response.",
                messages.INFO,
            )
            return HttpResponseRedirect(change_url(event))
        extra = self._operate_context(request, extra_context)
        return super().change_view(request, object_id, form_url, extra)

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            context["timeline"] = call_timeline(obj)
            context["changelist_url"] = changelist_url(ToolCall)
        return super().render_change_form(request, context, add, change, form_url, obj)


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
