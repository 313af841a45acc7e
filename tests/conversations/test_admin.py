"""The support admin: pages, access, search, filters, actions calling services, timelines."""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import factory
import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from conversations.api.auth import token_create
from conversations.models import (
    ApiToken,
    Asset,
    CommandExit,
    Conversation,
    ConversationEvent,
    ExecutionClaim,
    McpSession,
    ToolActivity,
    ToolCall,
    Turn,
)
from conversations.services.claims import claim_acquire
from conversations.services.conversations import conversation_create
from conversations.services.exits import command_exit_record
from conversations.services.mcp_sessions import mcp_session_open
from conversations.services.messages import message_post
from conversations.services.settlement import ClaimGuard, call_settle
from conversations.storage import asset_store
from tests.storage.helpers import store_replace
from tools.models import (
    AsyncRun,
    Launch,
    LeftProcess,
    McpServer,
    McpTool,
    PermissionRule,
    WorkerHeartbeat,
)
from tools.runtime.mcp.services import mcp_server_save, mcp_tools_store
from tools.runtime.presence import worker_gone, worker_heartbeat

from ..factories import StaffFactory, UserFactory
from .admin_helpers import admin_url, sent_messages
from .helpers import expire_claim

pytestmark = pytest.mark.django_db


class AsyncRunFactory(factory.django.DjangoModelFactory):
    """No service creates these outside a running shell; rows for the admin pages only."""

    class Meta:
        model = AsyncRun

    command = "sleep 100 && echo done"
    cwd = "/tmp"
    tool_call_id = factory.Faker("uuid4")
    started_at = factory.LazyFunction(timezone.now)


class LaunchFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Launch

    owner = factory.SubFactory(UserFactory)
    name = "dev server"
    command = "npm run dev"
    started_at = factory.LazyFunction(timezone.now)


@dataclass
class World:
    owner: Any
    conversation: Conversation
    turn: Turn
    bash_id: Any  # awaiting_approval
    running_id: Any  # running, claimed by w1 (live lease)
    settled_id: Any  # settled completed, with a payload asset
    response: ConversationEvent
    token: ApiToken
    rule: PermissionRule
    run: AsyncRun
    launch: Launch


def post_message(conversation, message_id, role, content, turn_id=None):
    return message_post(
        conversation_id=conversation.pk,
        message_id=message_id,
        role=role,
        content=content,
        turn_id=turn_id,
    )


def tool_block(provider_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_call", "id": provider_id, "name": name, "arguments": arguments}


@pytest.fixture
def world() -> World:
    owner = UserFactory(username="alice")
    conversation = conversation_create(owner=owner, title="Printer support case")
    turn_id = post_message(conversation, "u1", "user", [{"type": "text", "text": "fix it"}]).body[
        "turnId"
    ]
    posted = post_message(
        conversation,
        "a1",
        "assistant",
        [
            {"type": "text", "text": "Looking."},
            tool_block("prov-bash", "bash", {"command": "ls -la /srv"}),
            tool_block("prov-run", "notes", {"q": "running"}),
            tool_block("prov-done", "notes", {"q": "done"}),
        ],
        turn_id=turn_id,
    )
    bash_id, running_id, settled_id = posted.call_ids
    claim_acquire(call_id=running_id, worker="w1")
    claim = claim_acquire(call_id=settled_id, worker="w2")
    response = call_settle(
        call_id=settled_id,
        outcome="completed",
        guard=ClaimGuard(claim.token, claim.generation),
        result={"content": [{"type": "text", "text": "hi there"}]},
        text="hi there\nsecond line",
    )
    token, _ = token_create(user=owner, name="laptop")
    rule = PermissionRule.objects.create(tool_name="grep", pattern="*.env", decision="deny")
    return World(
        owner=owner,
        conversation=conversation,
        turn=Turn.objects.get(pk=turn_id),
        bash_id=bash_id,
        running_id=running_id,
        settled_id=settled_id,
        response=response,
        token=token,
        rule=rule,
        run=AsyncRunFactory(conversation=conversation),
        launch=LaunchFactory(owner=owner),
    )


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(StaffFactory())
    return client


@pytest.fixture
def plain() -> Client:
    client = Client()
    client.force_login(UserFactory())
    return client


def rows(response) -> list[Any]:
    assert response.status_code == 200, response
    return list(response.context["cl"].result_list)


def pks(response) -> set[str]:
    return {str(obj.pk) for obj in rows(response)}


def object_of(world: World, model) -> Any:
    return {
        Conversation: world.conversation,
        Turn: world.turn,
        ConversationEvent: world.response,
        ToolCall: ToolCall.objects.get(pk=world.bash_id),
        ExecutionClaim: ExecutionClaim.objects.get(call_id=world.running_id),
        Asset: Asset.objects.filter(event=world.response).first(),
        ToolActivity: ToolActivity.objects.get(tool_call_id=world.settled_id),
        ApiToken: world.token,
        PermissionRule: world.rule,
        AsyncRun: world.run,
        Launch: world.launch,
        CommandExit: CommandExit.objects.filter(pk=world.settled_id).first()
        or command_exit_record(
            tool_call_id=world.settled_id,
            conversation_id=world.conversation.pk,
            exit_code=3,
            signal=None,
            timed_out=False,
            timeout_seconds=None,
        ),
        LeftProcess: LeftProcess.objects.get_or_create(
            host="host-b", pgid=4242, process_start=123456, label=f"call {world.running_id}"
        )[0],
        McpSession: McpSession.objects.first()
        or mcp_session_open(
            user=world.conversation.owner,
            conversation_id=world.conversation.pk,
            client_info={"name": "claude-code", "version": "2.1"},
            capabilities={},
            protocol_version="2025-11-25",
        ),
        McpServer: _mcp_server(),
        McpTool: McpTool.objects.get(server=_mcp_server()),
        WorkerHeartbeat: _worker("host-b:42:abcdef", "host-b"),
    }[model]


def _mcp_server() -> McpServer:
    """An MCP server with one tool listed (as it would list it; no process started)."""
    server = McpServer.objects.filter(name="notes").first()
    if server is None:
        server = mcp_server_save(
            name="notes", transport="stdio", command="notes-server", environment={"KEY": "v"}
        )
        tool = {"name": "lookup", "description": "Looks up.", "inputSchema": {"type": "object"}}
        mcp_tools_store(server_id=server.pk, tools=[tool])
    return server


def _worker(name: str, host: str) -> WorkerHeartbeat:
    worker_heartbeat(name=name, host=host)
    return WorkerHeartbeat.objects.get(name=name)


REGISTERED = [
    CommandExit,
    Conversation,
    Turn,
    ConversationEvent,
    ToolCall,
    ExecutionClaim,
    Asset,
    ToolActivity,
    ApiToken,
    PermissionRule,
    AsyncRun,
    Launch,
    LeftProcess,
    McpSession,
    McpServer,
    McpTool,
    WorkerHeartbeat,
]
BIG_TABLES = [ConversationEvent, ToolCall, ToolActivity, Asset]


# --- Registration, pages and access -----------------------------------------------------------


def test_every_model_of_both_apps_is_registered():
    for app in ("conversations", "tools"):
        for model in apps.get_app_config(app).get_models():
            assert model in admin.site._registry, model
    assert set(REGISTERED) == {
        m for m in admin.site._registry if m._meta.app_label in ("conversations", "tools")
    }
    for model in BIG_TABLES:
        assert admin.site._registry[model].show_full_result_count is False
        assert admin.site._registry[model].list_select_related


def test_the_index_names_every_model_in_plain_english(staff):
    """Django's default plural adds an "s": "Launchs", "Left processs", "Api tokens"."""
    index = staff.get(reverse("admin:index")).content.decode()
    for name in ("Launches", "Left processes", "API tokens", "Tool activities", "Async runs"):
        assert f">{name}</a>" in index, name
    for model in admin.site._registry:
        plural = str(model._meta.verbose_name_plural)
        assert not plural.endswith(("ss", "chs", "shs", "xs")), plural


@pytest.mark.parametrize("model", REGISTERED, ids=lambda m: m.__name__)
def test_changelist_and_change_page_load_for_staff(staff, world, model):
    obj = object_of(world, model)
    listing = staff.get(admin_url(model, "changelist"))
    assert listing.status_code == 200
    assert str(obj.pk) in pks(listing)
    page = staff.get(admin_url(model, "change", obj.pk))
    assert page.status_code == 200
    assert page.context["original"].pk == obj.pk


@pytest.mark.parametrize("model", REGISTERED, ids=lambda m: m.__name__)
def test_add_page_only_for_permission_rules_and_mcp_servers(staff, world, model):
    """Configuration is added here (rules, the MCP servers Toolcore is a client of); call state
    never is."""
    response = staff.get(admin_url(model, "add"))
    assert response.status_code == (200 if model in (PermissionRule, McpServer) else 403)


@pytest.mark.parametrize("model", REGISTERED, ids=lambda m: m.__name__)
def test_non_staff_are_sent_to_login(plain, world, model):
    obj = object_of(world, model)
    for url in (
        admin_url(model, "changelist"),
        admin_url(model, "change", obj.pk),
        admin_url(model, "add"),
    ):
        response = plain.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/admin/login/")


def test_custom_views_are_refused_to_non_staff(plain, world):
    asset = object_of(world, Asset)
    response = plain.get(reverse("admin:conversations_asset_verify", args=[asset.pk]))
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
    response = plain.post(reverse("admin:conversations_toolcall_recover"))
    assert response.status_code == 302
    assert ToolCall.objects.filter(pk=world.running_id).exists()


# --- Search -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "term", "expected"),
    [
        (ToolCall, "ls -la", "bash"),
        (ToolCall, "prov-run", "running"),
        (ToolCall, "{conversation}", "unfinished"),
        (ConversationEvent, "{settled}", "response"),
        (ConversationEvent, "alice", "all_events"),
        (Conversation, "Printer", "conversation"),
        (Conversation, "alice", "conversation"),
        (Conversation, "{conversation}", "conversation"),
        (Turn, "{conversation}", "turn"),
        (ExecutionClaim, "w1", "claim"),
        (Asset, "{settled}", "asset"),
        (ToolActivity, "{settled}", "activity"),
        (ApiToken, "laptop", "token"),
        (ApiToken, "alice", "token"),
        (PermissionRule, "grep", "rule"),
        (AsyncRun, "sleep 100", "run"),
        (Launch, "dev server", "launch"),
    ],
)
def test_search_finds_by_ids_names_and_commands(staff, world, model, term, expected):
    ids = {
        "bash": world.bash_id,
        "running": world.running_id,
        "settled": world.settled_id,
        "conversation": world.conversation.pk,
    }
    term = term.format(**ids)
    wanted = {
        "bash": {str(world.bash_id)},
        "running": {str(world.running_id)},
        "unfinished": {str(world.bash_id), str(world.running_id)},
        "response": {str(world.response.pk)},
        "all_events": {str(e.pk) for e in ConversationEvent.objects.all()},
        "conversation": {str(world.conversation.pk)},
        "turn": {str(world.turn.pk)},
        "claim": {str(world.running_id)},
        "asset": {str(a.pk) for a in Asset.objects.filter(tool_call_id=world.settled_id)},
        "activity": {str(ToolActivity.objects.get(tool_call_id=world.settled_id).pk)},
        "token": {str(world.token.pk)},
        "rule": {str(world.rule.pk)},
        "run": {str(world.run.pk)},
        "launch": {str(world.launch.pk)},
    }[expected]
    assert wanted
    assert pks(staff.get(admin_url(model, "changelist"), {"q": term})) == wanted
    assert pks(staff.get(admin_url(model, "changelist"), {"q": "no-such-thing-anywhere"})) == set()


@pytest.mark.parametrize("which", ["bash_id", "running_id", "settled_id"])
def test_searching_a_call_id_opens_its_page_unfinished_or_settled(staff, world, which):
    call_id = getattr(world, which)
    response = staff.get(admin_url(ToolCall, "changelist"), {"q": f" {call_id} "})
    assert response.status_code == 302
    assert response["Location"] == admin_url(ToolCall, "change", call_id)
    assert staff.get(response["Location"]).status_code == 200


# --- Filters ----------------------------------------------------------------------------------


def test_call_filters_state_tool_origin_worker(staff, world):
    url = admin_url(ToolCall, "changelist")
    assert pks(staff.get(url, {"state__exact": "awaiting_approval"})) == {str(world.bash_id)}
    assert pks(staff.get(url, {"state__exact": "running"})) == {str(world.running_id)}
    assert pks(staff.get(url, {"tool_name": "notes"})) == {str(world.running_id)}
    assert pks(staff.get(url, {"origin__exact": "model"})) == {
        str(world.bash_id),
        str(world.running_id),
    }
    assert pks(staff.get(url, {"claim__worker": "w1"})) == {str(world.running_id)}
    assert pks(staff.get(url, {"claim__worker": "nobody"})) == set()


def test_claim_expired_filters(staff, world, settings):
    settings.TOOLCORE_CLAIM_LEASE = 0  # the next claim expires at once
    posted = post_message(
        world.conversation,
        "a2",
        "assistant",
        [tool_block("prov-x", "notes", {"q": "x"})],
        turn_id=world.turn.pk,
    )
    (expired_id,) = posted.call_ids
    claim_acquire(call_id=expired_id, worker="w9")
    calls = admin_url(ToolCall, "changelist")
    assert pks(staff.get(calls, {"claim_expired": "yes"})) == {str(expired_id)}
    assert pks(staff.get(calls, {"claim_expired": "no"})) == {str(world.running_id)}
    claims = admin_url(ExecutionClaim, "changelist")
    assert pks(staff.get(claims, {"claim_expired": "yes"})) == {str(expired_id)}
    assert pks(staff.get(claims, {"claim_expired": "no"})) == {str(world.running_id)}
    assert pks(staff.get(claims, {"worker": "w9"})) == {str(expired_id)}
    listing = staff.get(calls)
    assert b"expired" in listing.content


def test_outcome_filters_on_activities_and_events(staff, world):
    activities = admin_url(ToolActivity, "changelist")
    settled = ToolActivity.objects.get(tool_call_id=world.settled_id)
    assert pks(staff.get(activities, {"status": "completed"})) == {str(settled.pk)}
    assert pks(staff.get(activities, {"status": "in_progress"})) == {
        str(ToolActivity.objects.get(tool_call_id=world.running_id).pk)
    }
    assert pks(staff.get(activities, {"status": "failed"})) == set()
    assert pks(staff.get(activities, {"is_final__exact": "1"})) == {str(settled.pk)}
    events = admin_url(ConversationEvent, "changelist")
    assert pks(staff.get(events, {"type__exact": "tool_call_response"})) == {str(world.response.pk)}
    assert pks(staff.get(events, {"outcome": "completed"})) == {str(world.response.pk)}
    assert pks(staff.get(events, {"outcome": "cancelled"})) == set()
    by_turn = staff.get(events, {"turn__id__exact": str(world.turn.pk)})
    assert len(pks(by_turn)) == 3


def test_other_filters(staff, world):
    token_list = admin_url(ApiToken, "changelist")
    assert pks(staff.get(token_list, {"token_status": "live"})) == {str(world.token.pk)}
    assert pks(staff.get(token_list, {"token_status": "revoked"})) == set()
    assert pks(staff.get(admin_url(Asset, "changelist"), {"kind__exact": "payload"})) == {
        str(a.pk) for a in Asset.objects.filter(kind="payload")
    }
    assert pks(staff.get(admin_url(Asset, "changelist"), {"kind__exact": "image"})) == set()
    rules = admin_url(PermissionRule, "changelist")
    assert pks(staff.get(rules, {"scope": "global"})) == {str(world.rule.pk)}
    assert pks(staff.get(rules, {"scope": "conversation"})) == set()
    assert pks(staff.get(rules, {"decision__exact": "deny"})) == {str(world.rule.pk)}
    assert pks(staff.get(admin_url(AsyncRun, "changelist"), {"status__exact": "running"})) == {
        str(world.run.pk)
    }
    assert pks(staff.get(admin_url(Launch, "changelist"), {"status__exact": "exited"})) == set()
    conversations = admin_url(Conversation, "changelist")
    assert pks(staff.get(conversations, {"unfinished": "yes"})) == {str(world.conversation.pk)}
    assert pks(staff.get(conversations, {"unfinished": "no"})) == set()
    assert pks(staff.get(admin_url(Turn, "changelist"), {"status__exact": "open"})) == {
        str(world.turn.pk)
    }


# --- Actions (each through a service) ---------------------------------------------------------


def run_action(client, model, action: str, selected: list[Any]):
    return client.post(
        admin_url(model, "changelist"),
        {"action": action, "_selected_action": [str(pk) for pk in selected], "index": 0},
    )


def test_cancel_settles_the_call(staff, world):
    response = run_action(staff, ToolCall, "cancel_calls", [world.bash_id])
    assert response.status_code == 302
    assert not ToolCall.objects.filter(pk=world.bash_id).exists()
    event = ConversationEvent.objects.get(tool_call_id=world.bash_id)
    assert event.type == "tool_call_response"
    assert event.payload["outcome"] == "cancelled"
    assert "Cancelled: 1 cancelled." in sent_messages(response)


def test_a_live_claim_is_not_released(staff, world):
    response = run_action(staff, ToolCall, "release_expired_claims", [world.running_id])
    assert response.status_code == 302
    assert ToolCall.objects.get(pk=world.running_id).state == "running"
    assert ExecutionClaim.objects.filter(call_id=world.running_id).exists()
    assert any("the claim is live" in text for text in sent_messages(response))


def test_release_claim_settles_a_running_call_indeterminate(staff, world):
    expire_claim(world.running_id)
    response = run_action(staff, ToolCall, "release_expired_claims", [world.running_id])
    assert response.status_code == 302
    assert not ToolCall.objects.filter(pk=world.running_id).exists()
    assert not ExecutionClaim.objects.filter(call_id=world.running_id).exists()
    event = ConversationEvent.objects.get(tool_call_id=world.running_id)
    assert event.payload["outcome"] == "indeterminate"
    assert any("settled indeterminate" in text for text in sent_messages(response))


def test_release_from_the_claims_changelist(staff, world):
    expire_claim(world.running_id)
    response = run_action(staff, ExecutionClaim, "release_expired_claims", [world.running_id])
    assert response.status_code == 302
    assert (
        ConversationEvent.objects.get(tool_call_id=world.running_id).payload["outcome"]
        == "indeterminate"
    )


def test_recovery_sweep_button_and_action(staff, world, settings):
    response = staff.get(reverse("admin:conversations_toolcall_recover"))
    assert response.status_code == 405
    listing = staff.get(admin_url(ToolCall, "changelist"))
    assert b"Run recovery sweep" in listing.content
    # A live claim is left alone by a sweep.
    response = staff.post(reverse("admin:conversations_toolcall_recover"))
    assert response.status_code == 302
    assert "Recovery sweep: nothing to do." in sent_messages(response)
    assert ToolCall.objects.get(pk=world.running_id).state == "running"
    # An expired one is recovered: a non-replay-safe tool settles indeterminate.
    settings.TOOLCORE_CLAIM_LEASE = 0
    posted = post_message(
        world.conversation,
        "a2",
        "assistant",
        [tool_block("prov-y", "notes", {"q": "y"})],
        turn_id=world.turn.pk,
    )
    (expired_id,) = posted.call_ids
    claim_acquire(call_id=expired_id, worker="w9")
    response = run_action(staff, ToolCall, "run_recovery_sweep", [world.bash_id])
    assert response.status_code == 302
    assert (
        ConversationEvent.objects.get(tool_call_id=expired_id).payload["outcome"] == "indeterminate"
    )
    assert any(text.startswith("Recovery sweep: 1 action(s)") for text in sent_messages(response))
    assert ToolCall.objects.filter(pk=world.bash_id).exists()  # the selection is not touched


def test_revoke_tokens(staff, world):
    response = run_action(staff, ApiToken, "revoke_tokens", [world.token.pk])
    assert response.status_code == 302
    world.token.refresh_from_db()
    assert world.token.revoked_at is not None
    assert "Revoked 1 token(s)." in sent_messages(response)
    again = run_action(staff, ApiToken, "revoke_tokens", [world.token.pk])
    assert "1 token(s) were already revoked." in sent_messages(again)


def test_verify_reports_ok_then_corrupt(staff, world):
    asset = Asset.objects.get(event=world.response, kind="payload")
    response = run_action(staff, Asset, "verify_digest", [asset.pk])
    assert any(text.endswith("OK, SHA-256 matches.") for text in sent_messages(response))
    store_replace(asset, b'{"content":"tampered"}')  # the file, or the object in the bucket
    response = run_action(staff, Asset, "verify_digest", [asset.pk])
    reports = sent_messages(response)
    assert any(str(asset.pk) in text and "corrupt" in text for text in reports)
    # The verify link on a timeline does the same and returns to the page it came from.
    back = admin_url(ConversationEvent, "change", world.response.pk)
    response = staff.get(
        reverse("admin:conversations_asset_verify", args=[asset.pk]), {"next": back}
    )
    assert response.status_code == 302
    assert response["Location"] == back
    assert any("corrupt" in text for text in sent_messages(response))
    response = staff.get(
        reverse("admin:conversations_asset_verify", args=[asset.pk]),
        {"next": "https://evil.example/"},
    )
    assert response["Location"] == admin_url(Asset, "change", asset.pk)


def test_actions_need_the_operate_permission(world):
    """A staff member with view permissions only sees the pages but cannot operate."""
    viewer = UserFactory(is_staff=True)
    viewer.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_toolcall", "view_apitoken"])
    )
    client = Client()
    client.force_login(viewer)
    assert client.get(admin_url(ToolCall, "changelist")).status_code == 200
    run_action(client, ToolCall, "cancel_calls", [world.bash_id])
    assert ToolCall.objects.get(pk=world.bash_id).state == "awaiting_approval"
    assert client.post(reverse("admin:conversations_toolcall_recover")).status_code == 403
    run_action(client, ApiToken, "revoke_tokens", [world.token.pk])
    world.token.refresh_from_db()
    assert world.token.revoked_at is None


# --- Read-only events and secrets --------------------------------------------------------------


def test_events_cannot_be_added_changed_or_deleted(staff, world):
    model_admin = admin.site._registry[ConversationEvent]
    request = staff.get(admin_url(ConversationEvent, "changelist")).wsgi_request
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request, world.response)
    assert not model_admin.has_delete_permission(request, world.response)
    assert "delete_selected" not in model_admin.get_actions(request)
    before = ConversationEvent.objects.get(pk=world.response.pk).payload
    change = admin_url(ConversationEvent, "change", world.response.pk)
    page = staff.get(change)
    assert b'name="_save"' not in page.content
    refused = staff.post(change, {"type": "user_message", "sequence": 99, "payload": "{}"})
    assert refused.status_code == 403
    assert staff.get(admin_url(ConversationEvent, "add")).status_code == 403
    assert (
        staff.post(
            admin_url(ConversationEvent, "delete", world.response.pk), {"post": "yes"}
        ).status_code
        == 403
    )
    after = ConversationEvent.objects.get(pk=world.response.pk)
    assert (
        after.payload == before
        and after.type == "tool_call_response"
        and after.sequence == world.response.sequence
    )


def test_calls_and_tokens_are_read_only(staff, world):
    change = admin_url(ToolCall, "change", world.bash_id)
    assert staff.post(change, {"state": "ready"}).status_code == 403
    assert ToolCall.objects.get(pk=world.bash_id).state == "awaiting_approval"
    page = staff.get(admin_url(ApiToken, "change", world.token.pk))
    assert world.token.digest not in page.content.decode()
    assert f"{world.token.digest[:8]}…" in page.content.decode()
    listing = staff.get(admin_url(ApiToken, "changelist"))
    assert world.token.digest not in listing.content.decode()
    assert (
        staff.post(admin_url(ApiToken, "change", world.token.pk), {"digest": "0" * 64}).status_code
        == 403
    )


def test_global_rule_made_in_the_admin_records_its_author(staff, world):
    response = staff.post(
        admin_url(PermissionRule, "add"),
        {
            "tool_name": "bash",
            "pattern": "ls *",
            "decision": "allow",
            "reason": "harmless",
            "conversation": "",
        },
    )
    assert response.status_code == 302, response.content
    rule = PermissionRule.objects.get(tool_name="bash", pattern="ls *")
    assert rule.conversation_id is None
    assert rule.source == "admin"
    assert rule.created_by.is_staff


def test_conversation_delete_goes_through_the_service(staff, world):
    delete = admin_url(Conversation, "delete", world.conversation.pk)
    confirm = staff.get(delete)
    assert confirm.status_code == 200
    text = confirm.content.decode()
    assert "conversation events" in text.lower()
    response = staff.post(delete, {"post": "yes"})
    assert response.status_code == 302
    assert not Conversation.objects.filter(pk=world.conversation.pk).exists()
    assert not ConversationEvent.objects.filter(conversation_id=world.conversation.pk).exists()
    assert not ToolCall.objects.filter(conversation_id=world.conversation.pk).exists()


def test_conversation_page_links_to_filtered_changelists(staff, world):
    page = staff.get(admin_url(Conversation, "change", world.conversation.pk)).content.decode()
    events = (
        admin_url(ConversationEvent, "changelist")
        + f"?conversation__id__exact={world.conversation.pk}"
    )
    assert html.escape(events) in page or events in page
    other = conversation_create(owner=world.owner, title="Another case")
    post_message(other, "u-other", "user", [{"type": "text", "text": "hello"}])
    listing = staff.get(events)
    world.conversation.refresh_from_db()
    assert len(pks(listing)) == world.conversation.last_sequence == 3
    assert pks(listing) == {
        str(pk)
        for pk in ConversationEvent.objects.filter(conversation=world.conversation).values_list(
            "pk", flat=True
        )
    }


# --- Timelines ---------------------------------------------------------------------------------


def test_running_call_timeline_shows_events_claim_and_wire(staff, world):
    page = staff.get(admin_url(ToolCall, "change", world.running_id))
    timeline = page.context["timeline"]
    assert timeline["claim"]["worker"] == "w1"
    assert timeline["claim"]["generation"] == 1
    assert 0 < timeline["claim"]["lease_left"] <= 30
    assert timeline["claim"]["expired"] is False
    assert timeline["assistant_event"].type == "assistant_message"
    assert [row["event"].type for row in timeline["events"]] == [
        "user_message",
        "assistant_message",
        "tool_call_response",
    ]
    text = page.content.decode()
    assert 'id="call-timeline"' in text
    assert "w1" in text and "live" in text
    assert "prov-run" in text  # its tool_call block
    assert "&quot;status&quot;: &quot;in_progress&quot;" in text  # wire projection
    assert "Not yet: the model projection is made when the call settles." in text
    assert "Cancel call" in text and "Release expired claim" in text


def test_awaiting_call_timeline_shows_the_interaction(staff, world):
    page = staff.get(admin_url(ToolCall, "change", world.bash_id))
    timeline = page.context["timeline"]
    assert timeline["claim"] is None
    assert '"kind": "approval"' in timeline["interaction"]
    assert "&quot;kind&quot;: &quot;approval&quot;" in page.content.decode()


def test_settled_call_by_id_has_its_page_built_from_its_response(staff, world):
    page = staff.get(admin_url(ToolCall, "change", world.settled_id))
    assert page.status_code == 200
    assert page.context["response"].pk == world.response.pk
    assert page.context["timeline"]["settled"] is True
    assert admin_url(ConversationEvent, "change", world.response.pk) in page.content.decode()


def test_response_event_shows_projections_side_by_side_and_assets(staff, world):
    page = staff.get(admin_url(ConversationEvent, "change", world.response.pk))
    timeline = page.context["timeline"]
    assert timeline["settled"] is True and timeline["outcome"] == "completed"
    assert timeline["model"] == ["hi there\nsecond line"]
    assert timeline["transcript"]["args"] == ['q: "done"']
    assert timeline["transcript"]["result"] == ["hi there", "second line"]
    assert '"status": "completed"' in timeline["wire"]
    asset = Asset.objects.get(event=world.response, kind="payload")
    text = page.content.decode()
    for marker in ('id="projection-model"', 'id="projection-transcript"', 'id="projection-wire"'):
        assert marker in text
    assert "hi there\nsecond line" in text
    assert "q: &quot;done&quot;" in text
    assert "&quot;status&quot;: &quot;completed&quot;" in text
    assert asset.sha256 in text
    assert f"{asset.size} bytes" in text
    assert reverse("admin:conversations_asset_verify", args=[asset.pk]) in text
    assert asset_store().location(asset.path) in text
    assert text.count("its assistant message") == 1  # marked in the turn's events, listed once


def test_other_events_have_no_call_panel(staff, world):
    user_event = ConversationEvent.objects.get(conversation=world.conversation, sequence=1)
    page = staff.get(admin_url(ConversationEvent, "change", user_event.pk))
    assert page.status_code == 200
    assert "timeline" not in page.context
    assert "fix it" in page.content.decode()  # the payload, read only


def test_the_workers_list_says_which_run_which_stopped_and_which_went_silent(staff):
    for name in ("host-a:1", "host-a:2", "host-b:3"):
        worker_heartbeat(name=name, host=name.split(":")[0])
    worker_gone(name="host-a:2")
    WorkerHeartbeat.objects.filter(name="host-b:3").update(
        heartbeat_at=timezone.now() - timedelta(minutes=5)
    )
    listing = staff.get(admin_url(WorkerHeartbeat, "changelist"))
    states = {
        row.name: admin.site._registry[WorkerHeartbeat].state(row)
        for row in listing.context["cl"].result_list
    }
    assert states == {"host-a:1": "running", "host-a:2": "stopped", "host-b:3": "silent"}
    text = listing.content.decode()
    assert 'class="field-state">stopped<' in text and 'class="field-state">silent<' in text
