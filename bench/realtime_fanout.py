"""The fan-out bench: 200 sockets subscribed to one conversation, daphne serving
``bench/realtime_asgi.py`` (Toolcore's application plus ``/ws/bare/``, a bare Channels consumer
on the layer the product publishes conversation groups to: the baseline). Another process POSTs
assistant messages through daphne's REST one after the other, as fast as daphne answers
(realtime_peers.py ``post``). Latency: from the commit (``committedAt``, stamped by the bench
application) to receipt; throughput: messages received ÷ the time from the first POST to the
last message. Per channel layer: in-memory, and Redis when ``REDIS_URL`` is set.
"""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _measure import in_turns, millis, per_run, percentile
from _report import Table, spread
from realtime_peers import Daphne, cpu_seconds
from realtime_setup import Bench, close_all, micros, open_conversation, open_many, rate, stopped

FANOUT_SOCKETS = 200
FANOUT_EVENTS = 1000
FANOUT_TIMEOUT_SECONDS = 240
_EVENT = '{"type":"conversation.event"'
_REPLAYED = '{"type":"replay"'
_STAMP = '"committedAt":'
_SEQUENCE = '"sequence":'


class Receipts:
    """What the sockets received: durable events counted, commit → receipt latencies of the
    live ones, the time of the last."""

    def __init__(self, sockets: int) -> None:
        self.each = [0] * sockets
        self.disorder = 0
        self.count = 0
        self.target = 0
        self.reached = asyncio.Event()
        self.latencies: list[float] = []
        self.replayed = 0
        self.last = 0.0

    def expect(self, target: int) -> None:
        self.target = target
        if self.count >= target:
            self.reached.set()
        else:
            self.reached.clear()


async def _read(ws: Any, receipts: Receipts, index: int) -> None:
    """Count what socket ``index`` receives; ``receipts.disorder`` counts sequences that do
    not follow the previous one (the exactly-once, in-order promise)."""
    last = None
    try:
        async for raw in ws:
            now = time.time()
            if raw.startswith(_EVENT):
                at = raw.rfind(_STAMP) + len(_STAMP)
                receipts.latencies.append(now - float(raw[at : raw.index("}", at)]))
                at = raw.index(_SEQUENCE) + len(_SEQUENCE)
                first = to = int(raw[at : raw.index(",", at)])
                events = 1
            elif raw.startswith(_REPLAYED):  # a gap filled from the database: no stamp
                frame = json.loads(raw)
                first, to, events = frame["from"] + 1, frame["to"], len(frame["events"])
                receipts.replayed += events
            else:
                continue
            if last is not None and first != last + 1:
                receipts.disorder += 1
            last = to
            receipts.each[index] += events
            receipts.count += events
            receipts.last = now
            if receipts.count >= receipts.target:
                receipts.reached.set()
    except Exception:  # noqa: BLE001 - the socket closed at the end of the run
        pass


async def _all_received(receipts: Receipts, poster: Any) -> None:
    """Until every message arrived; an error if the poster fails or time runs out."""
    arrived = asyncio.ensure_future(receipts.reached.wait())
    exited = asyncio.ensure_future(poster.wait())
    try:
        await asyncio.wait(
            {arrived, exited}, timeout=FANOUT_TIMEOUT_SECONDS, return_when=asyncio.FIRST_COMPLETED
        )
        if exited.done() and poster.returncode != 0:
            raise RuntimeError(f"the REST poster failed (exit status {poster.returncode})")
        await asyncio.wait_for(asyncio.shield(arrived), FANOUT_TIMEOUT_SECONDS)
    except TimeoutError as exc:
        raise RuntimeError(
            f"{receipts.count:,} of {receipts.target:,} messages in {FANOUT_TIMEOUT_SECONDS} s"
        ) from exc
    finally:
        arrived.cancel()


async def _fanout(
    daphne: Daphne, path: str, token: str, cid: str, turn: str, events: int, sockets: int
) -> dict[str, Any]:
    """``sockets`` sockets subscribed to ``cid`` on ``path``; ``events`` assistant messages
    POSTed one after the other, as fast as daphne answers, by another process (this one only
    reads). Commit → receipt latencies; messages received ÷ the time from the first POST to the
    last message; daphne's CPU a message."""
    opened = await open_many(
        daphne.url(path, "ws"), token if path != "/ws/bare/" else None, [cid] * sockets
    )
    receipts = Receipts(sockets)
    receipts.expect(sockets * events)
    readers = [asyncio.create_task(_read(ws, receipts, i)) for i, ws in enumerate(opened)]
    spec = {"port": daphne.port, "token": token, "conversation": cid, "turn": turn}
    spec.update(prefix=uuid.uuid4().hex, count=events)
    try:
        cpu = cpu_seconds(daphne.pid)
        poster = await asyncio.create_subprocess_exec(
            sys.executable,
            str(Path(__file__).with_name("realtime_peers.py")),
            "post",
            json.dumps(spec),
            stdout=asyncio.subprocess.PIPE,
        )
        await _all_received(receipts, poster)
        used = cpu_seconds(daphne.pid) - cpu
        out, _ = await poster.communicate()
        sent = json.loads(out)
        await asyncio.sleep(0.2)  # anything beyond the count (a duplicate) arrives too
        if set(receipts.each) != {events} or receipts.disorder:
            raise RuntimeError(
                f"{path}: each socket should have {events} events in order; got "
                f"{min(receipts.each)}–{max(receipts.each)}, {receipts.disorder} out of order"
            )
    finally:
        for reader in readers:
            reader.cancel()
        await close_all(opened)
    messages = sockets * events
    return {
        "p50": percentile(receipts.latencies, 50),
        "p99": percentile(receipts.latencies, 99),
        "rate": messages / (receipts.last - sent[0]),
        "appends": events / (sent[-1] - sent[0]),
        "replayed": receipts.replayed,
        "daphne_cpu": used / messages,
    }


def bench_fanout(bench: Bench, table: Table, runs: int) -> None:
    """Per layer: the consumer and the bare one in turns, ``FANOUT_EVENTS`` events for each in
    all, split over the runs (each run's figures come from its share: a run of 1,000 events to
    200 sockets takes about a minute here, and three of them per path and layer would take the
    bench past ten minutes)."""
    total = FANOUT_EVENTS // 5 if bench.quick else FANOUT_EVENTS
    events = math.ceil(total / runs)
    for layer, redis in bench.layers():
        got, base = _fanout_layer(bench, runs, events, redis, layer)
        _fanout_rows(table, layer, f"{runs} × {events:,}" if runs > 1 else f"{events:,}", got, base)


def _fanout_layer(
    bench: Bench, runs: int, events: int, redis: bool, layer: str
) -> tuple[list[dict], list[dict]]:
    conversation, turn = open_conversation(bench, f"fan-out {layer}")
    cid = str(conversation.pk)
    daphne = bench.daphne("bench.realtime_asgi:application", redis=redis)
    try:

        def fanout(path: str, n: int = events) -> Callable[[], dict[str, Any]]:
            return lambda: asyncio.run(
                _fanout(daphne, path, bench.token, cid, turn, n, FANOUT_SOCKETS)
            )

        fanout("/ws/conversations/", 20)(), fanout("/ws/bare/", 20)()  # warm-up
        got, base = in_turns(runs, fanout("/ws/conversations/"), fanout("/ws/bare/"))
    finally:
        stopped(daphne)
    return got, base


def _fanout_rows(table: Table, layer: str, events: str, got: list[dict], base: list[dict]) -> None:
    def column(runs: list[dict], key: str) -> list[float]:
        return [r[key] for r in runs]

    def latency(runs: list[dict]) -> str:
        return (
            f"p50 {spread(column(runs, 'p50'), millis)}, p99 {spread(column(runs, 'p99'), millis)}"
        )

    figure = (
        f"fan-out, {layer} layer, {FANOUT_SOCKETS} sockets on one conversation, {events} events "
        "POSTed as fast as daphne answers"
    )
    tails = [r["p99"] / r["p50"] for r in got]
    table.add(
        f"{figure}: commit → receipt (baseline: the bare Channels consumer; ratio: the "
        "consumer's p99 ÷ its p50)",
        latency(got),
        latency(base),
        tails,
        "p99 ≤ 10× p50",
        statistics.median(tails) <= 10,
        measured=column(got, "p99"),
        baseline=column(base, "p99"),
        unit="s (p99)",
    )
    ratios = per_run(column(got, "rate"), column(base, "rate"))
    table.add(
        "  messages/s received by the sockets (baseline: the bare Channels consumer)",
        spread(column(got, "rate"), rate),
        spread(column(base, "rate"), rate),
        ratios,
        "≥ 0.7",
        statistics.median(ratios) >= 0.7,
        measured=column(got, "rate"),
        baseline=column(base, "rate"),
        unit="messages/s",
    )
    table.add(
        "  daphne's CPU a message (ratio: the consumer's ÷ the bare's)",
        spread(column(got, "daphne_cpu"), micros),
        spread(column(base, "daphne_cpu"), micros),
        per_run(column(got, "daphne_cpu"), column(base, "daphne_cpu")),
    )
    table.add(
        "  appends (POSTs answered) a second meanwhile",
        spread(column(got, "appends"), rate),
        spread(column(base, "appends"), rate),
    )
    replayed = sum(r["replayed"] for r in got)
    if replayed:
        table.note(
            f"Fan-out ({layer}): {replayed:,} events reached the consumer's clients as replay "
            "frames (gaps filled from the database); counted in the rate, not in the latencies."
        )
