"""The call page: one page per call id, unfinished or settled, with its summary band, its
timeline, and operations that go through the services and name the call in their messages."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from django.test import Client

from conversations.admin.console import support_console
from conversations.models import Asset, ConversationEvent, ExecutionClaim, ToolActivity, ToolCall
from conversations.services.claims import claim_acquire
from conversations.storage import absolute_from_data
from tools.models import AsyncRun, PermissionRule
from tools.runtime.async_runs.services import async_run_finish

from ..factories import StaffFactory, UserFactory
from .admin_helpers import (
    WHEN,
    admin_url,
    background_command,
    call_page_url,
    calls,
    client_of,
    operate,
    operate_url,
    operations_section,
    sent_messages,
    settle_command,
    staff_with,
)
from .api_helpers import grant_run_commands
from .helpers import expire_claim, new_conversation, outcome_of, settle, state_of

pytestmark = pytest.mark.django_db

OPERATOR_PERMISSIONS = ("view_toolcall", "change_toolcall")
APPROVE_BUTTON = re.compile(
    r"<button type=\"submit\" class=\"button default\"[^>]*>Approve</button>"
)


@pytest.fixture
def conversation():
    return new_conversation(UserFactory(username="dora"), title="Deploy case")


@pytest.fixture
def awaiting(conversation) -> str:
    (call_id,) = calls(conversation, ("bash", {"command": "make deploy"}))
    assert state_of(call_id) == "awaiting_approval"
    return call_id


@pytest.fixture
def operator():
    """Staff who may operate calls, without ``tools.run_commands``."""
    return staff_with(*OPERATOR_PERMISSIONS, username="olga")


def band(page) -> dict[str, str]:
    """The summary band's fields, as the page shows them."""
    html = page.content.decode()
    section = html[html.index('id="call-summary"') : html.index('id="call-operations-module"')]
    pairs = re.findall(r"<dt>(.*?)</dt><dd[^>]*>(.*?)</dd>", section, re.S)
    return {re.sub(r"<[^>]+>", "", k).strip(): re.sub(r"<[^>]+>", "", v).strip() for k, v in pairs}


# --- The page -----------------------------------------------------------------------------------


def test_an_unfinished_calls_page(awaiting, conversation):
    page = client_of(StaffFactory()).get(call_page_url(awaiting))
    assert page.status_code == 200
    text = page.content.decode()
    assert f"<title>Call {awaiting} (bash, awaiting approval) |" in text
    assert f"<h1>Call {awaiting} (bash, awaiting approval)</h1>" in text
    fields = band(page)
    assert fields["state"] == "awaiting_approval"
    assert fields["tool"] == "bash"
    assert fields["command or path"] == "make deploy"
    assert fields["worker"] == "— (no claim)"
    assert fields["attempt / generation"] == "1 / 0"
    assert WHEN.fullmatch(fields["created"]), fields["created"]
    assert fields["finished"] == "— (unfinished)"
    assert fields["conversation"] == "Deploy case"
    assert APPROVE_BUTTON.search(text)
    assert ">Deny</button>" in text and ">Cancel call</button>" in text
    assert "needs the permission tools.run_commands" not in text  # a superuser holds it
    assert 'id="call-timeline"' in text and 'id="projection-wire"' in text
    # Every time on the page reads with seconds and zone.
    assert not re.search(r"\d{1,2}:\d\d (a|p)\.m\.", text)


def test_the_page_names_the_owner_linked_for_staff_who_may_view_users(awaiting, conversation):
    owner = conversation.owner
    user_page = admin_url(type(owner), "change", owner.pk)
    page = client_of(StaffFactory()).get(call_page_url(awaiting))
    assert band(page)["owner"] == "dora"
    assert f'<dd id="call-owner"><a href="{user_page}">dora</a></dd>' in page.content.decode()
    # Staff who may not see users read the name, without a link they could not follow.
    page = client_of(staff_with(*OPERATOR_PERMISSIONS)).get(call_page_url(awaiting))
    assert '<dd id="call-owner">dora</dd>' in page.content.decode()


def test_a_settled_calls_page_names_the_owner(awaiting):
    client = client_of(staff_with(*OPERATOR_PERMISSIONS, "view_user"))
    client.post(operate_url(awaiting, "deny"))
    assert band(client.get(call_page_url(awaiting)))["owner"] == "dora"


def test_the_run_commands_hint_shows_only_to_who_lacks_it(awaiting, operator):
    hint = '<span class="note" id="note-approve">needs the permission tools.run_commands</span>'
    page = client_of(operator).get(call_page_url(awaiting))
    assert hint in operations_section(page)
    grant_run_commands(operator)
    page = client_of(operator).get(call_page_url(awaiting))
    assert APPROVE_BUTTON.search(operations_section(page))
    assert "tools.run_commands" not in operations_section(page)


def test_the_command_keeps_its_whitespace(conversation):
    command = "pytest -x tests/\nE   AssertionError:  1 != 2\n\tdone <ok>"
    (call_id,) = calls(conversation, ("bash", {"command": command}))
    page = client_of(StaffFactory()).get(call_page_url(call_id))
    escaped = "pytest -x tests/\nE   AssertionError:  1 != 2\n\tdone &lt;ok&gt;"
    assert f'<pre class="call-subject">{escaped}</pre>' in page.content.decode()


def test_a_running_calls_page_names_its_worker_and_lease(conversation):
    (call_id,) = calls(conversation, ("exporter", {"command": "export"}))
    claim_acquire(call_id=call_id, worker="host-7")
    page = client_of(StaffFactory()).get(call_page_url(call_id))
    fields = band(page)
    assert fields["state"] == "running"
    assert fields["worker"] == "host-7"
    assert fields["attempt / generation"] == "1 / 1"
    assert WHEN.fullmatch(fields["started"]), fields["started"]
    assert fields["running for"].endswith(" ms") or fields["running for"].endswith(" s")
    text = page.content.decode()
    assert ">Release expired claim</button>" in text
    assert "the claim is live" in text
    assert WHEN.search(text[text.index('id="call-claim"') :])


def test_a_settled_calls_page_from_the_same_url(conversation):
    (call_id,) = calls(conversation, ("exporter", {"command": "export --all"}))
    response = settle(call_id, worker="host-3")
    activity = ToolActivity.objects.get(tool_call_id=call_id)
    finished = datetime.fromisoformat(activity.state_json["finishedAt"])
    started = finished - timedelta(minutes=2, seconds=5)
    state = {**activity.state_json, "startedAt": started.isoformat()}
    ToolActivity.objects.filter(pk=activity.pk).update(state_json=state)
    page = client_of(StaffFactory()).get(call_page_url(call_id))
    assert page.status_code == 200
    text = page.content.decode()
    assert f"<title>Call {call_id} (exporter, completed) |" in text
    fields = band(page)
    assert fields["outcome"] == "completed"
    assert fields["tool"] == "exporter"
    assert fields["command or path"] == "export --all"
    assert fields["worker"] == "host-3"  # kept on its activity after the claim went
    assert fields["attempt / generation"] == "1 / 1"  # the generation from its files' folder
    for name in ("created", "started", "finished"):
        assert WHEN.fullmatch(fields[name]), (name, fields[name])
    assert fields["duration"].startswith("2 min 5 s")
    assert "The call has settled" in text and "<button" not in operations_section(page)
    assert admin_url(ConversationEvent, "change", response.pk) in text
    # Its timeline: projections side by side and its assets with their digest check.
    for marker in ('id="projection-model"', 'id="projection-transcript"', 'id="projection-wire"'):
        assert marker in text
    asset = Asset.objects.get(event=response, kind="payload")
    assert asset.sha256 in text and "verify digest" in text


@pytest.mark.parametrize(
    ("ended", "shown"),
    [
        ({"exit_code": 3}, "Exit 3"),
        ({"exit_code": None, "signal": "SIGKILL"}, "Killed by SIGKILL"),
        (
            {"exit_code": None, "signal": "SIGTERM", "timed_out": True, "timeout_seconds": 120},
            "Timed out after 120 s",
        ),
    ],
)
def test_a_commands_page_says_how_it_ended(conversation, ended, shown):
    """The outcome stays ``completed`` (the command ran to its end); the band says how it
    ended, and its heading too, since it did not succeed."""
    PermissionRule.objects.create(tool_name="bash", pattern="", decision="allow")
    (call_id,) = calls(conversation, ("bash", {"command": "pytest -x"}))
    settle_command(call_id, **ended)
    page = client_of(StaffFactory()).get(call_page_url(call_id))
    fields = band(page)
    assert fields["outcome"] == "completed"
    assert fields["exit"] == shown
    text = page.content.decode()
    assert f"Settled: completed · {shown}</h2>" in text
    assert 'id="call-exit" class="exit-unsuccessful"' in text


def test_a_command_that_exited_0_says_so_quietly(conversation):
    PermissionRule.objects.create(tool_name="bash", pattern="", decision="allow")
    (call_id,) = calls(conversation, ("bash", {"command": "true"}))
    settle_command(call_id, exit_code=0)
    page = client_of(StaffFactory()).get(call_page_url(call_id))
    assert band(page)["exit"] == "Exit 0"
    text = page.content.decode()
    assert "Settled: completed</h2>" in text and 'class="exit-unsuccessful"' not in text


def test_a_background_commands_page_says_how_its_run_ended(conversation):
    PermissionRule.objects.create(tool_name="bash", pattern="", decision="allow")
    (call_id,) = calls(conversation, ("bash", {"command": "make watch"}))
    run = background_command(conversation, call_id)
    client = client_of(StaffFactory())
    running = band(client.get(call_page_url(call_id)))["exit"]
    assert running == f"— (running in the background as async run {run.pk})"
    async_run_finish(run_id=run.pk, status="killed", exit_code=None, signal="SIGKILL")
    assert band(client.get(call_page_url(call_id)))["exit"] == (
        f"Killed by SIGKILL (async run {run.pk})"
    )
    # The run's own page says it the same way.
    run_page = client.get(admin_url(AsyncRun, "change", run.pk)).content.decode()
    assert "field-ended" in run_page and ">Killed by SIGKILL</div>" in run_page


def test_a_call_that_ran_no_command_has_no_exit(conversation):
    (call_id,) = calls(conversation, ("exporter", {"command": "export --all"}))
    settle(call_id)
    assert "exit" not in band(client_of(StaffFactory()).get(call_page_url(call_id)))


def test_a_call_that_never_ran_says_so(awaiting):
    staff = StaffFactory()
    client = client_of(staff)
    client.post(operate_url(awaiting, "deny"))
    fields = band(client.get(call_page_url(awaiting)))
    assert fields["outcome"] == "denied"
    assert fields["started"] == "— (did not run)"
    assert fields["worker"] == "— (not run by a worker)"
    assert fields["duration"] == "—"
    assert fields["resolved by"] == staff.username


def test_an_unknown_call_id_is_not_found():
    client = client_of(StaffFactory())
    response = client.get(call_page_url("6f1c2a9e-0000-4000-8000-000000000000"))
    assert response.status_code == 302  # Django's "does not exist" message, to the index
    assert client.get(call_page_url("not-a-uuid")).status_code == 302


def test_verify_digest_reports_match_then_mismatch(conversation):
    (call_id,) = calls(conversation, ("exporter", {"command": "export"}))
    response = settle(call_id)
    asset = Asset.objects.get(event=response, kind="payload")
    client = client_of(StaffFactory())
    page = call_page_url(call_id)
    verify = admin_url(Asset, "verify", asset.pk)
    assert verify in client.get(page).content.decode()
    checked = client.get(verify, {"next": page}, follow=True)
    assert checked.redirect_chain == [(page, 302)]
    assert sent_messages(checked) == [
        f"Asset {asset.pk} (payload, {asset.size} bytes) of call {call_id}: OK, SHA-256 matches."
    ]
    absolute_from_data(asset.path).write_bytes(b"tampered")
    (report,) = sent_messages(client.get(verify, {"next": page}, follow=True))
    assert report.startswith(f"Asset {asset.pk} (payload, {asset.size} bytes) of call {call_id}")
    assert "mismatch" in report


# --- Operations ---------------------------------------------------------------------------------


def test_approve_with_run_commands_records_the_staff_member(awaiting, operator):
    grant_run_commands(operator)
    client = client_of(operator)
    response = client.post(operate_url(awaiting, "approve"))
    assert response.status_code == 302 and response["Location"] == call_page_url(awaiting)
    call = ToolCall.objects.get(pk=awaiting)
    assert call.state == "ready"
    assert call.resolved_by == operator
    assert call.resolution == {"kind": "approval", "decision": "allow", "persist": False}
    assert call.resolution_request_id.startswith("admin-")
    assert sent_messages(response) == [f"Call {awaiting} (bash): approved by olga; now ready."]
    # The page it lands on shows the message and the new state.
    page = client.get(response["Location"])
    assert band(page)["state"] == "ready" and band(page)["resolved by"] == "olga"
    assert f"Call {awaiting} (bash): approved by olga; now ready." in page.content.decode()


def test_approve_an_execute_tool_without_run_commands_is_refused(awaiting, operator):
    ((level, message),) = operate(client_of(operator), awaiting, "approve")
    assert state_of(awaiting) == "awaiting_approval"
    assert ToolCall.objects.get(pk=awaiting).resolution is None
    assert level == "error"
    assert message == (
        f"Call {awaiting} (bash): not approved: Approving bash (it runs programs) needs the "
        "permission tools.run_commands."
    )


def test_approve_a_tool_that_runs_nothing_needs_no_run_commands(conversation, operator):
    PermissionRule.objects.create(tool_name="read", pattern="", decision="ask")
    (call_id,) = calls(conversation, ("read", {"path": "notes.txt"}))
    assert state_of(call_id) == "awaiting_approval"
    response = client_of(operator).post(operate_url(call_id, "approve"))
    assert sent_messages(response) == [f"Call {call_id} (read): approved by olga; now ready."]
    assert ToolCall.objects.get(pk=call_id).resolved_by == operator


def test_deny_needs_no_run_commands_and_settles_denied(awaiting, operator):
    response = client_of(operator).post(operate_url(awaiting, "deny"))
    assert outcome_of(awaiting) == "denied"
    payload = ConversationEvent.objects.get(tool_call_id=awaiting).payload
    assert payload["resolvedBy"] == "olga"
    assert payload["resolutionRequestId"].startswith("admin-")
    assert sent_messages(response) == [f"Call {awaiting} (bash): denied by olga; settled denied."]


def test_a_second_resolution_is_refused_naming_the_call(awaiting):
    client = client_of(StaffFactory())
    operate(client, awaiting, "deny")
    ((level, message),) = operate(client, awaiting, "approve")
    assert level == "error"
    assert message.startswith(
        f"Call {awaiting} (bash): not approved: The call was already resolved differently"
    )


def test_cancel_settles_through_the_service(awaiting, operator):
    client = client_of(operator)
    assert operate(client, awaiting, "cancel") == [
        ("success", f"Call {awaiting} (bash): cancelled; settled cancelled.")
    ]
    assert outcome_of(awaiting) == "cancelled"
    assert operate(client, awaiting, "cancel") == [
        ("warning", f"Call {awaiting} (bash): already settled cancelled.")
    ]


def test_release_an_expired_claim(conversation, operator):
    (call_id,) = calls(conversation, ("exporter", {"command": "export"}))
    claim_acquire(call_id=call_id, worker="host-9")
    client = client_of(operator)
    ((level, message),) = operate(client, call_id, "release")
    assert state_of(call_id) == "running"
    assert level == "warning"
    assert re.fullmatch(
        rf"Not released, the claim is live \(its worker renews it\): "
        rf"Call {call_id} \(exporter\) \(\d+ s left, host-9\)",
        message,
    )
    expire_claim(call_id)
    assert operate(client, call_id, "release") == [
        ("success", f"Released: Call {call_id} (exporter): settled indeterminate (claim expired)")
    ]
    assert not ExecutionClaim.objects.filter(call_id=call_id).exists()
    assert outcome_of(call_id) == "indeterminate"  # a host tool may have had an effect


def test_recovery_of_one_call(conversation, operator):
    (call_id,) = calls(conversation, ("exporter", {"command": "export"}))
    response = client_of(operator).post(operate_url(call_id, "recover"))
    assert state_of(call_id) == "ready"
    assert sent_messages(response) == [
        f"Call {call_id} (exporter): nothing to recover (now ready)."
    ]


# --- Access ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("operation", ["approve", "deny", "cancel", "release", "recover"])
def test_operations_are_post_only_and_staff_only(awaiting, operation):
    assert client_of(StaffFactory()).get(operate_url(awaiting, operation)).status_code == 405
    refused = client_of(UserFactory()).post(operate_url(awaiting, operation))
    assert refused.status_code == 302 and refused["Location"].startswith("/admin/login/")
    viewer = client_of(staff_with("view_toolcall"))
    assert viewer.post(operate_url(awaiting, operation)).status_code == 403
    assert state_of(awaiting) == "awaiting_approval"


def test_operations_need_the_csrf_token(awaiting):
    client = Client(enforce_csrf_checks=True)
    client.force_login(StaffFactory())
    assert client.post(operate_url(awaiting, "deny")).status_code == 403
    assert state_of(awaiting) == "awaiting_approval"
    page = client.get(call_page_url(awaiting))
    token = page.cookies["csrftoken"].value
    response = client.post(operate_url(awaiting, "deny"), {"csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert outcome_of(awaiting) == "denied"


def test_viewers_see_the_page_without_buttons(awaiting):
    page = client_of(staff_with("view_toolcall")).get(call_page_url(awaiting))
    assert page.status_code == 200
    assert "<button" not in operations_section(page)
    assert 'Operations need the permission "Can change tool call".' in page.content.decode()


def test_non_staff_cannot_see_a_call_page(awaiting):
    response = client_of(UserFactory()).get(call_page_url(awaiting))
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_a_host_calls_path_reads_as_its_rules_see_it_on_every_admin_page(conversation):
    """One subject everywhere (``ToolSpec.subject_of``): a host tool's ``file_path``, which its
    permission rules match, is what the call list, the call page and the support console
    show, unfinished and settled."""
    (call_id,) = calls(conversation, ("editor", {"file_path": "src/app.py", "text": "x"}))
    staff = client_of(StaffFactory())
    assert band(staff.get(call_page_url(call_id)))["command or path"] == "src/app.py"
    listing = staff.get(admin_url(ToolCall, "changelist")).content.decode()
    assert '<td class="field-subject">src/app.py</td>' in listing
    settle(call_id, "failed")
    (failure,) = next(s for s in support_console() if s.key == "failures").rows
    assert failure.subject == "src/app.py"
    assert band(staff.get(call_page_url(call_id)))["command or path"] == "src/app.py"
