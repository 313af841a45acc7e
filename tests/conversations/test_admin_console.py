"""The support console on the admin's first page: which calls each section lists, in which
order, with their age, each linking to its call's page; bounded reads; staff only."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone
from django.utils.html import strip_tags

from conversations.admin.console import CONSOLE_ROWS, support_console
from conversations.models import CommandExit, ConversationEvent, ExecutionClaim, ToolCall
from conversations.services.claims import claim_acquire
from tools.models import AsyncRun, PermissionRule
from tools.runtime.async_runs.services import async_run_finish

from ..factories import StaffFactory, UserFactory
from .admin_helpers import (
    WHEN,
    age,
    background_command,
    call_page_url,
    calls,
    client_of,
    lost_run,
    settle_command,
)
from .helpers import expire_claim, new_conversation, settle, state_of

pytestmark = pytest.mark.django_db

QUESTIONS = [{"id": "env", "question": "Which environment?", "options": ["dev", "prod"]}]


@pytest.fixture
def scene():
    """One conversation holding a call for every section of the console, and one beside each
    that the section must leave out."""
    owner = UserFactory(username="carol")
    conversation = new_conversation(owner, title="Billing export case")
    old_approval, new_approval, asked, ready_old, ready_new, expired, live = calls(
        conversation,
        ("bash", {"command": "rm -rf build"}),
        ("bash", {"command": "make deploy"}),
        ("ask_user", {"questions": QUESTIONS}),
        ("exporter", {"command": "export --all"}),  # a host tool: ready, no host picks it up
        ("exporter", {"command": "export --today"}),
        ("exporter", {"command": "export --claimed"}),
        ("exporter", {"command": "export --live"}),
    )
    age(old_approval, minutes=30)
    age(new_approval, minutes=2)
    age(asked, minutes=10)
    age(ready_old, minutes=5)
    claim_acquire(call_id=expired, worker="host-1")
    expire_claim(expired)
    claim_acquire(call_id=live, worker="host-2")
    failed, indeterminate, completed, old_failure, with_run = calls(
        conversation, *[("exporter", {"command": f"export {n}"}) for n in range(5)]
    )
    settle(failed, "failed")
    settle(indeterminate, "indeterminate")
    settle(completed)
    settle(old_failure, "failed")
    ConversationEvent.objects.filter(tool_call_id=old_failure).update(
        created_at=timezone.now() - timedelta(hours=25)
    )
    settle(with_run)
    run = lost_run(conversation, with_run)
    # Commands that ran to their end (settled completed), and how they ended.
    PermissionRule.objects.create(tool_name="bash", pattern="", decision="allow")
    exit_3, exit_0, killed, old_exit, in_background = calls(
        conversation,
        ("bash", {"command": "pytest -x"}),
        ("bash", {"command": "true"}),
        ("bash", {"command": "make serve"}),
        ("bash", {"command": "false"}),
        ("bash", {"command": "make watch"}),
    )
    settle_command(exit_3, exit_code=3)
    settle_command(exit_0, exit_code=0)
    settle_command(killed, exit_code=None, signal="SIGKILL")
    settle_command(old_exit, exit_code=1)
    CommandExit.objects.filter(pk=old_exit).update(created_at=timezone.now() - timedelta(hours=25))
    background = background_command(conversation, in_background)
    async_run_finish(run_id=background.pk, status="exited", exit_code=4, signal=None)
    return SimpleNamespace(**{k: v for k, v in locals().items() if k != "owner"}, owner=owner)


def section(sections, key):
    return next(s for s in sections if s.key == key)


def ids(sec) -> list[str]:
    return [str(row.call_id) for row in sec.rows]


def test_each_section_lists_its_calls_in_order(scene):
    sections = support_console()
    assert [s.key for s in sections] == [
        "waiting",
        "ready",
        "expired",
        "failures",
        "exits",
        "lost",
    ]
    # The longest waiting first, approvals and input requests together.
    assert ids(section(sections, "waiting")) == [
        scene.old_approval,
        scene.asked,
        scene.new_approval,
    ]
    waiting = section(sections, "waiting")
    assert [row.status for row in waiting.rows] == [
        "awaiting_approval",
        "awaiting_input",
        "awaiting_approval",
    ]
    assert waiting.rows[0].subject == "rm -rf build"
    assert waiting.rows[0].age.startswith("30 min")
    assert waiting.rows[0].conversation == "Billing export case"
    # Ready for over a minute with nobody taking it; the fresh one is not (yet) a problem.
    ready = section(sections, "ready")
    assert ids(ready) == [scene.ready_old]
    assert ready.rows[0].note == "host tool" and ready.rows[0].age.startswith("5 min")
    expired = section(sections, "expired")
    assert ids(expired) == [scene.expired]
    assert expired.rows[0].note == "worker host-1, generation 1"
    # Failed and indeterminate of the last 24 hours, newest first.
    failures = section(sections, "failures")
    assert ids(failures) == [scene.indeterminate, scene.failed]
    assert [row.status for row in failures.rows] == ["indeterminate", "failed"]
    assert failures.rows[0].tool == "exporter" and failures.rows[0].subject == "export 1"
    # Commands that did not succeed, newest first: completed calls, so not under "failures".
    exits = section(sections, "exits")
    assert ids(exits) == [scene.in_background, scene.killed, scene.exit_3]
    assert [row.status for row in exits.rows] == ["Exit 4", "Killed by SIGKILL", "Exit 3"]
    assert exits.rows[2].tool == "bash" and exits.rows[2].subject == "pytest -x"
    assert exits.rows[0].note == f"async run {scene.background.pk}"
    assert not {scene.exit_3, scene.killed, scene.in_background} & set(ids(failures))
    lost = section(sections, "lost")
    assert ids(lost) == [scene.with_run]
    assert lost.rows[0].note == f"async run {scene.run.pk} on elsewhere"
    for sec in sections:
        for row in sec.rows:
            assert row.url == call_page_url(row.call_id)
            assert WHEN.fullmatch(strip_tags(row.since_text)), row.since_text


def test_an_approved_call_leaves_the_waiting_section(scene):
    client = client_of(StaffFactory())
    client.post(f"/admin/conversations/toolcall/{scene.old_approval}/approve/")
    assert state_of(scene.old_approval) == "ready"
    assert scene.old_approval not in ids(section(support_console(), "waiting"))


def test_the_console_is_the_admins_first_page(scene):
    page = client_of(StaffFactory()).get("/admin/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "<h1>Support console</h1>" in text
    for title in (
        "Waiting on a human (3)",
        "Ready, not picked up for over 60 s (1)",
        "Expired claims (1)",
        "Failed and indeterminate, last 24 h (2)",
        "Non-zero exits, last 24 h (3)",
        "Lost async runs (1)",
    ):
        assert title in text
    for call_id in (scene.old_approval, scene.ready_old, scene.expired, scene.failed):
        assert f'href="{call_page_url(call_id)}"' in text
    assert "/admin/conversations/toolcall/?state__in=awaiting_approval%2Cawaiting_input" in text
    assert "/admin/conversations/conversationevent/?outcome=indeterminate" in text
    assert "/admin/conversations/commandexit/?succeeded__exact=0" in text
    exits = text[text.index('id="console-exits"') : text.index('id="console-lost"')]
    assert f'href="{call_page_url(scene.exit_3)}"' in exits and "Exit 3" in exits
    assert call_page_url(scene.exit_0) not in exits
    assert WHEN.search(text)
    assert "Tool calls" in text  # the models' list follows


def test_the_sections_links_open_the_lists_that_hold_all_of_it(scene):
    client = client_of(StaffFactory())
    for sec in support_console():
        for _, url in sec.lists:
            listing = client.get(url)
            assert listing.status_code == 200, url
            assert "cl" in listing.context, url


def test_empty_sections_say_so():
    page = client_of(StaffFactory()).get("/admin/").content.decode()
    assert "No call waits for an approval or an answer." in page
    assert "No claim has expired." in page
    assert "No command exited non-zero, was killed or timed out in the last 24 hours." in page


def test_a_section_shows_at_most_its_rows_and_says_there_are_more(django_assert_max_num_queries):
    conversation = new_conversation(UserFactory())
    many = calls(conversation, *[("bash", {"command": f"ls {n}"}) for n in range(CONSOLE_ROWS + 3)])
    assert all(state_of(call_id) == "awaiting_approval" for call_id in many)
    waiting = section(support_console(), "waiting")
    assert len(waiting.rows) == CONSOLE_ROWS and waiting.more
    client = client_of(StaffFactory())
    with django_assert_max_num_queries(12):
        page = client.get("/admin/")
    assert f"Waiting on a human ({CONSOLE_ROWS}+)" in page.content.decode()
    assert f"Only the first {CONSOLE_ROWS} are listed." in page.content.decode()


def test_non_staff_never_see_the_console(scene):
    response = client_of(UserFactory()).get("/admin/")
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_recovered_rows_leave_the_console(scene):
    """Releasing the expired claim settles the call: it moves from "expired" to "failures"."""
    client = client_of(StaffFactory())
    client.post(f"/admin/conversations/toolcall/{scene.expired}/release/")
    assert not ExecutionClaim.objects.filter(call_id=scene.expired).exists()
    assert not ToolCall.objects.filter(pk=scene.expired).exists()
    sections = support_console()
    assert ids(section(sections, "expired")) == []
    assert scene.expired in ids(section(sections, "failures"))
    assert AsyncRun.objects.filter(status="lost").count() == 1
