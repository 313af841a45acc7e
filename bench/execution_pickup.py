"""The pickup bench: how long an idle ``manage.py runworker_tools`` process takes to start the
process of a call made ready, beside a ``LISTEN``/``NOTIFY`` round trip and a raw floor
(bench/execution_pickup_baselines.py), then the same pickups with a traced worker process, for
the time of each step. Needs PostgreSQL.

Sequential ``bash`` calls, each made ready by its own assistant message (allowed by a rule):
from the ``COMMIT`` that makes the call ready (stamped in this process) to the first
instruction of its process (``date +%s.%N``, the same wall clock).
"""

from __future__ import annotations

import json
import random
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _measure import by_run, millis, per_run, percentile
from _report import Table, spread
from execution_pickup_baselines import PICKUP_COMMAND, NotifyRoundTrip, PickupFloor
from execution_setup import (
    DJANGO,
    OPTIONS,
    ROOT,
    open_conversation,
    post_calls,
    wait_listening,
    wait_response,
)
from execution_workers import Workers

PICKUP_SAMPLES, PICKUP_WARMUP, TRACE_SAMPLES = 200, 10, 100
_EPOCH = re.compile(r"\b(1\d{9}\.\d{9})\b")


class CommitClock:
    """When the bench process's last ``COMMIT`` was sent and when it returned; ``ready`` holds
    those of each commit that made a call ready (heard by an in-process listener, which runs
    right after the commit)."""

    def __init__(self) -> None:
        from django.db import connections

        from conversations.services import runners

        self.wrapper = connections["default"]
        commit = self.wrapper._commit
        self.sent = self.returned = 0.0
        self.ready: list[tuple[float, float]] = []

        def timed_commit():
            self.sent = time.time()
            try:
                return commit()
            finally:
                self.returned = time.time()

        self.wrapper._commit = timed_commit
        runners.listen(runners.READY, self._heard)

    def _heard(self, _tool_name: str) -> None:
        self.ready.append((self.sent, self.returned))

    def close(self) -> None:
        from conversations.services import runners

        runners.unlisten(runners.READY, self._heard)
        del self.wrapper._commit


def _alive(process: subprocess.Popen, log: Any) -> None:
    if process.poll() is not None:
        log.seek(0)
        raise RuntimeError(f"the worker process ended: {log.read()[-3000:]}")


def _idle() -> None:
    time.sleep(random.uniform(0.02, 0.05))


def _pickup(clock: CommitClock, conversation: Any, turn_id: str) -> dict[str, Any]:
    """One ``bash`` call made ready (its own assistant message) to an idle worker: seconds from
    the commit that made it ready to its process's first instruction, and the commit's own."""
    clock.ready.clear()
    (call_id,) = post_calls(conversation, turn_id, [("bash", {"command": PICKUP_COMMAND})])
    ((sent, returned),) = clock.ready
    time.sleep(0.05)  # the pickup runs undisturbed by the polling below
    payload = wait_response(call_id)
    assert payload["outcome"] == "completed", payload
    found = _EPOCH.search(json.dumps(payload))
    assert found, payload
    return {
        "call": str(call_id),
        "sent": sent,
        "latency": float(found[1]) - sent,
        "commit": returned - sent,
        "started": float(found[1]),
    }


def bench_pickup(table: Table, runs: int, folder: Path) -> None:
    """Pickup latency of an idle ``manage.py runworker_tools`` process, sampled in turns with
    the baseline, a ``LISTEN``/``NOTIFY`` round trip between two processes; then the same with
    a traced worker process, for where the time goes."""
    figure = "pickup latency, idle worker process"
    connection = DJANGO.postgresql()
    if connection is None:
        table.skip(figure, DJANGO.skip_reason())
        return
    from _setup import process_env

    from tools.models import PermissionRule

    samples = PICKUP_SAMPLES // 4 if OPTIONS.quick else PICKUP_SAMPLES
    conversation, turn_id = open_conversation("pickup")
    PermissionRule.objects.create(
        conversation=conversation, tool_name="bash", pattern=PICKUP_COMMAND, decision="allow"
    )
    env = process_env(connection)
    worker, log = _worker(env, folder, "pickup")
    roundtrip = NotifyRoundTrip(connection)
    floor = PickupFloor(connection)
    clock = CommitClock()
    try:
        try:
            wait_listening(connection, 1, lambda: _alive(worker, log))
            for _ in range(PICKUP_WARMUP):
                _pickup(clock, conversation, turn_id)
                roundtrip.sample()
                floor.sample()
            pickups, notifies, floors = [], [], []
            for _ in range(samples):
                _idle()
                notifies.append(roundtrip.sample())
                _idle()
                floors.append(floor.sample())
                _idle()
                pickups.append(_pickup(clock, conversation, turn_id))
        finally:
            errors = _stop(worker, log)
        assert "Traceback" not in errors, errors[-3000:]
        _pickup_rows(table, figure, samples, runs, pickups, notifies, floors)
        _pickup_breakdown(table, connection, env, clock, conversation, turn_id, folder)
    finally:
        clock.close()
        floor.close()
        roundtrip.close()


def _pickup_rows(
    table: Table,
    figure: str,
    samples: int,
    runs: int,
    pickups: list[dict],
    notifies: list[float],
    floors: list[float],
) -> None:
    """p50 and p99 of all the samples; the spread in brackets is the p50 (p99) of each of
    ``runs`` consecutive slices of them."""
    latency = [p["latency"] for p in pickups]
    p50, n50, f50 = (by_run(x, runs, 50) for x in (latency, notifies, floors))
    ratios, floor_ratios = per_run(p50, n50), per_run(f50, n50)
    ok = percentile(latency, 50) / percentile(notifies, 50) <= 10
    above = not ok and statistics.median(floor_ratios) > 10
    table.add(
        f"{figure} `manage.py runworker_tools`: commit that makes a `bash` call ready → its "
        f"process's first instruction, p50 of {samples} (baseline: a `LISTEN`/`NOTIFY` round "
        "trip between two processes, p50)",
        spread(p50, millis),
        spread(n50, millis),
        ratios,
        "p50 ≤ 10×",
        ok,
        "FAIL (goal below the floor)" if above else "",
        measured=p50,
        baseline=n50,
        unit="s",
        floor=statistics.median(floor_ratios),
    )
    p99, n99 = by_run(latency, runs, 99), by_run(notifies, runs, 99)
    table.add(
        "  the same, p99",
        spread(p99, millis),
        spread(n99, millis),
        per_run(p99, n99),
        measured=p99,
        baseline=n99,
        unit="s",
    )
    table.add(
        "  floor, in turns with them: a raw process (psycopg, no Django) that hears the "
        "notification, claims the row in one statement and a commit, and `Popen`s the same "
        "command; commit → first instruction, p50 (baseline: the round trip)",
        spread(f50, millis),
        spread(n50, millis),
        floor_ratios,
        measured=f50,
        baseline=n50,
        unit="s",
    )
    table.add(
        "  the pickup against that floor, p50",
        spread(p50, millis),
        spread(f50, millis),
        per_run(p50, f50),
        measured=p50,
        baseline=f50,
        unit="s",
    )
    commits = by_run([p["commit"] for p in pickups], runs, 50)
    table.add(
        "  of which the commit itself (`COMMIT` sent → returned), p50",
        spread(commits, millis),
        "",
        None,
        measured=commits,
        unit="s",
    )


def _pickup_breakdown(
    table: Table,
    connection: Any,
    env: dict,
    clock: CommitClock,
    conversation: Any,
    turn_id: str,
    folder: Path,
) -> None:
    """Where a pickup's time goes: the same pickups with a traced worker process."""
    samples = TRACE_SAMPLES // 4 if OPTIONS.quick else TRACE_SAMPLES
    trace = folder / "pickup-trace.jsonl"
    workers = Workers(env, 1, folder, trace=trace)
    try:
        wait_listening(connection, 0, workers.check)  # the first worker process gone
        workers.go()
        wait_listening(connection, 1, workers.check)
        for _ in range(PICKUP_WARMUP):
            _pickup(clock, conversation, turn_id)
        pickups = []
        for _ in range(samples):
            _idle()
            pickups.append(_pickup(clock, conversation, turn_id))
    finally:
        errors = workers.stop()
        assert "Traceback" not in errors, errors
    mine = {p["call"]: p for p in pickups}
    traced = []
    for line in trace.read_text().splitlines():
        stamp = json.loads(line)
        call = Path(stamp["folder"]).parent.name  # …/tool-calls/<call>/g<generation>
        if call in mine and all(k in stamp for k in ("notified", "awake", "claimed")):
            p = mine[call]
            traced.append({**stamp, **p, "returned": p["sent"] + p["commit"]})
    table.add(
        f"  traced worker process, {len(traced)} pickups: p50 of each step's time since the "
        "previous one (total: commit sent → first instruction)",
        millis(percentile([t["latency"] for t in traced], 50)),
        "",
        None,
    )
    steps = [
        ("returned", "commit returned"),
        ("notified", "the worker heard the notification"),
        ("awake", "its loop awake (`_pick_up`)"),
        ("claim_begun", "claim begun on a database thread"),
        ("claimed", "claim committed (`claim_acquire_batch`)"),
        ("start_begun", "the handler's `ProcessCapture.start` begun"),
        ("popen_begun", "`Popen` begun (the capture's files made)"),
        ("popen_returned", "`Popen` returned"),
        ("start_returned", "`ProcessCapture.start` returned"),
        ("started", "the process's first instruction"),
    ]
    previous = "sent"
    for key, name in steps:
        spent = percentile([t[key] - t[previous] for t in traced], 50)
        table.add(f"    → {name}", millis(spent), "", None)
        previous = key


SANDBOX_SAMPLES = 100


def _worker(env: dict, folder: Path, name: str) -> tuple[subprocess.Popen, Any]:
    """An idle ``manage.py runworker_tools`` process, its stderr in a log of the folder."""
    log = open(folder / f"runworker_tools-{name}.log", "w+")  # noqa: SIM115
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "runworker_tools"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    return worker, log


def _stop(worker: subprocess.Popen, log: Any) -> str:
    """SIGTERM (SIGKILL after 30 s); what the worker wrote on stderr."""
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(30)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()
    log.seek(0)
    errors = log.read()
    log.close()
    return errors


def _sandbox_start(sandboxed: bool, folder: Path) -> float:
    """The floor of the sandbox's cost: ``Popen`` of the pickup's command → its first
    instruction, in the product's sandbox or as a plain ``/bin/sh -c``."""
    from tools.sandbox import sandbox_for
    from tools.sandbox_limits import CommandLimits

    argv = ["/bin/sh", "-c", PICKUP_COMMAND]
    limits = None
    sent = time.time()
    if sandboxed:  # the product's own, by the bench's settings: its limits' cgroups made too
        box = sandbox_for(folder)
        limits = CommandLimits(box.limits)
        argv = limits.make() + box.argv(argv)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=folder)
    finally:
        if limits is not None:
            limits.remove()
    return float(_EPOCH.search(done.stdout)[1]) - sent


def bench_pickup_sandboxed(table: Table, runs: int, folder: Path) -> None:
    """Pickup latency with every command in the sandbox (``TOOLCORE_SANDBOX=bwrap``) against
    ``off``: a worker process of each, in turns (one listens at a time), each run a slice of
    the samples; beside the floor, the start of the command itself in the sandbox and outside."""
    figure = "pickup latency in the command sandbox"
    connection = DJANGO.postgresql()
    if connection is None:
        table.skip(figure, DJANGO.skip_reason())
        return
    from _setup import process_env

    from tools.models import PermissionRule
    from tools.sandbox import bwrap_problem

    if bwrap_problem() is not None:
        table.skip(figure, bwrap_problem())
        return
    samples = max(runs, (SANDBOX_SAMPLES // 4 if OPTIONS.quick else SANDBOX_SAMPLES) // runs)
    conversation, turn_id = open_conversation("pickup-sandbox")
    PermissionRule.objects.create(
        conversation=conversation, tool_name="bash", pattern=PICKUP_COMMAND, decision="allow"
    )
    clock = CommitClock()
    latency: dict[str, list[float]] = {"bwrap": [], "off": []}
    try:
        for _ in range(runs):
            for mode in ("off", "bwrap"):
                worker, log = _worker(process_env(connection, TOOLCORE_SANDBOX=mode), folder, mode)
                try:
                    wait_listening(connection, 1, lambda w=worker, f=log: _alive(w, f))
                    for _ in range(PICKUP_WARMUP):
                        _pickup(clock, conversation, turn_id)
                    for _ in range(samples):
                        _idle()
                        latency[mode].append(_pickup(clock, conversation, turn_id)["latency"])
                finally:
                    errors = _stop(worker, log)
                    wait_listening(connection, 0, lambda: None)
                assert "Traceback" not in errors, errors[-3000:]
    finally:
        clock.close()
    inside, outside = by_run(latency["bwrap"], runs, 50), by_run(latency["off"], runs, 50)
    ratios = per_run(inside, outside)
    starts = [[_sandbox_start(True, folder), _sandbox_start(False, folder)] for _ in range(100)]
    start_in = by_run([s[0] for s in starts], runs, 50)
    start_out = by_run([s[1] for s in starts], runs, 50)
    floor = statistics.median(
        [(i - o + b) / b for i, o, b in zip(start_in, start_out, outside, strict=True)]
    )
    ok = statistics.median(ratios) <= 1.5
    table.add(
        f"{figure}: commit that makes a `bash` call ready → its process's first instruction, "
        f"`TOOLCORE_SANDBOX=bwrap`, p50 of {samples * runs} (baseline: the same with `off`)",
        spread(inside, millis),
        spread(outside, millis),
        ratios,
        "p50 ≤ 1.5×",
        ok,
        "FAIL (goal below the floor)" if not ok and floor > 1.5 else "",
        measured=inside,
        baseline=outside,
        unit="s",
        floor=floor,
    )
    table.add(
        "  the floor: the command's own start (`Popen` → first instruction) in the sandbox "
        "(baseline: `/bin/sh -c` outside it); the pickup's ratio cannot go below "
        f"(baseline pickup + this difference) / baseline pickup = {floor:.2f}",
        spread(start_in, millis),
        spread(start_out, millis),
        per_run(start_in, start_out),
        measured=start_in,
        baseline=start_out,
        unit="s",
    )
