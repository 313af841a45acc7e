"""The memory bench: daphne's resident set (``VmRSS``) before and after 1,000 sockets connect
and subscribe (one conversation each), per socket, beside the bare consumer; a fresh daphne
each run. Then the CPU daphne uses over 10 s while they idle.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable

from _measure import in_turns, per_run
from _report import Table, spread
from realtime_peers import Daphne, cpu_seconds
from realtime_setup import KIB, Bench, close_all, kib, open_many, stopped

MEMORY_SOCKETS = 1000
IDLE_SECONDS = 10


async def _idle_sockets(daphne: Daphne, path: str, token: str | None, cids: list[str]) -> dict:
    """Daphne's resident set before and after ``len(cids)`` sockets subscribe, one a
    conversation; then its CPU over ``IDLE_SECONDS`` while they idle (consumer only)."""
    url = daphne.url(path, "ws")
    await close_all(await open_many(url, token, cids[:10]))  # warm-up: lazy imports, pools
    await asyncio.sleep(1)
    before = daphne.rss_kib()
    sockets = await open_many(url, token, cids)
    try:
        await asyncio.sleep(2)
        after = daphne.rss_kib()
        idle = None
        if path != "/ws/bare/":
            cpu = cpu_seconds(daphne.pid)
            await asyncio.sleep(IDLE_SECONDS)
            idle = (cpu_seconds(daphne.pid) - cpu) / IDLE_SECONDS
    finally:
        await close_all(sockets)
    return {"per_socket": (after - before) * KIB / len(cids), "idle": idle}


def bench_memory(bench: Bench, table: Table, runs: int) -> None:
    from conversations.services.conversations import conversation_create

    n = MEMORY_SOCKETS
    cids = [str(conversation_create(owner=bench.user, title=f"idle {i}").pk) for i in range(n)]

    def fresh(app: str, path: str, token: str | None) -> Callable[[], dict]:
        def run() -> dict:
            daphne = bench.daphne(app)
            try:
                return asyncio.run(_idle_sockets(daphne, path, token, cids))
            finally:
                stopped(daphne)

        return run

    got, base = in_turns(
        runs,
        fresh("config.asgi:application", "/ws/conversations/", bench.token),
        fresh("bench.realtime_asgi:application", "/ws/bare/", None),
    )
    each = [g["per_socket"] for g in got]
    table.add(
        f"{n:,} idle subscribed sockets (one conversation each): daphne's RSS growth a socket "
        "(baseline: the bare Channels consumer)",
        spread(each, kib),
        spread([b["per_socket"] for b in base], kib),
        per_run(each, [b["per_socket"] for b in base]),
        "≤ 64 KiB",
        statistics.median(each) <= 64 * KIB,
        measured=[e / KIB for e in each],
        baseline=[b["per_socket"] / KIB for b in base],
        unit="KiB",
    )
    table.add(
        f"  daphne's CPU while they idle ({IDLE_SECONDS} s; share of one core)",
        spread([g["idle"] for g in got], lambda v: f"{v:.1%}"),
    )
