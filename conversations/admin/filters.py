"""The changelists' sidebar filters (``SimpleListFilter``s); each narrows a queryset, no more."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Exists, OuterRef
from django.utils import timezone

from projections.vocabulary import OUTCOMES, TOOL_STATUSES

from ..models import ConversationEvent, ToolCall, json_text


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

    def lookups(self, request, model_admin):
        return [(s, s.replace("_", " ")) for s in TOOL_STATUSES]

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
        return [(o, o) for o in OUTCOMES]

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
