"""Pieces every admin module shares: small read-only display helpers, URLs, the capped
paginator, and the mixins that make an admin view-only and its search exact."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from django.contrib import admin
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import HttpRequest
from django.urls import reverse
from django.utils.functional import cached_property
from django.utils.html import format_html

from tools.catalog import SUBJECT_ARGUMENTS, mcp_tool_parts, tool_spec

from ..models import json_text
from ..storage import asset_store
from .times import SecondsMixin

PRETTY_MAX_CHARS = 20_000  # a JSON value shown on a page is cut here
SUBJECT_MAX_CHARS = 120  # a command or path cut in a list's row
COUNT_CAP_ROWS = 10_000  # a change list counts its rows up to here, then reads "10,000+"

# --- Values ----------------------------------------------------------------------------------


def as_uuid(text: Any) -> UUID | None:
    try:
        return UUID(str(text).strip())
    except ValueError:
        return None


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


def cut(text: Any, limit: int = SUBJECT_MAX_CHARS) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def call_subject(tool_name: str, arguments: Any) -> str:
    """What the call works on, as its permission rules see it before resolving a path
    (``ToolSpec.subject_of``): its command or its path; empty when there is none."""
    return tool_spec(tool_name).subject_of(arguments) or ""


def subject_columns(arguments: str) -> dict[str, Any]:
    """The arguments ``call_subject`` reads (``SUBJECT_ARGUMENTS``), read as text in the
    database from the JSON field ``arguments`` (``"arguments"``, ``"payload__arguments"``):
    annotations for a list that does not load whole arguments."""
    return {f"subject_{name}": json_text(f"{arguments}__{name}") for name in SUBJECT_ARGUMENTS}


def subject_text(tool_name: str, row: Any) -> str:
    """``call_subject``, cut, of a row annotated with ``subject_columns``."""
    arguments = {name: getattr(row, f"subject_{name}") for name in SUBJECT_ARGUMENTS}
    return cut(call_subject(tool_name, arguments))


def tool_label(tool_name: Any) -> str:
    """A call's tool as the admin shows it: an MCP server's tool by its own name with a small
    "MCP · <server>" label (the name read by ``tools/catalog.py`` ``mcp_tool_parts``), any other
    tool by its name."""
    name = str(tool_name or "")
    parts = mcp_tool_parts(name)
    if parts is None:
        return format_html("{}", name)
    return format_html(
        '<span title="{}">{}</span> <span class="tool-origin">MCP · {}</span>',
        name,
        parts[1],
        parts[0],
    )


def short(value: Any) -> str:
    return str(value)[:8] if value else "—"


# --- URLs and links --------------------------------------------------------------------------


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
    """The call's page, unfinished or settled (``ToolCallAdmin.change_view``)."""
    return reverse("admin:conversations_toolcall_change", args=[call_id])


def link_to_call(call_id: Any) -> str:
    """A link to the call's page (settled or not), or a dash when there is no call."""
    if call_id is None:
        return "—"
    return format_html('<a href="{}">{}</a>', call_url(call_id), call_id)


def asset_absolute_path(asset: Any) -> str:
    """Where the asset's bytes are: its absolute path in ``DATA_DIR``, or its ``s3://`` URL."""
    store = asset_store()
    try:
        return store.location(asset.path)
    except ValueError:
        where = "DATA_DIR" if store.name == "local" else "the bucket's prefix"
        return f"{asset.path} (outside {where})"


def asset_verify_url(asset: Any) -> str:
    return reverse("admin:conversations_asset_verify", args=[asset.pk])


# --- Mixins ----------------------------------------------------------------------------------


class CappedCountPaginator(Paginator):
    """Counts at most ``COUNT_CAP_ROWS + 1`` rows.

    A change list counts the rows its filters match on every page; over a million events that
    count alone reads the whole table. Past the cap the list says "more than 10,000" and its
    page links stop there: narrow it with a filter or a search instead.
    """

    cap = COUNT_CAP_ROWS

    @cached_property
    def count(self) -> int:
        return self.object_list.order_by().values("pk")[: self.cap + 1].count()

    @property
    def capped(self) -> bool:
        return self.count > self.cap


class SupportAdmin(SecondsMixin, admin.ModelAdmin):
    """What every admin here shares: times with seconds and zone, no count of the whole table,
    a capped count of the filtered rows."""

    show_full_result_count = False
    paginator = CappedCountPaginator


class ReadOnlyAdmin(SupportAdmin):
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


class RowColumnsMixin:
    """Columns several admins list: the row's short id, its conversation and its turn."""

    @admin.display(description="id")
    def short_id(self, obj: Any) -> str:
        return short(obj.pk)

    @admin.display(description="conversation")
    def conversation_link(self, obj: Any) -> str:
        return link(obj.conversation)

    @admin.display(description="turn")
    def turn_ordinal(self, obj: Any) -> Any:
        return obj.turn.ordinal if obj.turn_id else "—"
