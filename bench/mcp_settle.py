"""bench/mcp.py's second bench: a stdio MCP server's answer to its call's settlement committed
(stamped in daphne by bench/mcp_asgi.py), against the same server's answer to the SDK's client
alone; in turns."""

from __future__ import annotations

import asyncio
import re
import sys
import time
from pathlib import Path

from _measure import by_run, millis, per_run, percentile
from _report import Table, spread
from mcp_setup import STAMP_SERVER, WARMUP, RestCaller, Site, _http

_EPOCH = re.compile(r"\b(1\d{9}\.\d+)\b")


def _stamps(path: Path, wanted: set[str]) -> dict[str, float]:
    """The settlement commits stamped by daphne, by call id (waiting for the last lines)."""
    deadline = time.monotonic() + 10
    while True:
        found = {}
        for line in path.read_text().splitlines():
            call, at = line.split()
            found[call] = float(at)
        if wanted <= found.keys() or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def _begun(call_ids: list[str]) -> dict[str, float]:
    """Each call's response event's ``created_at``: when its settlement's transaction began."""
    from django.db import connections

    from conversations.models import ConversationEvent

    try:
        rows = ConversationEvent.objects.filter(
            tool_call_id__in=call_ids, type="tool_call_response"
        ).values_list("tool_call_id", "created_at")
        return {str(call): at.timestamp() for call, at in rows}
    finally:
        connections.close_all()  # this thread's: the database is dropped at the end


async def bench_settle(site: Site, table: Table, runs: int, samples: int) -> None:
    """Answer → settlement through Toolcore, and answer → the bare SDK client, in turns."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    per = max(1, samples // runs)
    params = StdioServerParameters(command=sys.executable, args=[str(STAMP_SERVER)])
    calls: list[tuple[str, float]] = []  # (call id, answered)
    bare: list[float] = []
    async with (
        _http(site.token) as http,
        stdio_client(params) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        rest = RestCaller(site, http)

        async def toolcore() -> None:
            call_id, result = await rest.call("mcp__stamp__stamp", {})
            found = _EPOCH.search(str(result["modelContent"]))
            assert found, result
            calls.append((call_id, float(found[1])))

        async def alone() -> None:
            answer = await session.call_tool("stamp", {})
            received = time.time()
            bare.append(received - float(answer.content[0].text))

        for _ in range(WARMUP):
            await toolcore()
            await alone()
        calls.clear()
        bare.clear()
        for _ in range(runs):
            for _ in range(per):
                await toolcore()
            for _ in range(per):
                await alone()
    ids = [call for call, _ in calls]
    committed = await asyncio.to_thread(_stamps, site.stamps, set(ids))
    begun = await asyncio.to_thread(_begun, ids)
    settled = [committed[call] - answered for call, answered in calls]
    began = [begun[call] - answered for call, answered in calls]
    _settle_rows(table, runs, per * runs, settled, began, bare)


def _settle_rows(
    table: Table,
    runs: int,
    samples: int,
    settled: list[float],
    began: list[float],
    bare: list[float],
) -> None:
    p50, b50 = by_run(settled, runs, 50), by_run(bare, runs, 50)
    table.add(
        "stdio MCP server's answer (`mcp__stamp__stamp`: its `time.time()` as it answers) → its "
        f"call's settlement committed (the embedded worker, daphne), p50 of {samples} (baseline: "
        "the same server's answer → the SDK's client alone has it; ratio Toolcore ÷ SDK alone)",
        spread(p50, millis),
        spread(b50, millis),
        per_run(p50, b50),
        measured=p50,
        baseline=b50,
        unit="s",
    )
    p95, b95 = by_run(settled, runs, 95), by_run(bare, runs, 95)
    table.add(
        "  the same, p95",
        spread(p95, millis),
        spread(b95, millis),
        per_run(p95, b95),
        measured=p95,
        baseline=b95,
        unit="s",
    )
    began50 = by_run(began, runs, 50)
    table.add(
        "  of which the answer → the settlement's transaction begun (the response event's "
        "`createdAt`), p50",
        spread(began50, millis),
        "",
        None,
        measured=began50,
        unit="s",
    )
    table.note(
        f"Settlement over all {samples} calls: p50 {millis(percentile(settled, 50))}, p95 "
        f"{millis(percentile(settled, 95))}; the SDK's client alone: p50 "
        f"{millis(percentile(bare, 50))}, p95 {millis(percentile(bare, 95))}."
    )
