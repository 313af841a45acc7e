"""bench/mcp.py's first bench: a ``tools/call`` of ``read`` through ``/mcp/`` with the SDK's
client, against the same call through REST, and against a bare SDK server on the same daphne;
in turns."""

from __future__ import annotations

import statistics
from typing import Any

from _measure import millis, per_run
from _report import Table, spread
from mcp_setup import NOTES, WARMUP, RestCaller, Site, _http, _timed

RATIO_GOAL = 1.5


def _mcp_read(session: Any) -> Any:
    async def read() -> None:
        result = await session.call_tool("read", {"path": NOTES})
        if result.is_error:
            raise RuntimeError(f"the MCP call failed: {result}")

    return read


async def bench_call(site: Site, table: Table, runs: int, calls: int) -> None:
    """A ``read`` through MCP, through REST and through a bare SDK server, in turns."""
    from contextlib import AsyncExitStack

    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with AsyncExitStack() as stack:
        sessions = []
        for path, headers in (
            ("/mcp/", {"X-Toolcore-Conversation": str(site.mcp_conversation.pk)}),
            ("/bare/mcp/", {}),
        ):
            http = await stack.enter_async_context(_http(site.token, **headers))
            read, write = await stack.enter_async_context(
                streamable_http_client(site.url(path), http_client=http)
            )
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            sessions.append(session)
        rest = RestCaller(site, await stack.enter_async_context(_http(site.token)))
        kinds = (_mcp_read(sessions[0]), rest.read, _mcp_read(sessions[1]))
        for fn in kinds:
            await _timed(fn, WARMUP)
        medians: list[list[float]] = [[] for _ in kinds]
        for _ in range(runs):
            for fn, got in zip(kinds, medians, strict=True):
                got.append(statistics.median(await _timed(fn, calls)))
    mcp, rest_, bare = medians
    ratios = per_run(mcp, rest_)
    ok = statistics.median(ratios) <= RATIO_GOAL
    table.add(
        f"`tools/call` of `read` (a small file, allowed by a rule) through `/mcp/`, SDK client, "
        f"one session, median of {calls} calls a run (baseline: REST, `POST …/messages` + the "
        "turn barrier `…/results?wait=30`; ratio MCP ÷ REST)",
        spread(mcp, millis),
        spread(rest_, millis),
        ratios,
        f"≤ {RATIO_GOAL}",
        ok,
        measured=mcp,
        baseline=rest_,
        unit="s",
    )
    table.add(
        "  bare SDK server on the same daphne (`/bare/mcp/`: stateless, SSE, a `read` answering "
        "a fixed text; no authentication, database or tool call), same client (baseline: REST)",
        spread(bare, millis),
        spread(rest_, millis),
        per_run(bare, rest_),
        measured=bare,
        baseline=rest_,
        unit="s",
    )
    table.add(
        "  `/mcp/` less the bare SDK server (what Toolcore adds to the SDK's own round trip; "
        "baseline: REST)",
        spread([m - b for m, b in zip(mcp, bare, strict=True)], millis),
        spread(rest_, millis),
        [(m - b) / r for m, b, r in zip(mcp, bare, rest_, strict=True)],
        measured=[m - b for m, b in zip(mcp, bare, strict=True)],
        baseline=rest_,
        unit="s",
    )
