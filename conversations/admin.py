"""The admin for support staff (spec operations.md, "Admin (for support staff)").

Every row here changes only through the services: the forms are read-only, and the actions
(cancel, release a claim, recovery sweep, revoke, verify) call a service and report with
``message_user``. The timeline panels are built by the read-only selectors below. Conversations
are deleted through ``conversation_delete``; nothing else can be deleted here.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Exists, OuterRef, Q, TextField
from django.db.models.fields.json import KT
from django.db.models.functions import Cast
from django.http import HttpRequest, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.http import url_has_allowed_host_and_scheme

from tools.recovery import recover_all, recover_call

from .assets import asset_verify
from .auth import token_revoke
from .errors import AssetCorrupt, DomainError
from .models import (
    ApiToken,
    Asset,
    Conversation,
    ConversationEvent,
    ExecutionClaim,
    ToolActivity,
    ToolCall,
    Turn,
)
from .services.activity import activity_state
from .services.cancel import call_cancel
from .services.conversations import conversation_delete
from .storage import absolute_from_data

PRETTY_MAX_CHARS = 20_000  # a JSON value shown on a page is cut here
TURN_EVENTS_MAX = 50  # events of a turn listed in a timeline; the rest via the changelist
REPORT_MAX_LINES = 20  # lines of a recovery report shown in one message

# --- Small read-only helpers -----------------------------------------------------------------


def as_uuid(text: Any) -> UUID | None:
    try:
        return UUID(str(text).strip())
    except ValueError:
        return None


def json_text(path: str) -> Cast:
    """A JSON key as text to compare with. (``KT`` alone compares as JSON on SQLite, and the
    columns are ``json``, not ``jsonb``, on PostgreSQL, which has no ``=`` for ``json``.)"""
    return Cast(KT(path), output_field=TextField())


def pretty(value: Any) -> str:
    """Indented JSON, cut at ``PRETTY_MAX_CHARS`` (payloads can be large)."""
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    if len(text) > PRETTY_MAX_CHARS:
        more = len(text) - PRETTY_MAX_CHARS
        text = f"{text[:PRETTY_MAX_CHARS]}\n… ({more:,} more characters)"
    return text


def pre(value: Any) -> str:
    if value is None:
        return "—"
    return format_html('<pre style="white-space:pre-wrap;margin:0">{}</pre>', pretty(value))


def change_url(obj: Any) -> str:
    opts = obj._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])


def changelist_url(model: Any, **params: Any) -> str:
    opts = model._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    if params:
        url += "?" + urlencode({key: str(value) for key, value in params.items()})
    return url


def link(obj: Any, text: Any = None) -> str:
    if obj is None:
        return "—"
    return format_html('<a href="{}">{}</a>', change_url(obj), text if text is not None else obj)


def call_url(call_id: Any) -> str:
    """The call's page; for a settled call it redirects to its response event."""
    return reverse("admin:conversations_toolcall_change", args=[call_id])


def short(value: Any) -> str:
    return str(value)[:8] if value else "—"


# --- Mixins ----------------------------------------------------------------------------------


class ReadOnlyAdmin(admin.ModelAdmin):
    """View-only: rows change through services (actions), never through a form."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """Actions that call a service need the model's Django ``change`` permission."""
        opts = self.opts
        return request.user.has_perm(f"{opts.app_label}.change_{opts.model_name}")


class ExactSearchMixin:
    """A search term that is a UUID (or a number) matches those columns exactly, using their
    indexes, instead of ``icontains`` over every search field."""

    uuid_search_fields: tuple[str, ...] = ()
    int_search_fields: tuple[str, ...] = ()

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        value: Any = as_uuid(term) if self.uuid_search_fields else None
        fields = self.uuid_search_fields
        if value is None and self.int_search_fields and term.isdigit():
            value, fields = int(term), self.int_search_fields
        if value is not None:
            query = Q()
            for field in fields:
                query |= Q(**{field: value})
            return queryset.filter(query), False
        return super().get_search_results(request, queryset, search_term)  # type: ignore[misc]


# --- Filters ---------------------------------------------------------------------------------


class ClaimExpiredFilter(admin.SimpleListFilter):
    title = "claim expired"
    parameter_name = "claim_expired"
    expires_field = "claim__expires_at"

    def lookups(self, request, model_admin):
        return [("yes", "Yes"), ("no", "No")]

    def queryset(self, request, queryset):
        now = timezone.now()
        if self.value() == "yes":
            return queryset.filter(**{f"{self.expires_field}__lte": now})
        if self.value() == "no":
            return queryset.filter(**{f"{self.expires_field}__gt": now})
        return queryset


class ExecutionClaimExpiredFilter(ClaimExpiredFilter):
    expires_field = "expires_at"


class ActivityStatusFilter(admin.SimpleListFilter):
    """The ``tool.updated`` status; for settled calls it is their outcome (denied → declined)."""

    title = "status (outcome)"
    parameter_name = "status"
    STATUSES = (
        "pending",
        "awaiting_approval",
        "in_progress",
        "awaiting_input",
        "completed",
        "failed",
        "declined",
        "cancelled",
        "indeterminate",
    )

    def lookups(self, request, model_admin):
        return [(s, s.replace("_", " ")) for s in self.STATUSES]

    def queryset(self, request, queryset):
        if self.value():
            return queryset.alias(_status=json_text("state_json__status")).filter(
                _status=self.value()
            )
        return queryset


class EventOutcomeFilter(admin.SimpleListFilter):
    title = "outcome"
    parameter_name = "outcome"

    def lookups(self, request, model_admin):
        return [(o, o) for o in ("completed", "failed", "denied", "cancelled", "indeterminate")]

    def queryset(self, request, queryset):
        if self.value():
            return (
                queryset.filter(type=ConversationEvent.Type.TOOL_CALL_RESPONSE)
                .alias(_outcome=json_text("payload__outcome"))
                .filter(_outcome=self.value())
            )
        return queryset


class UnfinishedCallsFilter(admin.SimpleListFilter):
    title = "unfinished calls"
    parameter_name = "unfinished"

    def lookups(self, request, model_admin):
        return [("yes", "Yes"), ("no", "No")]

    def queryset(self, request, queryset):
        has = Exists(ToolCall.objects.filter(conversation_id=OuterRef("pk")))
        if self.value() == "yes":
            return queryset.filter(has)
        if self.value() == "no":
            return queryset.filter(~has)
        return queryset


class TokenStatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "token_status"

    def lookups(self, request, model_admin):
        return [("live", "Live"), ("revoked", "Revoked"), ("expired", "Expired")]

    def queryset(self, request, queryset):
        now = timezone.now()
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        if self.value() == "expired":
            return queryset.filter(revoked_at__isnull=True, expires_at__lte=now)
        if self.value() == "live":
            return queryset.filter(revoked_at__isnull=True).exclude(expires_at__lte=now)
        return queryset


# --- Timeline selectors (read only) ----------------------------------------------------------


def claim_summary(claim: ExecutionClaim | None) -> dict[str, Any] | None:
    if claim is None:
        return None
    left = (claim.expires_at - timezone.now()).total_seconds()
    return {
        "worker": claim.worker,
        "generation": claim.generation,
        "acquired_at": claim.acquired_at,
        "heartbeat_at": claim.heartbeat_at,
        "expires_at": claim.expires_at,
        "lease_left": max(0, int(left)),
        "expired": left <= 0,
        "url": change_url(claim),
    }


def asset_rows(assets: Any) -> list[dict[str, Any]]:
    rows = []
    for asset in assets:
        try:
            absolute = str(absolute_from_data(asset.path))
        except ValueError:
            absolute = f"{asset.path} (outside DATA_DIR)"
        rows.append(
            {
                "asset": asset,
                "path": absolute,
                "url": change_url(asset),
                "verify_url": reverse("admin:conversations_asset_verify", args=[asset.pk]),
            }
        )
    return rows


def turn_events(turn_id: Any) -> tuple[list[dict[str, Any]], bool]:
    """The first ``TURN_EVENTS_MAX`` events of a turn (payloads not loaded) and whether more exist."""
    rows = list(
        ConversationEvent.objects.filter(turn_id=turn_id)
        .defer("payload")
        .annotate(outcome=KT("payload__outcome"))
        .order_by("sequence")[: TURN_EVENTS_MAX + 1]
    )
    listed = [{"event": event, "url": change_url(event)} for event in rows[:TURN_EVENTS_MAX]]
    return listed, len(rows) > TURN_EVENTS_MAX


def wire_state(call_id: Any) -> str | None:
    activity = ToolActivity.objects.filter(tool_call_id=call_id).first()
    return None if activity is None else pretty(activity_state(activity))


def _message_event(conversation_id: Any, sequence: Any) -> ConversationEvent | None:
    if not isinstance(sequence, int):
        return None
    return ConversationEvent.objects.filter(
        conversation_id=conversation_id, sequence=sequence
    ).first()


def _call_block(event: ConversationEvent | None, index: Any) -> str | None:
    content = (event.payload or {}).get("content") if event is not None else None
    if not isinstance(content, list) or not isinstance(index, int) or not 0 <= index < len(content):
        return None
    return pretty(content[index])


def _timeline_base(
    *, turn_id: Any, assistant: ConversationEvent | None, index: Any, assets: Any
) -> dict[str, Any]:
    events, more = turn_events(turn_id) if turn_id else ([], False)
    return {
        "assistant_event": assistant,
        "assistant_url": change_url(assistant) if assistant else None,
        # Listed on its own only when it is not among the turn's events shown.
        "assistant_apart": assistant is not None
        and all(row["event"].pk != assistant.pk for row in events),
        "assistant_block": _call_block(assistant, index),
        "events": events,
        "events_more": more,
        "events_url": changelist_url(ConversationEvent, turn__id__exact=turn_id)
        if turn_id
        else None,
        "assets": asset_rows(assets),
    }


def call_timeline(call: ToolCall) -> dict[str, Any]:
    """An unfinished call: events, claim, interaction and resolution, assets, wire projection."""
    timeline = _timeline_base(
        turn_id=call.turn_id,
        assistant=call.assistant_event,
        index=call.content_index,
        assets=Asset.objects.filter(tool_call_id=call.pk).order_by("created_at"),
    )
    claim = ExecutionClaim.objects.filter(call_id=call.pk).first()
    timeline.update(
        call_id=call.pk,
        settled=False,
        claim=claim_summary(claim),
        interaction=pretty(call.interaction or call.resolved_interaction)
        if (call.interaction or call.resolved_interaction)
        else None,
        resolution=pretty(call.resolution) if call.resolution is not None else None,
        resolution_request_id=call.resolution_request_id,
        resolved_by=call.resolved_by,
        model=None,
        transcript=None,
        wire=wire_state(call.pk),
    )
    return timeline


def response_timeline(event: ConversationEvent) -> dict[str, Any]:
    """A settled call, from its ``tool_call_response``: the same panel, with its projections."""
    payload = event.payload if isinstance(event.payload, dict) else {}
    assistant = _message_event(event.conversation_id, payload.get("assistantSequence"))
    assets = Asset.objects.filter(Q(event_id=event.pk) | Q(tool_call_id=event.tool_call_id))
    timeline = _timeline_base(
        turn_id=event.turn_id,
        assistant=assistant,
        index=payload.get("contentIndex"),
        assets=assets.order_by("created_at"),
    )
    model = []
    for block in payload.get("modelContent") or []:
        is_text = isinstance(block, dict) and block.get("type") == "text"
        model.append(block.get("text", "") if is_text else pretty(block))
    transcript = payload.get("userProjection") or {}
    timeline.update(
        call_id=event.tool_call_id,
        settled=True,
        outcome=payload.get("outcome"),
        attempts=payload.get("attempts"),
        claim=None,
        interaction=pretty(payload["interaction"]) if payload.get("interaction") else None,
        resolution=pretty(payload["resolution"]) if payload.get("resolution") is not None else None,
        resolution_request_id=payload.get("resolutionRequestId"),
        resolved_by=payload.get("resolvedBy"),
        model=model,
        transcript={
            "args": transcript.get("argsPreview") or [],
            "result": transcript.get("resultPreview") or [],
            "overflow": transcript.get("previewOverflow"),
        },
        wire=wire_state(event.tool_call_id),
    )
    return timeline


# --- Conversations and turns -----------------------------------------------------------------


def conversation_links(conversation_id: Any) -> str:
    from tools.models import AsyncRun, PermissionRule

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
    return format_html_join(" · ", '<a href="{}">{}</a>', ((url, label) for label, url in targets))


@admin.register(Conversation)
class ConversationAdmin(ExactSearchMixin, ReadOnlyAdmin):
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

    @admin.display(description="id")
    def short_id(self, obj: Conversation) -> str:
        return short(obj.pk)

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
class TurnAdmin(ExactSearchMixin, ReadOnlyAdmin):
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
    list_filter = ("status", "origin", "end_reason", "include_in_context")
    list_select_related = ("conversation",)
    search_fields = ("command", "input_id", "conversation__title", "conversation__owner__username")
    uuid_search_fields = ("id", "conversation_id")
    show_full_result_count = False
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

    @admin.display(description="id")
    def short_id(self, obj: Turn) -> str:
        return short(obj.pk)

    @admin.display(description="conversation")
    def conversation_link(self, obj: Turn) -> str:
        return link(obj.conversation)

    @admin.display(description="related rows")
    def related(self, obj: Turn) -> str:
        tid = {"turn__id__exact": obj.pk}
        return format_html(
            '<a href="{}">events</a> · <a href="{}">unfinished calls</a> · <a href="{}">activities</a>',
            changelist_url(ConversationEvent, **tid),
            changelist_url(ToolCall, **tid),
            changelist_url(ToolActivity, **tid),
        )


# --- Events (read only: no add, no change, no delete) ----------------------------------------


@admin.register(ConversationEvent)
class ConversationEventAdmin(ExactSearchMixin, ReadOnlyAdmin):
    change_form_template = "admin/conversations/conversationevent/change_form.html"
    list_display = (
        "id",
        "sequence",
        "type",
        "outcome",
        "conversation_link",
        "turn_ordinal",
        "tool_call_id",
        "created_at",
    )
    list_filter = ("type", EventOutcomeFilter)
    list_select_related = ("conversation", "turn")
    search_fields = ("message_id", "conversation__title", "conversation__owner__username")
    uuid_search_fields = ("tool_call_id", "conversation_id", "turn_id")
    int_search_fields = ("id",)
    show_full_result_count = False
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

    def get_queryset(self, request):
        # Payloads can be large: the list reads only the outcome, in the database; the change
        # page loads the payload when it shows it.
        queryset = super().get_queryset(request).defer("payload")
        return queryset.annotate(_outcome=KT("payload__outcome"))

    @admin.display(description="outcome")
    def outcome(self, obj: ConversationEvent) -> str:
        return getattr(obj, "_outcome", None) or ""

    @admin.display(description="conversation")
    def conversation_link(self, obj: ConversationEvent) -> str:
        return link(obj.conversation)

    @admin.display(description="turn")
    def turn_ordinal(self, obj: ConversationEvent) -> Any:
        return obj.turn.ordinal if obj.turn_id else "—"

    @admin.display(description="payload")
    def payload_pretty(self, obj: ConversationEvent) -> str:
        return pre(obj.payload)

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None and obj.type == ConversationEvent.Type.TOOL_CALL_RESPONSE:
            context["timeline"] = response_timeline(obj)
        return super().render_change_form(request, context, add, change, form_url, obj)


# --- Unfinished calls and claims -------------------------------------------------------------


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
    """Recovery for each call, treating a running call's claim as expired (``force``)."""
    done, idle = [], 0
    for call_id in call_ids:
        action = recover_call(call_id=call_id, force=True)
        if action is None:
            idle += 1
        else:
            done.append(str(action))
    if done:
        modeladmin.message_user(request, "Released: " + "; ".join(done), messages.SUCCESS)
    if idle:
        modeladmin.message_user(
            request,
            f"{idle} call(s) had nothing to recover (already settled or moved on).",
            messages.WARNING,
        )


@admin.register(ToolCall)
class ToolCallAdmin(ExactSearchMixin, ReadOnlyAdmin):
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

    @admin.display(description="id")
    def short_id(self, obj: ToolCall) -> str:
        return short(obj.pk)

    @admin.display(description="conversation")
    def conversation_link(self, obj: ToolCall) -> str:
        return link(obj.conversation)

    @admin.display(description="turn")
    def turn_ordinal(self, obj: ToolCall) -> int:
        return obj.turn.ordinal

    @admin.display(description="worker")
    def claim_worker(self, obj: ToolCall) -> str:
        claim = getattr(obj, "claim", None)
        return claim.worker if claim else "—"

    @admin.display(description="lease left (s)")
    def lease_left(self, obj: ToolCall) -> str:
        summary = claim_summary(getattr(obj, "claim", None))
        if summary is None:
            return "—"
        return "expired" if summary["expired"] else str(summary["lease_left"])

    @admin.display(description="arguments")
    def arguments_pretty(self, obj: ToolCall) -> str:
        return pre(obj.arguments)

    @admin.display(description="supervision")
    def supervision_pretty(self, obj: ToolCall) -> str:
        return pre(obj.supervision)

    # Actions: each calls a service and reports; none writes a row itself.

    @admin.action(description="Cancel selected calls", permissions=["operate"])
    def cancel_calls(self, request, queryset):
        outcomes: Counter[str] = Counter()
        for call_id in queryset.values_list("id", flat=True):
            try:
                answer = call_cancel(call_id=call_id)
            except DomainError as exc:
                self.message_user(
                    request, f"Call {call_id}: not cancelled: {exc.message}", messages.ERROR
                )
                continue
            settled = "already settled " if answer["alreadySettled"] else ""
            outcomes[f"{settled}{answer['outcome']}"] += 1
        if outcomes:
            self.message_user(request, f"Cancelled: {_count_line(outcomes)}.", messages.SUCCESS)

    @admin.action(
        description="Release expired claim (run recovery for this call)", permissions=["operate"]
    )
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

    def changelist_view(self, request, extra_context=None):
        extra = {"can_operate": self.has_operate_permission(request), **(extra_context or {})}
        return super().changelist_view(request, extra)

    def get_search_results(self, request, queryset, search_term):
        found, duplicates = super().get_search_results(request, queryset, search_term)
        call_id = as_uuid(search_term)
        if call_id is not None and not ToolCall.objects.filter(pk=call_id).exists():
            event = ConversationEvent.objects.filter(tool_call_id=call_id).only("pk").first()
            if event is not None:
                self.message_user(
                    request,
                    format_html(
                        'Call {} has settled: see <a href="{}">its response</a>.',
                        call_id,
                        change_url(event),
                    ),
                    messages.INFO,
                )
        return found, duplicates

    def change_view(self, request, object_id, form_url="", extra_context=None):
        call_id = as_uuid(object_id)
        if call_id is not None and not ToolCall.objects.filter(pk=call_id).exists():
            # Settled calls have no row any more: their timeline is on the response event.
            event = ConversationEvent.objects.filter(tool_call_id=call_id).only("pk").first()
            if event is not None:
                self.message_user(
                    request, f"Call {call_id} has settled; this is its response.", messages.INFO
                )
                return HttpResponseRedirect(change_url(event))
        extra = {"can_operate": self.has_operate_permission(request), **(extra_context or {})}
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
        return format_html('<a href="{}">{}</a>', call_url(obj.call_id), obj.call_id)

    @admin.display(description="tool", ordering="call__tool_name")
    def tool_name(self, obj: ExecutionClaim) -> str:
        return obj.call.tool_name

    @admin.display(description="lease left (s)")
    def lease_left(self, obj: ExecutionClaim) -> str:
        summary = claim_summary(obj)
        assert summary is not None
        return "expired" if summary["expired"] else str(summary["lease_left"])

    @admin.action(
        description="Release expired claim (run recovery for this call)", permissions=["operate"]
    )
    def release_expired_claims(self, request, queryset):
        release_claims(self, request, list(queryset.values_list("call_id", flat=True)))


# --- Assets and activity ---------------------------------------------------------------------


def verify_assets(modeladmin: admin.ModelAdmin, request: HttpRequest, assets: Any) -> None:
    """Re-hash each asset's file (``asset_verify(force=True)``) and report OK or corrupt."""
    for asset in assets:
        label = f"Asset {asset.pk} ({asset.kind}, {asset.size} bytes)"
        try:
            asset_verify(asset, force=True)
        except AssetCorrupt as exc:
            modeladmin.message_user(request, f"{label}: corrupt: {exc.message}", messages.ERROR)
        else:
            modeladmin.message_user(request, f"{label}: OK, SHA-256 matches.", messages.SUCCESS)


@admin.register(Asset)
class AssetAdmin(ExactSearchMixin, ReadOnlyAdmin):
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
    list_filter = ("kind", "truncated", "media_type")
    list_select_related = ("conversation",)
    search_fields = ("path", "^sha256", "conversation__title")
    uuid_search_fields = ("id", "tool_call_id", "conversation_id", "event__tool_call_id")
    show_full_result_count = False
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

    @admin.display(description="id")
    def short_id(self, obj: Asset) -> str:
        return short(obj.pk)

    @admin.display(description="sha256")
    def digest(self, obj: Asset) -> str:
        return obj.sha256[:12]

    @admin.display(description="conversation")
    def conversation_link(self, obj: Asset) -> str:
        return link(obj.conversation)

    @admin.display(description="call")
    def call_link(self, obj: Asset) -> str:
        if obj.tool_call_id is None:
            return "—"
        return format_html('<a href="{}">{}</a>', call_url(obj.tool_call_id), obj.tool_call_id)

    @admin.display(description="absolute path")
    def absolute_path(self, obj: Asset) -> str:
        try:
            return str(absolute_from_data(obj.path))
        except ValueError:
            return f"{obj.path} (outside DATA_DIR)"

    @admin.display(description="verify")
    def verify_link(self, obj: Asset) -> str:
        url = reverse("admin:conversations_asset_verify", args=[obj.pk])
        return format_html('<a href="{}">Verify digest (re-hash the file)</a>', url)

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
class ToolActivityAdmin(ExactSearchMixin, ReadOnlyAdmin):
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
    list_filter = (ActivityStatusFilter, "is_final")
    list_select_related = ("conversation",)
    search_fields = ("state_json__toolName", "state_json__title", "conversation__title")
    uuid_search_fields = ("tool_call_id", "conversation_id", "turn_id")
    show_full_result_count = False
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
        return format_html('<a href="{}">{}</a>', call_url(obj.tool_call_id), obj.tool_call_id)

    @admin.display(description="status")
    def status(self, obj: ToolActivity) -> str:
        return str(obj.state_json.get("status", ""))

    @admin.display(description="tool")
    def tool_name(self, obj: ToolActivity) -> str:
        return str(obj.state_json.get("toolName", ""))

    @admin.display(description="kind")
    def kind(self, obj: ToolActivity) -> str:
        return str(obj.state_json.get("kind", ""))

    @admin.display(description="conversation")
    def conversation_link(self, obj: ToolActivity) -> str:
        return link(obj.conversation)

    @admin.display(description="tool.updated state (wire projection)")
    def wire_state(self, obj: ToolActivity) -> str:
        return pre(activity_state(obj))


# --- API tokens ------------------------------------------------------------------------------


@admin.register(ApiToken)
class ApiTokenAdmin(ExactSearchMixin, ReadOnlyAdmin):
    """Tokens are created by ``python manage.py create_token`` (the secret is shown once there).

    The digest is never shown whole nor editable: only its first characters, to recognise a row.
    """

    list_display = (
        "id",
        "name",
        "user",
        "digest_prefix",
        "scopes",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    )
    list_filter = (TokenStatusFilter,)
    list_select_related = ("user",)
    search_fields = ("name", "user__username", "user__email")
    int_search_fields = ("id",)
    fields = (
        "id",
        "user",
        "name",
        "digest_prefix",
        "scopes",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    )
    readonly_fields = fields
    actions = ("revoke_tokens",)

    @admin.display(description="digest")
    def digest_prefix(self, obj: ApiToken) -> str:
        return f"{obj.digest[:8]}…"

    @admin.action(description="Revoke selected tokens", permissions=["operate"])
    def revoke_tokens(self, request, queryset):
        revoked = skipped = 0
        for token_id in queryset.values_list("id", flat=True):
            if token_revoke(token_id=token_id):
                revoked += 1
            else:
                skipped += 1
        self.message_user(request, f"Revoked {revoked} token(s).", messages.SUCCESS)
        if skipped:
            self.message_user(
                request, f"{skipped} token(s) were already revoked.", messages.WARNING
            )
