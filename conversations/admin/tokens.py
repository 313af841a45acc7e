"""API tokens: listed with their status, revoked through ``token_revoke``."""

from __future__ import annotations

from django.contrib import admin, messages

from ..api.auth import token_revoke
from ..models import ApiToken
from .common import ExactSearchMixin, ReadOnlyAdmin
from .filters import TokenStatusFilter


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
