"""The MCP endpoint's own checks, in process (``conversations/mcp/transport.py``): the real ASGI
application of ``config.asgi`` and the real SDK behind it, driven request by request. Every
refusal is a 4xx with a JSON body, never a 500. The end-to-end flows against live daphne
processes are in ``test_server_e2e.py``.
"""

from __future__ import annotations

import asyncio
import io
from typing import Any
from urllib.parse import urlsplit

import pytest
from asgiref.sync import sync_to_async

from conversations.api.auth import token_create
from conversations.models import Conversation, McpSession, Turn
from conversations.services.messages import mcp_call_post
from conversations.services.turns import turn_open_find
from tests.factories import ConversationFactory, UserFactory

from .asgi_helpers import INITIALIZE, request

# The test's own sync calls share one thread: its connection goes back after each test.
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("_connections_given_back"),
]


def _made(user) -> str:
    return token_create(user=user)[1]


@pytest.fixture
def alice():
    user = UserFactory()
    return user, _made(user)


@pytest.fixture
def bob():
    user = UserFactory()
    return user, _made(user)


async def _session(token: str, **kw: Any) -> str:
    answer = await request(body=INITIALIZE, token=token, **kw)
    assert answer.status == 200, answer.body
    return answer.headers["mcp-session-id"]


async def test_no_token_is_401_with_a_bearer_challenge():
    answer = await request(body=INITIALIZE)
    assert answer.status == 401
    assert answer.headers["www-authenticate"] == 'Bearer realm="toolcore"'
    assert answer.json()["error"] == "unauthorized"


async def test_a_bad_token_is_401_invalid_token(db):
    answer = await request(body=INITIALIZE, token="tc_nope")
    assert answer.status == 401
    assert answer.headers["www-authenticate"].startswith(
        'Bearer realm="toolcore", error="invalid_token"'
    )
    assert answer.json()["error"] == "invalid_token"


async def test_a_host_not_allowed_is_400_and_a_foreign_origin_403(alice):
    _, token = alice
    answer = await request(body=INITIALIZE, token=token, headers={"host": "evil.example"})
    assert answer.status == 400
    answer = await request(body=INITIALIZE, token=token, headers={"origin": "http://evil.example"})
    assert answer.status == 403


@pytest.mark.parametrize(
    ("origin", "status"),
    [
        ("http://evil.example", 403),
        ("http://evil.example:8000", 403),
        ("http://localhost:8000", 200),
        ("http://127.0.0.1:8000", 200),
        ("http://[::1]:8000", 200),
        ("http://app.localhost", 200),
    ],
)
async def test_under_make_run_the_origin_is_checked_whatever_allowed_hosts_is(
    alice, settings, origin, status
):
    """``make run``: DEBUG on and ``ALLOWED_HOSTS`` ``*``. A page elsewhere whose name now
    points at 127.0.0.1 sends its own Host and Origin; only local origins pass."""
    settings.DEBUG, settings.ALLOWED_HOSTS = True, ["*"]
    _, token = alice
    host = urlsplit(origin).netloc
    answer = await request(body=INITIALIZE, token=token, headers={"host": host, "origin": origin})
    assert answer.status == status, answer.body[:300]


async def test_initialize_opens_a_session_on_a_new_conversation_titled_after_the_client(alice):
    user, token = alice
    answer = await request(body=INITIALIZE, token=token)
    assert answer.status == 200
    (result,) = answer.sse()
    assert result["result"]["protocolVersion"] == "2025-11-25"
    assert result["result"]["serverInfo"]["name"] == "toolcore"
    session = await sync_to_async(McpSession.objects.select_related("conversation").get)(
        pk=answer.headers["mcp-session-id"]
    )
    assert session.user_id == user.pk
    assert session.conversation.owner_id == user.pk
    assert session.conversation.title == "probe 0.9"
    assert session.client_info == {"name": "probe", "version": "0.9"}
    assert session.elicitation
    assert session.protocol_version == "2025-11-25"


async def test_initialize_continues_a_conversation_the_client_names(alice, bob):
    user, token = alice
    mine = await sync_to_async(ConversationFactory)(owner=user)
    theirs = await sync_to_async(ConversationFactory)(owner=bob[0])
    for kw in (
        {"headers": {"x-toolcore-conversation": str(mine.pk)}},
        {"query": f"conversation={mine.pk}"},
    ):
        session_id = await _session(token, **kw)
        session = await sync_to_async(McpSession.objects.get)(pk=session_id)
        assert session.conversation_id == mine.pk
    for named in (str(theirs.pk), "not-a-uuid"):
        answer = await request(
            body=INITIALIZE, token=token, headers={"x-toolcore-conversation": named}
        )
        assert answer.status == 400
        assert "not found" in answer.json()["error"]["message"]
    assert await sync_to_async(Conversation.objects.filter(owner=user).count)() == 1


async def test_bad_bodies_are_400_never_500(alice):
    _, token = alice
    session = await _session(token)
    cases = [
        (b"{not json", -32700),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "x": NaN}', -32700),
        (b"\xff\xfe", -32700),
        (b"[]", -32600),
        (b'[{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]', -32600),
        (b'{"id": 1, "method": "tools/list"}', -32600),
        (b'"just a string"', -32600),
        (b"[" * 200 + b"]" * 200, -32700),
    ]
    for raw, code in cases:
        answer = await request(raw=raw, token=token, session=session)
        assert answer.status == 400, (raw, answer.status, answer.body)
        assert answer.json()["error"]["code"] == code, raw


async def test_sessions_missing_unknown_or_another_users_are_400_and_404(alice, bob):
    _, token = alice
    _, other = bob
    mine = await _session(token)
    tools_list = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    answer = await request(body=tools_list, token=token)
    assert answer.status == 400
    assert answer.json()["id"] == 2
    for session, who in (("unknown", token), (mine, other), ("x" * 5000, token)):
        answer = await request(body=tools_list, token=who, session=session)
        assert answer.status == 404, answer.body
        answer = await request("DELETE", token=who, session=session)
        assert answer.status == 404
    answer = await request(body=tools_list, token=token, session=mine)
    assert answer.status == 200
    assert [m["result"]["tools"][0]["name"] for m in answer.sse()] == ["bash"]


async def test_delete_ends_the_session(alice):
    _, token = alice
    session = await _session(token)
    assert (await request("DELETE", token=token, session=session)).status == 204
    assert not await sync_to_async(McpSession.objects.filter(pk=session).exists)()
    answer = await request(
        body={"jsonrpc": "2.0", "id": 3, "method": "ping"}, token=token, session=session
    )
    assert answer.status == 404


async def test_get_and_other_methods_are_405(alice):
    _, token = alice
    session = await _session(token)
    for method in ("GET", "PUT", "PATCH"):
        answer = await request(method, token=token, session=session)
        assert answer.status == 405
        assert answer.headers["allow"] == "POST, DELETE"


async def test_a_sessionless_2026_request_is_refused_naming_the_versions_served(alice):
    _, token = alice
    discover = {"jsonrpc": "2.0", "id": 1, "method": "server/discover"}
    answer = await request(
        body=discover, token=token, headers={"mcp-protocol-version": "2026-07-28"}
    )
    assert answer.status == 400
    error = answer.json()["error"]
    assert error["code"] == -32022
    assert error["data"]["requested"] == "2026-07-28"
    assert "2025-11-25" in error["data"]["supported"]
    assert "2026-07-28" not in error["data"]["supported"]


async def test_a_body_over_the_limit_is_413(alice, settings):
    _, token = alice
    settings.TOOLCORE_MAX_BODY = 1000
    session = await _session(token)
    big = {
        "jsonrpc": "2.0",
        "id": 4,
        "method": "tools/call",
        "params": {"name": "ls", "arguments": {"path": "x" * 2000}},
    }
    answer = await request(body=big, token=token, session=session)
    assert answer.status == 413


async def test_unknown_tools_and_bad_arguments_are_answered_not_raised(alice):
    user, token = alice
    session = await _session(token)
    call = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/call",
        "params": {"name": "ask_user", "arguments": {}},
    }
    answer = await request(body=call, token=token, session=session)
    assert answer.status == 200
    (message,) = answer.sse()
    assert message["error"]["code"] == -32602
    assert "Unknown tool" in message["error"]["message"]
    # Arguments the schema refuses: the call is created and settles failed (supervision).
    call["params"] = {"name": "read", "arguments": {"nope": 1}}
    answer = await request(body=call, token=token, session=session)
    (message,) = answer.sse()
    assert message["result"]["isError"] is True
    assert message["result"]["structuredContent"]["outcome"] == "failed"
    assert "Missing required argument 'path'" in message["result"]["content"][0]["text"]
    # The call's MCP turn ended with it.
    conversation_id = (await sync_to_async(McpSession.objects.get)(pk=session)).conversation_id
    assert await sync_to_async(turn_open_find)(conversation_id) is None
    turn = await sync_to_async(Turn.objects.get)(conversation_id=conversation_id)
    assert (turn.origin, turn.status, turn.end_reason) == ("mcp", "ended", "completed")


async def test_client_answers_and_notifications_are_202_whatever_they_name(alice):
    _, token = alice
    session = await _session(token)
    messages = [
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}},
        {"jsonrpc": "2.0", "id": "toolcore-approval-not-a-uuid", "result": {"action": "accept"}},
        {
            "jsonrpc": "2.0",
            "id": "toolcore-approval-00000000-0000-0000-0000-000000000000",
            "result": {"action": "accept", "content": {"decision": "allow"}},
        },
        {"jsonrpc": "2.0", "id": 7, "result": {}},
        {"jsonrpc": "2.0", "id": 8, "error": {"code": -1, "message": "no"}},
    ]
    for message in messages:
        answer = await request(body=message, token=token, session=session)
        assert answer.status == 202, (message, answer.body)


async def test_a_command_nested_246_deep_is_denied_without_the_servers_words(alice):
    """It answered with Python's RecursionError message; now the walk is bounded: a deny rule
    denies it, as any line that cannot be read."""
    from tools.models import PermissionRule

    await sync_to_async(PermissionRule.objects.create)(
        tool_name="bash", pattern="rm *", decision="deny", reason="No deleting."
    )
    _, token = alice
    session = await _session(token)
    command = "$(" * 246 + "rm -rf data" + ")" * 246
    call = {
        "jsonrpc": "2.0",
        "id": 12,
        "method": "tools/call",
        "params": {"name": "bash", "arguments": {"command": command}},
    }
    answer = await asyncio.wait_for(request(body=call, token=token, session=session), 30)
    assert answer.status == 200
    (message,) = answer.sse()
    assert message["result"]["isError"] is True
    assert message["result"]["structuredContent"]["outcome"] == "denied"
    assert "recursion" not in str(message).lower()


async def test_a_cancel_that_overtakes_its_call_cancels_the_call_once_made(alice):
    """A client's notifications/cancelled can reach a daphne before its tools/call is
    committed (two connections): noted on the session, it cancels the call as soon as it is
    made, instead of the call running (here: waiting for an approval nobody gives)."""
    _, token = alice
    session = await _session(token)
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 11}}
    assert (await request(body=cancel, token=token, session=session)).status == 202
    row = await sync_to_async(McpSession.objects.get)(pk=session)
    assert row.cancelled_requests == ["11"]
    call = {
        "jsonrpc": "2.0",
        "id": 11,
        "method": "tools/call",
        "params": {"name": "bash", "arguments": {"command": "echo never"}},
    }
    answer = await asyncio.wait_for(request(body=call, token=token, session=session), 30)
    (message,) = answer.sse()
    assert message["result"]["isError"] is True
    assert message["result"]["structuredContent"]["outcome"] == "cancelled"


async def test_a_user_turn_open_refuses_the_call_as_a_tool_error(alice):
    user, token = alice
    session = await _session(token)
    conversation_id = (await sync_to_async(McpSession.objects.get)(pk=session)).conversation_id
    await sync_to_async(Turn.objects.create)(conversation_id=conversation_id, ordinal=1)
    call = {
        "jsonrpc": "2.0",
        "id": 6,
        "method": "tools/call",
        "params": {"name": "ls", "arguments": {}},
    }
    answer = await request(body=call, token=token, session=session)
    (message,) = answer.sse()
    assert message["result"]["isError"] is True
    assert "is open in this conversation" in message["result"]["content"][0]["text"]


def test_mcp_calls_made_side_by_side_share_one_turn_that_ends_with_the_last(db):
    conversation = ConversationFactory()
    first = mcp_call_post(
        conversation_id=conversation.pk,
        message_id="mcp-a",
        provider_call_id="mcp-1",
        tool_name="bash",
        arguments={"command": "true"},
    )
    second = mcp_call_post(
        conversation_id=conversation.pk,
        message_id="mcp-b",
        provider_call_id="mcp-2",
        tool_name="bash",
        arguments={"command": "false"},
    )
    assert first.body["turnId"] == second.body["turnId"]
    again = mcp_call_post(
        conversation_id=conversation.pk,
        message_id="mcp-a",
        provider_call_id="mcp-1",
        tool_name="bash",
        arguments={"command": "true"},
    )
    assert not again.created and again.body == first.body
    from conversations.services.cancel import call_cancel

    call_cancel(call_id=first.call_ids[0])
    turn = Turn.objects.get(pk=first.body["turnId"])
    assert turn.status == "open"
    call_cancel(call_id=second.call_ids[0])
    turn.refresh_from_db()
    assert (turn.status, turn.end_reason, turn.origin) == ("ended", "completed", "mcp")


def test_purge_forgets_the_sessions_unused_for_the_retention_period(db, settings):
    from datetime import timedelta

    from django.core.management import call_command
    from django.utils import timezone

    from conversations.services.mcp_sessions import mcp_session_open

    user = UserFactory()
    sessions = [
        mcp_session_open(
            user=user,
            conversation_id=None,
            client_info={"name": "c"},
            capabilities={},
            protocol_version="2025-11-25",
        )
        for _ in range(2)
    ]
    McpSession.objects.filter(pk=sessions[0].pk).update(
        last_seen_at=timezone.now() - timedelta(days=31)
    )
    settings.TOOLCORE_RETENTION_DAYS = 30
    out = io.StringIO()
    call_command("purge", stdout=out)
    assert "Deleted 1 MCP session(s) not used for 30 day(s)." in out.getvalue()
    assert list(McpSession.objects.values_list("pk", flat=True)) == [sessions[1].pk]


async def test_failed_tokens_lock_the_address_out_with_429(db, settings):
    settings.TOOLCORE_LOCKOUT_FAILURES = 2
    assert (await request(body=INITIALIZE, token="tc_bad-1")).status == 401
    answer = await request(body=INITIALIZE, token="tc_bad-2")
    assert answer.status == 429
    assert int(answer.headers["retry-after"]) > 0
    assert answer.json()["error"] == "throttled"


async def test_a_user_s_waiting_calls_are_bounded_and_the_next_is_refused_saying_why(
    alice, bob, settings
):
    """With TOOLCORE_MCP_MAX_WAITING at 1, a second tools/call while the first waits (for an
    approval nobody gives) is a JSON-RPC error and makes no call; another user is not held by
    it; once the first ends, the user may call again."""
    from conversations.models import ToolCall
    from conversations.services.cancel import call_cancel
    from tests.waits import until

    settings.TOOLCORE_MCP_MAX_WAITING = 1
    user, token = alice
    session = await _session(token)

    def call(request_id: int, command: str) -> dict[str, Any]:
        return {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": "bash", "arguments": {"command": command}},
        }

    waiting = asyncio.create_task(request(body=call(1, "echo first"), token=token, session=session))
    first = await until(
        sync_to_async(
            lambda: ToolCall.objects.filter(
                conversation__owner=user, state="awaiting_approval"
            ).first()
        ),
        what="the first call awaiting approval",
    )
    refused = await asyncio.wait_for(
        request(body=call(2, "echo second"), token=token, session=session), 30
    )
    (message,) = refused.sse() or [refused.json()]
    assert message["error"]["code"] == -32600
    assert "1 of your tools/call requests are waiting already" in message["error"]["message"]
    count = await sync_to_async(ToolCall.objects.filter(conversation__owner=user).count)()
    assert count == 1  # no call made for the refused request

    other_user, other_token = bob
    other_session = await _session(other_token)
    theirs = asyncio.create_task(
        request(body=call(1, "echo theirs"), token=other_token, session=other_session)
    )
    await until(
        sync_to_async(
            ToolCall.objects.filter(
                conversation__owner=other_user, state="awaiting_approval"
            ).exists
        ),
        what="the other user's call waiting",
    )

    await sync_to_async(call_cancel)(call_id=first.pk)
    ended = await asyncio.wait_for(waiting, 30)
    assert ended.sse()[-1]["result"]["structuredContent"]["outcome"] == "cancelled"
    again = asyncio.create_task(request(body=call(3, "echo again"), token=token, session=session))
    await until(
        sync_to_async(
            ToolCall.objects.filter(conversation__owner=user, state="awaiting_approval").exists
        ),
        what="the user's next call waiting",
    )
    # Each wait ends with its call: cancelled, it answers, and the process counts no waiter.
    unfinished = await sync_to_async(
        lambda: list(
            ToolCall.objects.filter(state="awaiting_approval").values_list("pk", flat=True)
        )
    )()
    for call_id in unfinished:
        await sync_to_async(call_cancel)(call_id=call_id)
    for task in (again, theirs):
        answer = await asyncio.wait_for(task, 30)
        assert answer.sse()[-1]["result"]["structuredContent"]["outcome"] == "cancelled"
    from conversations.mcp.calls import _waiting

    assert not _waiting
