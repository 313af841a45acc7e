"""The admin's change lists stay fast on big tables: no count of the whole table, a capped
count of the filtered rows, and a number of queries per page that does not grow with the rows.
Also: times with seconds and zone everywhere, and the layout rules for a 1280 px screen."""

from __future__ import annotations

import itertools
import uuid

import pytest
from django.contrib import admin
from django.contrib.auth.models import Group
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from conversations.admin.common import CappedCountPaginator
from conversations.api.auth import token_create
from conversations.models import ConversationEvent, ToolCall
from conversations.services.claims import claim_acquire
from conversations.storage import attempt_relative
from tools.models import Launch, PermissionRule
from tools.runtime.async_runs.services import async_run_start
from tools.runtime.left_processes.services import left_process_record

from ..factories import StaffFactory, UserFactory
from .admin_helpers import WHEN, admin_url, calls, client_of
from .helpers import new_conversation, settle

pytestmark = pytest.mark.django_db

_n = itertools.count(1)


def grow(owner, cases: int) -> None:
    """``cases`` more rows of every registered model, each through its service where there is
    one: a conversation with a turn, its events, three calls (running, settled, awaiting), their
    activities, claim and assets; a token, a rule, an async run, a launch, a left process group,
    a user and a group."""
    for _ in range(cases):
        i = next(_n)
        conversation = new_conversation(owner, title=f"case {i}")
        running, done, awaiting = calls(
            conversation,
            ("exporter", {"command": f"export {i}"}),
            ("exporter", {"command": f"export {i} --done"}),
            ("bash", {"command": f"ls {i}"}),
        )
        claim_acquire(call_id=running, worker=f"host-{i % 3}")
        settle(done, "failed" if i % 2 else "completed")
        token_create(user=owner, name=f"token {i}")
        PermissionRule.objects.create(
            conversation=conversation, tool_name="bash", pattern=f"ls {i}", decision="allow"
        )
        async_run_start(
            run_id=uuid.uuid4(),
            conversation_id=conversation.pk,
            tool_call_id=done,
            command=f"make watch {i}",
            cwd="/ws",
            folder=attempt_relative(conversation.pk, done, 1),
            host="elsewhere",
            pid=i,
            pgid=i,
            process_start=i,
        )
        Launch.objects.create(
            owner=owner, name=f"dev {i}", command="make serve", started_at=timezone.now()
        )
        left_process_record(host="host-b", pgid=i, process_start=i, label=f"call {running}")
        UserFactory()
        Group.objects.create(name=f"group {i}")


def listings() -> list[str]:
    """Every registered model's change list, and the big tables' filtered lists."""
    urls = [
        reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        for model in admin.site._registry
    ]
    events = admin_url(ConversationEvent, "changelist")
    urls += [
        f"{events}?outcome=failed",
        f"{events}?type__exact=tool_call_response",
        f"{admin_url(ToolCall, 'changelist')}?state__exact=running",
        f"{admin_url(ToolCall, 'changelist')}?claim_expired=no",
        reverse("admin:conversations_toolactivity_changelist") + "?status=failed",
        reverse("admin:conversations_asset_changelist") + "?kind__exact=payload",
        reverse("admin:conversations_turn_changelist") + "?status__exact=open",
        reverse("admin:tools_asyncrun_changelist") + "?status__exact=running",
        reverse("admin:index"),
    ]
    return urls


def queries_per_page(client) -> dict[str, int]:
    counts = {}
    for url in listings():
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url)
        assert response.status_code == 200, url
        counts[url] = len(queries)
    return counts


def test_queries_per_page_do_not_grow_with_the_rows(django_assert_max_num_queries):
    owner = UserFactory(username="erin")
    client = client_of(StaffFactory())
    grow(owner, 10)
    few = queries_per_page(client)
    grow(owner, 190)
    assert ConversationEvent.objects.count() >= 200 * 3
    assert ToolCall.objects.count() == 400
    many = queries_per_page(client)
    assert many == few
    for url, count in few.items():
        with django_assert_max_num_queries(count):
            client.get(url)


def test_no_list_counts_its_whole_table():
    for model, model_admin in admin.site._registry.items():
        assert model_admin.show_full_result_count is False, model
        assert model_admin.paginator is CappedCountPaginator, model


def test_lists_join_the_rows_they_link_to():
    for model, model_admin in admin.site._registry.items():
        ours = model._meta.app_label in ("conversations", "tools")
        if ours and any(f.many_to_one for f in model._meta.get_fields()):
            assert model_admin.list_select_related, model


def test_a_list_counts_up_to_its_cap(monkeypatch):
    monkeypatch.setattr(CappedCountPaginator, "cap", 3)
    grow(UserFactory(), 2)
    listing = client_of(StaffFactory()).get(admin_url(ConversationEvent, "changelist"))
    assert listing.context["cl"].result_count == 4
    assert "more than 3 conversation events" in listing.content.decode()
    few = client_of(StaffFactory()).get(
        admin_url(ConversationEvent, "changelist"), {"outcome": "failed"}
    )
    assert few.context["cl"].result_count == 1
    assert "1 conversation event" in few.content.decode()


def test_times_read_with_seconds_and_zone_in_lists_and_pages():
    owner = UserFactory()
    grow(owner, 1)
    client = client_of(StaffFactory())
    for url in listings():
        text = client.get(url).content.decode()
        assert not any(marker in text for marker in (" a.m.", " p.m.", "midnight", "noon")), url
    for model in (ToolCall, ConversationEvent, Launch, PermissionRule):
        assert WHEN.search(client.get(admin_url(model, "changelist")).content.decode()), model
    rule = PermissionRule.objects.first()
    form = client.get(admin_url(PermissionRule, "change", rule.pk)).content.decode()
    assert WHEN.search(form)
    event = ConversationEvent.objects.filter(type="tool_call_response").first()
    assert WHEN.search(
        client.get(admin_url(ConversationEvent, "change", event.pk)).content.decode()
    )


def test_lists_sort_by_their_time_columns():
    grow(UserFactory(), 2)
    client = client_of(StaffFactory())
    model_admin = admin.site._registry[ToolCall]
    column = model_admin.list_display.index("when_created_at")
    newest_first = client.get(admin_url(ToolCall, "changelist"), {"o": f"-{column + 1}"})
    rows = list(newest_first.context["cl"].result_list)
    assert [r.created_at for r in rows] == sorted((r.created_at for r in rows), reverse=True)


def test_the_layout_fits_1280_px():
    """What keeps the lists and the call page within 1280 px: no app sidebar, headers and cells
    that wrap, long commands and paths broken anywhere, at most nine columns of calls."""
    grow(UserFactory(), 1)
    client = client_of(StaffFactory())
    listing = client.get(admin_url(ToolCall, "changelist")).content.decode()
    assert 'id="nav-sidebar"' not in listing
    assert "#changelist table thead th { white-space: normal; }" in listing
    assert "#result_list .field-subject" in listing and "overflow-wrap: anywhere" in listing
    assert len(admin.site._registry[ToolCall].list_display) <= 9
    call_id = ToolCall.objects.first().pk
    page = client.get(admin_url(ToolCall, "change", call_id)).content.decode()
    assert "#content pre { white-space: pre-wrap; overflow-wrap: anywhere;" in page
    assert 'class="call-summary"' in page
