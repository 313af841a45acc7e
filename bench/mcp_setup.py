"""What bench/mcp.py's benches share: the site (the bench database, its user, token,
conversations and rules, the ``stamp`` stdio server registered, daphne serving
``bench/mcp_asgi.py``), the HTTP clients, and a model's client on REST.

Nothing here is imported before bench/mcp.py has set the benches' environment
(bench/_setup.py) and kept this folder from shadowing the SDK's package ``mcp``.
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
STAMP_SERVER = HERE / "mcp_stamp_server.py"
NOTES = "notes.txt"
NOTES_TEXT = "the bench's small file\n" * 20
WAIT = 30  # seconds: the barrier's wait, and the longest any call may take
WARMUP = 5


class Site:
    """The bench database, its user, token, conversations and rules, the ``stamp`` server
    registered, and daphne serving ``bench/mcp_asgi.py`` on them."""

    def __init__(self, folder: Path) -> None:
        from _setup import django_on_bench_database, process_env

        self.connection = django_on_bench_database()
        from django.contrib.auth import get_user_model

        from conversations.api.auth import token_create
        from conversations.services.conversations import conversation_create
        from tools.models import McpServer, PermissionRule
        from tools.runtime.mcp.services import mcp_server_refresh, mcp_server_save
        from tools.workspaces import conversation_workspace

        self.vendor = self.connection.vendor
        self.user = get_user_model().objects.create(username="bench")
        _, self.token = token_create(user=self.user, name="bench")
        self.mcp_conversation = conversation_create(owner=self.user, title="mcp")
        self.rest_conversation, self.turn_id = _conversation_with_turn(self.user)
        for conversation in (self.mcp_conversation, self.rest_conversation):
            workspace = conversation_workspace(conversation)
            workspace.mkdir(parents=True, exist_ok=True)
            (workspace / NOTES).write_text(NOTES_TEXT)
        for tool in ("read", "mcp__stamp__stamp"):
            PermissionRule.objects.create(tool_name=tool, decision="allow")
        server = mcp_server_save(
            name="stamp",
            transport=McpServer.Transport.STDIO,
            command=sys.executable,
            arguments=[str(STAMP_SERVER)],
        )
        listed = mcp_server_refresh(server=server)
        assert listed == ["stamp"], listed
        self.stamps = folder / "settlements.txt"
        self.stamps.touch()
        from realtime_peers import Daphne

        env = process_env(
            self.connection,
            TOOLCORE_WORKERS="1",  # the embedded worker: the call runs in daphne's process
            ALLOWED_HOSTS="127.0.0.1,localhost",
            BENCH_MCP_STAMPS=str(self.stamps),
            TOOLCORE_MCP_MAX_WAITING="100000",  # the waiting bench's streams are one user's
        )
        self.daphne = Daphne("bench.mcp_asgi:application", env, folder / "daphne.log")

    def url(self, path: str) -> str:
        return self.daphne.url(path)

    def close(self) -> None:
        from _setup import drop_bench_database
        from django.db import connections

        try:
            errors = self.daphne.stop()
            if "Traceback" in errors:
                raise RuntimeError(f"daphne logged an error:\n{errors[-4000:]}")
        finally:
            connections.close_all()
            if self.vendor == "postgresql":
                self.connection.close_pool()
                self._wait_alone()
            drop_bench_database(self.connection)

    def _wait_alone(self, timeout: float = 20.0) -> None:
        """Until the other sessions of the bench database (daphne's) have ended: a database
        in use cannot be dropped."""
        name = self.connection.settings_dict["NAME"]
        deadline = time.monotonic() + timeout
        with self.connection._nodb_cursor() as cursor:
            while time.monotonic() < deadline:
                cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [name])
                if cursor.fetchone()[0] == 0:
                    return
                time.sleep(0.1)


def _conversation_with_turn(user: Any) -> tuple[Any, str]:
    from _setup import conversation_with_turn

    return conversation_with_turn(user, "rest")


# --- the clients ------------------------------------------------------------------------------


def _http(token: str | None, *, unlimited: bool = False, **headers: str) -> Any:
    """An HTTP client; ``unlimited``: no bound on its connections (a stream each) and no read
    timeout (streams that wait)."""
    import httpx2

    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if unlimited:
        return httpx2.AsyncClient(
            headers=headers,
            timeout=httpx2.Timeout(WAIT, read=None),
            limits=httpx2.Limits(max_connections=None, max_keepalive_connections=None),
        )
    return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(WAIT, read=WAIT + 10))


class RestCaller:
    """A model's client on REST: an assistant message with one call, then the turn barrier."""

    def __init__(self, site: Site, http: Any) -> None:
        self.http = http
        cid = site.rest_conversation.pk
        self.messages = site.url(f"/api/v1/conversations/{cid}/messages")
        self.barrier = site.url(f"/api/v1/conversations/{cid}/turns/{site.turn_id}/results")
        self.turn_id = site.turn_id

    async def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The call's id and its result at the barrier (completed)."""
        body = {
            "messageId": f"a-{uuid.uuid4().hex}",
            "role": "assistant",
            "turnId": self.turn_id,
            "content": [{"type": "tool_call", "id": "c0", "name": name, "arguments": arguments}],
        }
        posted = await self.http.post(self.messages, json=body)
        if posted.status_code != 201:
            raise RuntimeError(f"POST answered {posted.status_code}: {posted.text[:500]}")
        answer = await self.http.get(self.barrier, params={"wait": WAIT})
        results = answer.json()
        if not results.get("settled") or results["results"][0]["outcome"] != "completed":
            raise RuntimeError(f"the call did not complete: {results}")
        return posted.json()["toolCalls"][0]["id"], results["results"][0]

    async def read(self) -> None:
        await self.call("read", {"path": NOTES})


async def _timed(fn: Any, n: int) -> list[float]:
    """Seconds of each of ``n`` awaited calls of ``fn``, one after the other."""
    times = []
    for _ in range(n):
        started = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - started)
    return times
