"""The replay bench: 100,000 stored events to one client that subscribes with ``after: 0``,
through daphne serving ``config.asgi:application`` on the bench database, beside a bare
``websockets`` server sending the same replay frames (those the consumer sent in a warm-up run),
pre-encoded; and a floor, a bare server that reads the rows with the raw driver (1,000 at a
time, as the consumer does), formats the events and frames, and sends them (realtime_peers.py).
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _measure import in_turns, per_run
from _report import Table, spread
from realtime_peers import Child, free_port
from realtime_setup import Bench, rate, stopped, ws_open

REPLAY_EVENTS = 100_000
_TO = re.compile(r'"to":(\d+)')


def _stored_events(bench: Bench, n: int) -> Any:
    """A conversation with ``n`` stored events of ~300 B (bulk-inserted, as bench/core.py)."""
    from django.db import transaction

    from conversations.models import Conversation, ConversationEvent
    from conversations.services.conversations import conversation_create

    conversation = conversation_create(owner=bench.user, title="replay")
    with transaction.atomic():
        ConversationEvent.objects.bulk_create(
            (
                ConversationEvent(
                    conversation=conversation,
                    sequence=i + 1,
                    type="user_message",
                    payload={
                        "messageId": f"m{i}",
                        "content": [{"type": "text", "text": "x" * 220}],
                    },
                )
                for i in range(n)
            ),
            batch_size=2000,
        )
        Conversation.objects.filter(pk=conversation.pk).update(last_sequence=n)
    return conversation


async def _replay(url: str, token: str | None, cid: str, n: int, keep: list | None) -> float:
    """Seconds from the subscription (``after: 0``) to the replay frame reaching ``n``."""
    ws = await ws_open(url, token)
    try:
        if token is not None:
            json.loads(await ws.recv())  # hello
        started = time.perf_counter()
        await ws.send(json.dumps({"type": "subscribe", "conversationId": cid, "after": 0}))
        to = 0
        while to < n:
            frame = await asyncio.wait_for(ws.recv(), 60)
            if not frame.startswith('{"type":"replay"'):
                raise RuntimeError(f"unexpected frame {frame[:200]}")
            to = int(_TO.search(frame, 0, 200).group(1))
            if keep is not None:
                keep.append(frame)
        return time.perf_counter() - started
    finally:
        await ws.close()


def check_frames(frames: list[str], n: int) -> None:
    sequences = []
    for frame in frames:
        parsed = json.loads(frame)
        got = [e["sequence"] for e in parsed["events"]]
        assert got == list(range(parsed["from"] + 1, parsed["to"] + 1)), parsed["from"]
        sequences += got
    assert sequences == list(range(1, n + 1)), (len(sequences), n)


def _floor_spec(bench: Bench, conversation: Any) -> dict[str, Any]:
    """How the floor server reads the rows: the raw driver on the bench database, the same
    columns and time format as the consumer's read."""
    from conversations.models import ConversationEvent

    table = ConversationEvent._meta.db_table
    if bench.vendor == "postgresql":
        from _setup import conninfo

        sql = (
            "SELECT sequence, type, turn_id::text, tool_call_id::text, payload::text, "
            "to_char(date_trunc('milliseconds', created_at AT TIME ZONE 'UTC'), "
            '\'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"\') '
            f"FROM {table} WHERE conversation_id = ? AND sequence > ? ORDER BY sequence LIMIT ?"
        )
        return {
            "vendor": "postgresql",
            "conninfo": conninfo(bench.connection),
            "sql": sql,
            "conversation": str(conversation.pk),
            "conversation_id": str(conversation.pk),
        }
    sql = (
        "SELECT sequence, type, turn_id, tool_call_id, payload, "
        "substr(created_at, 1, 10) || 'T' || substr(created_at, 12, 8) || '.' || "
        "substr(substr(created_at, 21) || '000', 1, 3) || 'Z' "
        f"FROM {table} WHERE conversation_id = ? AND sequence > ? ORDER BY sequence LIMIT ?"
    )
    return {
        "vendor": "sqlite",
        "path": str(Path(bench.connection.settings_dict["NAME"]).resolve()),
        "sql": sql,
        "conversation": conversation.pk.hex,
        "conversation_id": str(conversation.pk),
    }


def bench_replay(bench: Bench, table: Table, runs: int) -> None:
    n = REPLAY_EVENTS // 5 if bench.quick else REPLAY_EVENTS
    conversation = _stored_events(bench, n)
    cid = str(conversation.pk)
    daphne = bench.daphne("config.asgi:application")
    servers: list[Child] = []
    try:
        url = daphne.url("/ws/conversations/", "ws")
        frames: list[str] = []
        asyncio.run(_replay(url, bench.token, cid, n, frames))  # warm-up; its frames kept
        check_frames(frames, n)
        path = bench.folder / "replay-frames.txt"
        path.write_text("".join(f + "\n" for f in frames), encoding="utf-8")
        del frames
        bare_port, floor_port = free_port(), free_port()
        servers.append(Child("frames", str(path), str(bare_port)))
        servers.append(
            Child("floor", json.dumps(_floor_spec(bench, conversation)), str(floor_port))
        )

        def over(port_or_url: Any, token: str | None) -> Callable[[], float]:
            target = (
                port_or_url if isinstance(port_or_url, str) else f"ws://127.0.0.1:{port_or_url}/"
            )
            return lambda: n / asyncio.run(_replay(target, token, cid, n, None))

        consumer, bare, floor = (
            over(url, bench.token),
            over(bare_port, None),
            over(floor_port, None),
        )
        bare(), floor()  # their warm-up
        got, base, low = in_turns(runs, consumer, bare, floor)
    finally:
        for server in servers:
            server.stop()
        stopped(daphne)
    figure = f"replay of {n:,} stored events to one client, events/s"
    ratios = per_run(got, base)
    floor_ratios = per_run(low, base)
    ok = statistics.median(ratios) >= 0.5
    table.add(
        f"{figure}: `/ws/conversations/` on daphne (baseline: a bare `websockets` server sending "
        "the same replay frames, pre-encoded)",
        spread(got, rate),
        spread(base, rate),
        ratios,
        "≥ 0.5",
        ok,
        "FAIL (goal above the floor)" if not ok and statistics.median(floor_ratios) < 0.5 else "",
        measured=got,
        baseline=base,
        unit="events/s",
        floor=statistics.median(floor_ratios),
    )
    table.add(
        f"  floor: a bare server reading the rows with the raw driver ({bench.vendor}, 1,000 at "
        "a time), formatting events and frames, sending them (baseline: the bare server)",
        spread(low, rate),
        spread(base, rate),
        floor_ratios,
        measured=low,
        baseline=base,
        unit="events/s",
    )
    table.add(
        "  the consumer against that floor",
        spread(got, rate),
        spread(low, rate),
        per_run(got, low),
    )
    if statistics.median(floor_ratios) < 0.5:
        table.note(
            f"Replay: the floor reaches {statistics.median(floor_ratios):.2f} of the bare "
            "server: the 0.5 goal is beyond what any server reading the database reaches here."
        )
