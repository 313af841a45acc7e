"""bench/mcp.py's third bench: what ``tools/call`` requests cost daphne while they wait.

``--streams`` calls of ``bash`` (no rule allows it, so each awaits approval) are posted through
``/mcp/`` on one SDK session, each on its own open SSE stream, and left waiting. daphne's CPU
(user + system of the whole process, its embedded worker included, from ``/proc``) is measured
over a window of ``WINDOW`` seconds, in turns with the same window of the same daphne with
nothing waiting (the baseline: what an idle daphne costs). Twice: clients that asked for no
progress, and clients that did (a ``progressToken``: a ``notifications/progress`` every
``TOOLCORE_MCP_PROGRESS_SECONDS``, 5 s). The figure is the share of one core above idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import time
from typing import Any

from _report import Table, spread
from asgiref.sync import sync_to_async
from mcp_setup import Site, _http

WINDOW = 12.0  # seconds: more than two progress periods and six re-check sweeps
BATCH = 50  # calls posted at once
HANG_SECONDS = 300  # one measurement, its posts and its clean-up, at most
SETTLE = 6.0  # seconds after the last call awaits approval: its waiter joined and was swept
GOAL = 0.05  # of one core, above idle, for every stream waiting without progress
TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


async def _share(pid: int, window: float) -> float:
    """daphne's CPU over ``window`` seconds, as a share of one core."""
    cpu, wall = _cpu_seconds(pid), time.monotonic()
    await asyncio.sleep(window)
    return (_cpu_seconds(pid) - cpu) / (time.monotonic() - wall)


def _unfinished(conversation_id: Any, state: str | None = None) -> int:
    """The conversation's unfinished calls (in ``state``)."""
    from django.db import connections

    from conversations.models import ToolCall

    calls = ToolCall.objects.filter(conversation_id=conversation_id)
    try:
        return (calls if state is None else calls.filter(state=state)).count()
    finally:
        connections.close_all()


def _cancel_all(conversation_id: Any) -> None:
    from django.db import connections

    from conversations.models import ToolCall
    from conversations.services.cancel import call_cancel

    try:
        for call_id in ToolCall.objects.filter(conversation_id=conversation_id).values_list(
            "pk", flat=True
        ):
            call_cancel(call_id=call_id)
    finally:
        connections.close_all()


async def _until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 120
    while not await sync_to_async(condition)():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within 120 s")
        await asyncio.sleep(0.2)


async def _waiting_streams(site: Site, streams: int, progress: bool, measure: Any) -> float:
    """``measure()``'s answer while ``streams`` calls wait on their streams."""

    async def noted(*_: Any) -> None:
        return None

    headers = {"X-Toolcore-Conversation": str(site.mcp_conversation.pk)}
    measured: list[float] = []
    try:
        # A hang (seen once in a dozen runs on PostgreSQL + Redis, not reproduced) fails the
        # bench instead of holding it.
        async with asyncio.timeout(HANG_SECONDS):
            await _streams_measured(
                site, headers, streams, noted if progress else None, measure, measured
            )
    except Exception:  # noqa: BLE001 - closing 400 streams at once may break a read: measured
        if not measured:
            raise
    return measured[0]


async def _streams_measured(
    site: Site, headers: dict[str, str], streams: int, progress: Any, measure: Any, out: list
) -> None:
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with contextlib.AsyncExitStack() as stack:
        http = await stack.enter_async_context(_http(site.token, unlimited=True, **headers))
        read, write = await stack.enter_async_context(
            streamable_http_client(site.url("/mcp/"), http_client=http)
        )
        session = await stack.enter_async_context(ClientSession(read, write))
        await session.initialize()
        cid = site.mcp_conversation.pk
        calls: list[asyncio.Task] = []
        try:
            # In batches: 400 connections at once overflow daphne's listen backlog (Twisted's default, 50), and a
            # reset connection ends the client's whole session.
            for start in range(0, streams, BATCH):
                calls += [
                    asyncio.create_task(
                        session.call_tool(
                            "bash", {"command": f"echo waiting {n}"}, progress_callback=progress
                        )
                    )
                    for n in range(start, min(streams, start + BATCH))
                ]
                posted = len(calls)
                await _until(
                    lambda: _unfinished(cid, "awaiting_approval") >= posted,  # noqa: B023
                    "the calls awaiting approval",
                )
            if any(c.done() for c in calls):
                raise RuntimeError(f"a call ended: {next(c for c in calls if c.done())}")
            await asyncio.sleep(SETTLE)  # past the posts' own work and the first sweeps
            out.append(await measure())
        finally:
            await sync_to_async(_cancel_all)(cid)  # each stream answers its cancelled call
            await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 120)


async def bench_waiting(
    site: Site, table: Table, runs: int, streams: int, window: float = WINDOW
) -> None:
    """daphne's CPU with ``streams`` waiting calls against an idle daphne, in turns."""
    import logging

    # The client logs every stream that was still delivering when its session closed.
    logging.getLogger("mcp.client.streamable_http").setLevel(logging.CRITICAL)
    pid = site.daphne.pid
    for progress in (False, True):
        idle: list[float] = []
        waiting: list[float] = []
        for _ in range(runs):
            idle.append(await _share(pid, window))
            measure = lambda: _share(pid, window)  # noqa: E731
            waiting.append(await _waiting_streams(site, streams, progress, measure))
        above = [max(0.0, w - i) for w, i in zip(waiting, idle, strict=True)]
        percent = lambda v: f"{100 * v:.1f} %"  # noqa: E731
        kind = "with a `progressToken`" if progress else "without progress"
        figure = (
            f"{streams} `tools/call`s waiting for approval on their SSE streams, {kind}: "
            f"daphne's CPU, share of one core over {window:.0f} s (baseline: the same daphne "
            "idle; ratio: the share above idle)"
        )
        ok = None if progress else statistics.median(above) <= GOAL
        table.add(
            figure,
            spread(waiting, percent),
            spread(idle, percent),
            above,
            "" if progress else f"≤ {100 * GOAL:.0f} % above idle",
            ok,
            measured=waiting,
            baseline=idle,
            unit="core",
        )
