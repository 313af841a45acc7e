"""Toolcore as an MCP server, end to end: the official SDK's client (``streamable_http_client`` and
``ClientSession``) against live daphne processes of a site of their own
(``tests/realtime/daphne_helpers.py``: a fresh SQLite file, or a PostgreSQL database and the
suite's Redis when the suite runs on them), with REST beside it as a person approving would use.

One site for the module, its first daphne running the tool workers; the test of sessions across
processes starts a second daphne. Progress is reported every second
(``TOOLCORE_MCP_PROGRESS_SECONDS=1``) to keep the waits short.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp.client.client import Client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.realtime.daphne_helpers import Daphne, site
from tests.waits import until

pytestmark = pytest.mark.e2e

CALL_ID = re.compile(r"Tool call ([0-9a-f-]{36})")
WAIT = 30  # the longest a test waits for one answer


@pytest.fixture(scope="module")
def mcp_site(tmp_path_factory) -> Any:
    """The module's site, once for its tests (several seconds: two ``manage.py`` commands and a
    daphne started); each test opens sessions and conversations of its own."""
    with site(tmp_path_factory.mktemp("mcp")) as made:
        made.manage(
            "shell",
            "-c",
            "from django.contrib.auth import get_user_model\n"
            "get_user_model().objects.create_user('bob', password='bob-password-1')",
        )
        lines = made.manage("create_token", "bob").strip().splitlines()
        made.bob_token = lines[-1].split()[-1]
        made.server = made.daphne(TOOLCORE_WORKERS="1", TOOLCORE_MCP_PROGRESS_SECONDS="1")
        yield made
        errors = made.errors()
    assert not errors, "daphne logged errors:\n" + "\n".join(errors)


def _http(token: str | None, **headers: str) -> httpx2.AsyncClient:
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(WAIT, read=120))


@contextlib.asynccontextmanager
async def mcp_client(
    server: Daphne, token: str, *, elicit: Any = None, **headers: str
) -> AsyncIterator[ClientSession]:
    url = f"{server.http_url}/mcp/"
    async with (
        _http(token, **headers) as http,
        streamable_http_client(url, http_client=http) as (r, w),
        ClientSession(r, w, elicitation_callback=elicit) as session,
    ):
        await session.initialize()
        yield session


async def rest(server: Daphne, token: str, method: str, path: str, body: Any = None) -> Any:
    """A REST call; its status and JSON answer."""
    async with _http(token) as http:
        answer = await http.request(method, f"{server.http_url}/api/v1{path}", json=body)
    return answer.status_code, (answer.json() if answer.content else None)


class Progress:
    """What a call's progress notifications said."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.changed = asyncio.Event()

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.messages.append(message or "")
        self.changed.set()

    async def count(self, n: int) -> list[str]:
        async with asyncio.timeout(WAIT):
            while len(self.messages) < n:
                self.changed.clear()
                await self.changed.wait()
        return self.messages

    async def call_id(self) -> str:
        (first, *_) = await self.count(1)
        found = CALL_ID.search(first)
        assert found, first
        return found.group(1)


async def allow(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"decision": "allow"})


async def deny(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"decision": "deny"})


def _texts(result: types.CallToolResult) -> list[str]:
    return [block.text for block in result.content if isinstance(block, types.TextContent)]


async def _settled(server: Daphne, token: str, call_id: str) -> dict[str, Any]:
    """The call's REST answer once it settled."""
    async with asyncio.timeout(WAIT):
        while True:
            status, body = await rest(server, token, "GET", f"/tool-calls/{call_id}")
            assert status == 200, body
            if "outcome" in body:
                return body
            await asyncio.sleep(0.2)


async def test_tools_are_listed_with_the_catalogs_schemas_and_annotations(mcp_site):
    async with mcp_client(mcp_site.server, mcp_site.token) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert set(tools) == {
        "bash",
        "read",
        "grep",
        "find",
        "ls",
        "async_bash_logs",
        "async_bash_kill",
    }
    bash, ls = tools["bash"].annotations, tools["ls"].annotations
    assert (bash.read_only_hint, bash.destructive_hint, bash.open_world_hint) == (False, True, True)
    assert (ls.read_only_hint, ls.destructive_hint, ls.open_world_hint) == (True, None, False)
    assert tools["async_bash_kill"].annotations.destructive_hint is True
    assert tools["bash"].input_schema["required"] == ["command"]
    assert all(tool.title and tool.annotations.title == tool.title for tool in tools.values())


async def test_the_sdks_auto_client_falls_back_to_the_handshake(mcp_site):
    """``Client`` probes ``server/discover`` at 2026-07-28 first: refused with -32022 naming the
    handshake versions, it initializes a session instead."""
    async with _http(mcp_site.token) as http:
        transport = streamable_http_client(f"{mcp_site.server.http_url}/mcp/", http_client=http)
        async with Client(transport, mode="auto") as client:
            assert client.protocol_version == "2025-11-25"
            result = await client.call_tool("ls", {})
    assert result.structured_content["outcome"] == "completed"


async def test_ls_completes_with_the_rest_results_text_and_links_to_its_assets(mcp_site):
    server, token = mcp_site.server, mcp_site.token
    async with mcp_client(server, token) as session:
        result = await session.call_tool("ls", {})
    assert not result.is_error
    call_id = result.structured_content["toolCallId"]
    status, settled = await rest(server, token, "GET", f"/tool-calls/{call_id}")
    assert status == 200 and settled["outcome"] == "completed"
    response = settled["response"]
    assert _texts(result) == [b["text"] for b in response["payload"]["modelContent"]]
    # The turn barrier's results give the same text; the MCP turn ended with its call.
    cid = result.structured_content["conversationId"]
    _, turn = await rest(
        server, token, "GET", f"/conversations/{cid}/turns/{response['turnId']}/results"
    )
    assert turn["results"][0]["modelContent"] == response["payload"]["modelContent"]
    _, snapshot = await rest(server, token, "GET", f"/conversations/{cid}/snapshot")
    assert snapshot["openTurn"] is None
    links = [b for b in result.content if isinstance(b, types.ResourceLink)]
    assert [str(link.uri).rsplit("/", 1)[1] for link in links] == response["payload"]["assetIds"]
    async with _http(token) as http:
        assert (await http.get(str(links[0].uri))).status_code == 200
    _, conversation = await rest(server, token, "GET", f"/conversations/{cid}")
    assert conversation["title"] == "mcp 0.1.0"  # the SDK client's clientInfo


async def test_bash_waits_for_an_approval_given_over_rest_reporting_progress(mcp_site):
    server, token = mcp_site.server, mcp_site.token
    progress = Progress()
    async with mcp_client(server, token) as session:
        call = asyncio.create_task(
            session.call_tool("bash", {"command": "echo hi"}, progress_callback=progress)
        )
        call_id = await progress.call_id()
        messages = await progress.count(2)  # it keeps saying so while it waits
        assert (
            "awaits approval" in messages[1] and f"/tool-calls/{call_id}/resolution" in messages[1]
        )
        assert not call.done()
        body = {"requestId": "r1", "kind": "approval", "decision": "allow"}
        status, _ = await rest(server, token, "POST", f"/tool-calls/{call_id}/resolution", body)
        assert status == 200
        result = await asyncio.wait_for(call, WAIT)
    assert not result.is_error
    assert _texts(result)[0].startswith("hi")
    assert result.structured_content["exitCode"] == 0
    assert result.structured_content["toolCallId"] == call_id


async def test_a_denial_over_rest_is_an_error_result(mcp_site):
    server, token = mcp_site.server, mcp_site.token
    progress = Progress()
    async with mcp_client(server, token) as session:
        call = asyncio.create_task(
            session.call_tool("bash", {"command": "echo no"}, progress_callback=progress)
        )
        call_id = await progress.call_id()
        body = {"requestId": "r1", "kind": "approval", "decision": "deny"}
        await rest(server, token, "POST", f"/tool-calls/{call_id}/resolution", body)
        result = await asyncio.wait_for(call, WAIT)
    assert result.is_error
    assert result.structured_content["outcome"] == "denied"
    assert "Approval denied." in _texts(result)[0]


async def test_a_deny_rule_answers_at_once_with_the_denied_error_result(mcp_site):
    """A global deny rule of the admin's (its pattern names only this test's command, so the
    module's other calls are still asked): nothing is asked, nothing waits, nothing runs."""
    mcp_site.manage(
        "shell",
        "-c",
        "from tools.models import PermissionRule\n"
        "PermissionRule.objects.create(tool_name='bash', pattern='echo denied-by-rule *', "
        "decision='deny', reason='Not this one.')",
    )
    asked: list[types.ElicitRequestParams] = []

    async def elicit(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return await allow(ctx, params)

    progress = Progress()
    async with mcp_client(mcp_site.server, mcp_site.token, elicit=elicit) as session:
        result = await asyncio.wait_for(
            session.call_tool(
                "bash", {"command": "echo denied-by-rule now"}, progress_callback=progress
            ),
            10,  # "at once": well under the wait of an approval, nobody answers anything
        )
    assert result.is_error
    assert result.structured_content["outcome"] == "denied"
    assert not asked and not progress.messages  # never awaited an approval
    call_id = result.structured_content["toolCallId"]
    settled = await _settled(mcp_site.server, mcp_site.token, call_id)
    assert settled["outcome"] == "denied"
    payload = settled["response"]["payload"]
    assert payload["supervision"]["decision"] == "deny"
    assert payload["supervision"]["rule"]["pattern"] == "echo denied-by-rule *"
    assert payload["resolution"] is None  # nobody was asked
    assert "Reason: Not this one." in _texts(result)[0]


@pytest.mark.parametrize(("answer", "outcome"), [(allow, "completed"), (deny, "denied")])
async def test_the_clients_user_decides_through_elicitation(mcp_site, answer, outcome):
    asked: list[types.ElicitRequestParams] = []

    async def elicit(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return await answer(ctx, params)

    async with mcp_client(mcp_site.server, mcp_site.token, elicit=elicit) as session:
        result = await asyncio.wait_for(session.call_tool("bash", {"command": "echo asked"}), WAIT)
    assert result.structured_content["outcome"] == outcome
    assert result.is_error is (outcome != "completed")
    (params,) = asked
    assert "echo asked" in params.message
    assert params.requested_schema["required"] == ["decision"]
    call_id = result.structured_content["toolCallId"]
    settled = await _settled(mcp_site.server, mcp_site.token, call_id)
    assert settled["response"]["payload"]["resolvedBy"] == "e2e"
    assert settled["response"]["payload"]["resolutionRequestId"] == f"mcp-elicitation-{call_id}"


async def test_a_decision_made_elsewhere_first_wins_and_withdraws_the_elicitation(mcp_site):
    server, token = mcp_site.server, mcp_site.token
    asked, withdrawn = asyncio.Event(), asyncio.Event()

    async def elicit(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.set()
        try:
            await asyncio.sleep(WAIT)  # the client's user takes their time
        except asyncio.CancelledError:
            withdrawn.set()
            raise
        return types.ElicitResult(action="accept", content={"decision": "deny"})

    progress = Progress()
    async with mcp_client(server, token, elicit=elicit) as session:
        call = asyncio.create_task(
            session.call_tool("bash", {"command": "echo first"}, progress_callback=progress)
        )
        call_id = await progress.call_id()
        await asyncio.wait_for(asked.wait(), WAIT)
        body = {"requestId": "page", "kind": "approval", "decision": "allow"}
        await rest(server, token, "POST", f"/tool-calls/{call_id}/resolution", body)
        result = await asyncio.wait_for(call, WAIT)
        await asyncio.wait_for(withdrawn.wait(), WAIT)
    assert result.structured_content["outcome"] == "completed"
    # A late answer of the elicitation finds the call decided: it changes nothing.
    settled = await _settled(server, token, call_id)
    assert settled["response"]["payload"]["resolutionRequestId"] == "page"


def _processes_running(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if marker in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode():
                    found.append(int(entry.name))
    return found


async def test_the_clients_cancel_stops_the_call_and_kills_its_process_group(mcp_site):
    server, token = mcp_site.server, mcp_site.token
    marker = f"300.{secrets.randbelow(10**6):06d}"
    progress = Progress()
    async with mcp_client(server, token, elicit=allow) as session:
        call = asyncio.create_task(
            session.call_tool("bash", {"command": f"sleep {marker}"}, progress_callback=progress)
        )
        await until(
            lambda: _processes_running(marker), within=WAIT, every=0.1, what="the command started"
        )
        call_id = await progress.call_id()
        call.cancel()  # the SDK sends notifications/cancelled for the request
        with contextlib.suppress(asyncio.CancelledError):
            await call
        settled = await _settled(server, token, call_id)
    # A running call's effect cannot be confirmed undone (the Cancel rules).
    assert settled["outcome"] in ("indeterminate", "cancelled")
    await until(
        lambda: not _processes_running(marker),
        within=WAIT,
        every=0.1,
        what="the process group was killed",
    )


async def test_a_dropped_stream_leaves_the_call_running_to_be_read_later(mcp_site):
    server, token = mcp_site.server, mcp_site.token
    async with Raw(server, token) as raw:
        await raw.initialize()
        messages = raw.stream(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {
                    "name": "bash",
                    "arguments": {"command": "sleep 1; echo later"},
                    "_meta": {"progressToken": "p"},
                },
            }
        )
        first = await anext(messages)
        assert first["method"] == "notifications/progress"
        await messages.aclose()  # the client goes away without a cancel
    call_id = CALL_ID.search(first["params"]["message"]).group(1)
    body = {"requestId": "r1", "kind": "approval", "decision": "allow"}
    status, _ = await rest(server, token, "POST", f"/tool-calls/{call_id}/resolution", body)
    assert status == 200
    settled = await _settled(server, token, call_id)
    assert settled["outcome"] == "completed"
    assert "later" in settled["response"]["payload"]["modelContent"][0]["text"]


async def test_a_background_run_is_paged_with_async_bash_logs(mcp_site):
    async with mcp_client(mcp_site.server, mcp_site.token, elicit=allow) as session:
        started = await session.call_tool(
            "bash",
            {"command": "printf 'one\\ntwo\\nthree\\n'; sleep 0.2", "run_in_background": True},
        )
        run_id = started.structured_content["asyncRunId"]
        assert run_id and run_id in _texts(started)[0]
        async with asyncio.timeout(WAIT):
            while True:
                logs = await session.call_tool("async_bash_logs", {"id": run_id, "offset": 0})
                if "three" in _texts(logs)[0]:
                    break
                await asyncio.sleep(0.2)
    assert not logs.is_error
    text = _texts(logs)[0]
    assert text.index("one") < text.index("two") < text.index("three")


async def test_no_or_a_bad_token_is_401_with_a_bearer_challenge(mcp_site):
    url = f"{mcp_site.server.http_url}/mcp/"
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    for token in (None, "tc_not-a-token"):
        async with _http(token) as http:
            answer = await http.post(url, json=message)
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"].startswith('Bearer realm="toolcore"')
        assert answer.json()["error"] in ("unauthorized", "invalid_token")


async def test_two_users_never_reach_each_others_sessions_or_calls(mcp_site):
    server, alice, bob = mcp_site.server, mcp_site.token, mcp_site.bob_token
    progress = Progress()
    async with Raw(server, alice) as mine, Raw(server, bob) as theirs:
        await mine.initialize()
        await theirs.initialize()
        async with mcp_client(server, alice) as session:
            call = asyncio.create_task(
                session.call_tool("bash", {"command": "echo mine"}, progress_callback=progress)
            )
            call_id = await progress.call_id()
            # Bob's token with Alice's session: as unknown as a session that never was.
            theirs_on_mine = Raw(server, bob, session_id=mine.session_id)
            async with theirs_on_mine:
                assert (
                    await theirs_on_mine.post({"jsonrpc": "2.0", "id": 9, "method": "ping"}) == 404
                )
            # Bob answers an elicitation for Alice's call, and cancels "her" request id: nothing.
            answer = {
                "jsonrpc": "2.0",
                "id": f"toolcore-approval-{call_id}",
                "result": {"action": "accept", "content": {"decision": "allow"}},
            }
            assert await theirs.post(answer) == 202
            for request_id in (1, 2, 3):  # whichever id Alice's request had
                params = {"requestId": request_id}
                cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}
                assert await theirs.post(cancel) == 202
            assert (await rest(server, bob, "GET", f"/tool-calls/{call_id}"))[0] == 404
            status, body = await rest(server, alice, "GET", f"/tool-calls/{call_id}")
            assert status == 200 and body["state"] == "awaiting_approval"
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await call
            # Waited for with Alice's session still open: the SDK posts the cancellation from a
            # task of the session, which its close may end first (the call then never heard it).
            assert (await _settled(server, alice, call_id))["outcome"] == "cancelled"
        assert await theirs.post({"jsonrpc": "2.0", "id": 3, "method": "ping"}) == 200


async def test_a_session_continues_on_another_daphne(mcp_site):
    """Initialized on one process, called on another, the elicitation answered to the first:
    the session and the call live in the database (and on PostgreSQL + Redis the wake-up
    crosses processes on the channel layer)."""
    first = mcp_site.server
    second = mcp_site.daphne(TOOLCORE_WORKERS="0", TOOLCORE_MCP_PROGRESS_SECONDS="1")
    async with Raw(first, mcp_site.token) as on_first:
        await on_first.initialize(capabilities={"elicitation": {"form": {}}})
        async with Raw(second, mcp_site.token, session_id=on_first.session_id) as on_second:
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert await on_second.post(initialized) == 202
            call = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "bash", "arguments": {"command": "echo across"}},
            }
            seen = []
            async for message in on_second.stream(call):
                seen.append(message)
                if message.get("method") == "elicitation/create":
                    reply = {
                        "jsonrpc": "2.0",
                        "id": message["id"],
                        "result": {"action": "accept", "content": {"decision": "allow"}},
                    }
                    assert await on_first.post(reply) == 202
                if message.get("id") == 2:
                    break
            result = seen[-1]["result"]
            assert result["structuredContent"]["outcome"] == "completed"
            assert result["content"][0]["text"].startswith("across")
            assert any(m.get("method") == "elicitation/create" for m in seen)
            assert (await on_second.delete()) == 204
        assert await on_first.post({"jsonrpc": "2.0", "id": 3, "method": "ping"}) == 404


class Raw:
    """A hand-made MCP client of one daphne: what the SDK's client cannot do (drop a stream,
    move a session to another server, borrow another user's session)."""

    def __init__(self, server: Daphne, token: str, session_id: str | None = None) -> None:
        self.url = f"{server.http_url}/mcp/"
        self.session_id = session_id
        self.http = _http(token, Accept="application/json, text/event-stream")

    async def __aenter__(self) -> Raw:
        await self.http.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.http.__aexit__(*exc)

    def _headers(self) -> dict[str, str]:
        return {"mcp-session-id": self.session_id} if self.session_id else {}

    async def initialize(self, capabilities: dict[str, Any] | None = None) -> None:
        message = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": capabilities or {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        }
        async for _ in self.stream(message):
            pass
        assert self.session_id

    async def post(self, message: dict[str, Any]) -> int:
        answer = await self.http.post(self.url, json=message, headers=self._headers())
        return answer.status_code

    async def delete(self) -> int:
        return (await self.http.delete(self.url, headers=self._headers())).status_code

    async def stream(self, message: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """The JSON-RPC messages of a request's SSE answer, as they come."""
        async with self.http.stream(
            "POST", self.url, json=message, headers=self._headers()
        ) as answer:
            assert answer.status_code == 200, await answer.aread()
            self.session_id = self.session_id or answer.headers["mcp-session-id"]
            async for line in answer.aiter_lines():
                if line.startswith("data:") and line[5:].strip():
                    yield json.loads(line[5:])
