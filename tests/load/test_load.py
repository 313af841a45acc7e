"""Load: many websocket clients dropping and resuming while appends and ``bash`` calls pour in.

Black-box, on a site of its own (``tests/realtime/daphne_helpers.py``): real daphne processes,
``manage.py runworker_tools`` processes, a writer process (``tests/load/writer.py``) POSTing
through the REST API, and websocket clients in this process. It asserts what the product
promises under load, and reports (prints) what it measured:

- every client holds every sequence of its conversation exactly once, in order, however often
  it dropped (a clean close or a dropped connection, at random) and resumed on a daphne chosen
  at random;
- every ``bash`` call settled exactly once (one ``tool_call_response`` in the log) and
  ``completed``;
- no request answered an error, no server closed a socket, no process logged an error;
- each process's resident memory at the end of the run is within a generous bound of what it
  was after the warm-up (flat, not growing with the events served);
- reported, not asserted tightly: the delivery latency (the event's ``createdAt`` to its receipt
  by a client, live events only; p50, p99) and the rates the site reached.

Topology: with PostgreSQL and Redis (``DATABASE_URL``, ``REDIS_URL``), ``TOOLCORE_LOAD_DAPHNES``
daphnes (2) and ``TOOLCORE_LOAD_WORKERS`` tool worker processes (2) share them; the clients and
the writer spread over the daphnes. Otherwise one daphne on the in-memory channel layer with its
embedded tool worker: the in-memory layer does not cross processes, so that is the deployment
the embedded default supports (several daphnes there could not see each other's events live).

Size (environment variables; the defaults are the reduced size ``.ci/run`` runs, ~1 minute):
``TOOLCORE_LOAD_CLIENTS`` (50), ``TOOLCORE_LOAD_CONVERSATIONS`` (10), ``TOOLCORE_LOAD_SECONDS``
(10), ``TOOLCORE_LOAD_APPENDS`` per second per conversation (20), ``TOOLCORE_LOAD_CALLS``
(``bash`` calls per second in all, 5), ``TOOLCORE_LOAD_SESSION_SECONDS`` (a client's mean time
between drops, 3), ``TOOLCORE_LOAD_WARMUP_SECONDS`` (when the first memory sample is taken:
10, or half the run if shorter), ``TOOLCORE_LOAD_REDIS_URL`` (the site's Redis; default: the
suite's own ``REDIS_URL``, whose keys the suite only deletes between tests), and
``TOOLCORE_LOAD_RSS_EVERY`` (seconds between the samples of each process's RSS in the report,
10), ``TOOLCORE_LOAD_REPORT`` (a file to write the figures to, as JSON). The full size of
docs/performance.md: 500 clients, 50 conversations, 60 s.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime
import json
import os
import random
import resource
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from tests.realtime.daphne_helpers import (
    ROOT,
    Cursor,
    Daphne,
    Rest,
    Site,
    redis_url,
    rss_bytes,
    site,
    subscribe,
    uses_postgresql,
    ws_connect,
)

pytestmark = pytest.mark.load

MiB = 1024 * 1024


def _env(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


CLIENTS = int(_env("TOOLCORE_LOAD_CLIENTS", 50))
CONVERSATIONS = int(_env("TOOLCORE_LOAD_CONVERSATIONS", 10))
SECONDS = _env("TOOLCORE_LOAD_SECONDS", 10)
APPENDS_PER_SECOND = _env("TOOLCORE_LOAD_APPENDS", 20)  # per conversation
CALLS_PER_SECOND = _env("TOOLCORE_LOAD_CALLS", 5)  # in all
DAPHNES = int(_env("TOOLCORE_LOAD_DAPHNES", 2))  # with PostgreSQL + Redis
WORKERS = int(_env("TOOLCORE_LOAD_WORKERS", 2))  # with PostgreSQL + Redis
SESSION_SECONDS = _env("TOOLCORE_LOAD_SESSION_SECONDS", 3)
WARMUP_SECONDS = _env("TOOLCORE_LOAD_WARMUP_SECONDS", min(10, SECONDS / 2))
RSS_EVERY_SECONDS = _env("TOOLCORE_LOAD_RSS_EVERY", 10)  # the RSS series of the report
CATCH_UP_SECONDS = 120 + SECONDS  # after the writing: every call settled, every client caught up
# RSS after the run against after the warm-up: flat means it did not grow with what was served.
# Generous: allocator arenas, the Redis pools and Python's caches still settle after a warm-up.
RSS_GROWTH_MAX = 64 * MiB
RSS_GROWTH_SHARE_MAX = 0.5
COMMAND = "echo load-*"  # the writer's bash calls, allowed by a global rule


def _raise_fd_limit() -> None:
    """Each client is a socket here and in a daphne: the soft limit up to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _created(event: dict[str, Any]) -> float:
    return datetime.datetime.fromisoformat(event["createdAt"].replace("Z", "+00:00")).timestamp()


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(p / 100 * len(ordered)) - 1))]


class Client:
    """One websocket client of one conversation: sessions of random length on daphnes chosen at
    random, each ended by a clean close or a dropped connection, resumed from its last
    sequence; every frame checked by a ``Cursor``."""

    def __init__(self, index: int, cid: str, run: Run) -> None:
        self.index = index
        self.cursor = Cursor(cid, ephemeral=True)
        self.run = run
        self.chance = random.Random(run.seed + index)
        self.sessions = 0
        self.refused = 0  # handshakes that failed (counted; retried)
        self.refused_by: collections.Counter[str] = collections.Counter()  # by exception
        self.failure: str | None = None
        self.closed_by_server: collections.Counter[int] = collections.Counter()  # by code
        self.responses: collections.Counter[str] = collections.Counter()  # call id → responses

    @property
    def cid(self) -> str:
        return self.cursor.cid

    def done(self) -> bool:
        target = self.run.final.get(self.cid)
        return target is not None and self.cursor.last >= target

    async def go(self) -> None:
        try:
            while not self.done():
                await self.session()
        except AssertionError as error:
            self.failure = f"client {self.index} ({self.cid}): {error}"

    async def session(self) -> None:
        server = self.chance.choice(self.run.daphnes)
        try:
            ws = await ws_connect(server, self.run.site.token)
        except (OSError, InvalidHandshake, TimeoutError, ConnectionClosed) as error:
            self.refused += 1
            self.refused_by[type(error).__name__] += 1
            await asyncio.sleep(0.2)
            return
        self.sessions += 1
        # Long once the writing is over: the client only has to catch up.
        catching_up = self.cid in self.run.final
        life = CATCH_UP_SECONDS if catching_up else self.chance.uniform(0, 2 * SESSION_SECONDS)
        try:
            await subscribe(ws, self.cid, self.cursor.last)
            async with asyncio.timeout(life):
                async for message in ws:
                    self.take(json.loads(message))
                    if self.done():
                        break
        except TimeoutError:
            pass
        except ConnectionClosed as closed:
            if closed.rcvd is not None:  # the server closed it (a keepalive timeout is ours)
                self.closed_by_server[closed.rcvd.code] += 1
        if self.chance.random() < 0.5:
            await ws.close()
        else:  # no closing handshake: the connection just drops
            ws.transport.abort()
            with contextlib.suppress(Exception):
                await ws.wait_closed()

    def take(self, frame: dict[str, Any]) -> None:
        received = time.time()
        live = frame.get("type") == "conversation.event"
        for event in self.cursor.take(frame):
            if live:
                self.run.latencies.append(received - _created(event))
            if event["type"] == "tool_call_response":
                self.responses[event["toolCallId"]] += 1


class Run:
    def __init__(self, made: Site, daphnes: list[Daphne], processes: dict[str, Any]) -> None:
        self.site = made
        self.daphnes = daphnes
        self.processes = processes  # name → a Daphne or ToolWorker, for their RSS
        self.seed = random.randrange(2**32)
        self.final: dict[str, int] = {}  # conversation → its last sequence, once written
        self.latencies: list[float] = []
        self.rss_series: dict[str, list[tuple[float, float]]] = {n: [] for n in processes}

    async def sample_rss(self, started: float) -> None:
        """Each process's RSS (MiB) every ``RSS_EVERY_SECONDS`` from the start, until cancelled:
        the report's series, to tell a warm-up from growth that goes on."""
        while True:
            at = round(time.monotonic() - started)
            for name, size in self.rss().items():
                self.rss_series[name].append((at, round(size / MiB, 1)))
            await asyncio.sleep(RSS_EVERY_SECONDS)

    def rss(self) -> dict[str, int]:
        return {name: rss_bytes(p.pid) for name, p in self.processes.items()}

    def cpu(self) -> dict[str, float]:
        """CPU seconds (user + system) each process used so far."""
        return {name: _cpu_seconds(p.pid) for name, p in self.processes.items()}


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _write(made: Site, daphnes: list[Daphne], conversations: list[list[str]]) -> dict:
    writer = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.load.writer",
        f"--ports={','.join(str(d.port) for d in daphnes)}",
        f"--token={made.token}",
        f"--seconds={SECONDS}",
        f"--appends-per-second={APPENDS_PER_SECOND}",
        f"--calls-per-second={CALLS_PER_SECOND}",
        cwd=ROOT,
        env=made.env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(SECONDS + 120):
        out, err = await writer.communicate(json.dumps(conversations).encode())
    assert writer.returncode == 0, err.decode(errors="replace")[-5000:]
    return json.loads(out)


def _settled(server: Daphne, token: str, conversations: list[list[str]]) -> dict[str, int]:
    """Waits until no call of any conversation is unfinished; their last sequences."""
    rest = Rest(server.port, token)  # a fresh connection: an idle keep-alive one may be closed
    deadline = time.monotonic() + CATCH_UP_SECONDS
    for cid, turn_id in conversations:
        while True:
            path = f"/conversations/{cid}/turns/{turn_id}/results?wait=5"
            if rest.call("GET", path)["settled"]:
                break
            assert time.monotonic() < deadline, f"calls of {cid} still unfinished"
    heads = {
        cid: rest.call("GET", f"/conversations/{cid}")["lastSequence"] for cid, _ in conversations
    }
    rest.close()
    return heads


def _topology() -> tuple[int, int, dict[str, str]]:
    """Daphnes, tool worker processes, and the site's settings (module docstring)."""
    if uses_postgresql() and redis_url():
        url = os.environ.get("TOOLCORE_LOAD_REDIS_URL") or redis_url()
        return DAPHNES, WORKERS, {"REDIS_URL": url, "TOOLCORE_WORKERS": "0"}
    return 1, 0, {"REDIS_URL": "", "TOOLCORE_WORKERS": "1"}


@pytest.fixture
def load_site(tmp_path):
    """The site under load: its daphnes and tool workers started and answering. Its set-up
    takes many seconds (up to four processes started) for the suite's one load test."""
    _raise_fd_limit()
    daphnes, workers, env = _topology()
    with site(tmp_path, **env) as made:
        made.manage(
            "shell",
            "-c",
            "from tools.models import PermissionRule\n"
            f"PermissionRule.objects.create(tool_name='bash', pattern={COMMAND!r}, "
            "decision='allow', reason='the load suite')",
        )
        servers = [made.daphne() for _ in range(daphnes)]
        tool_workers = [made.tool_worker() for _ in range(workers)]
        yield made, servers, tool_workers
    errors = [line for process in made.daphnes for line in process.errors()]
    assert not errors, "a process logged errors:\n" + "\n".join(errors[:50])


async def test_clients_dropping_and_resuming_under_load_lose_and_duplicate_nothing(load_site):
    made, servers, tool_workers = load_site
    processes: dict[str, Any] = {f"daphne {i + 1}": d for i, d in enumerate(servers)}
    processes |= {f"runworker_tools {i + 1}": w for i, w in enumerate(tool_workers)}
    run = Run(made, servers, processes)
    rest = Rest(servers[0].port, made.token)
    conversations = []
    for i in range(CONVERSATIONS):
        cid = rest.conversation_create(f"load {i}")
        conversations.append([cid, rest.turn_open(cid)])
    rest.close()
    clients = [Client(i, conversations[i % CONVERSATIONS][0], run) for i in range(CLIENTS)]

    started = time.monotonic()
    tasks = [asyncio.create_task(client.go()) for client in clients]
    writing = asyncio.create_task(_write(made, servers, conversations))
    cpu_start = run.cpu()
    own_start = sum(os.times()[:2])
    sampling = asyncio.create_task(run.sample_rss(started))
    await asyncio.sleep(WARMUP_SECONDS)
    rss_warm = run.rss()
    written = await writing
    rss_end = run.rss()
    sampling.cancel()
    wrote_for = time.monotonic() - started
    cpu = {name: (used - cpu_start[name]) / wrote_for for name, used in run.cpu().items()}
    cpu["the clients (the test process)"] = (sum(os.times()[:2]) - own_start) / wrote_for

    run.final.update(await asyncio.to_thread(_settled, servers[0], made.token, conversations))
    try:
        async with asyncio.timeout(CATCH_UP_SECONDS):
            await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()

    report = _report(run, clients, written, (rss_warm, rss_end), cpu, wrote_for, len(servers))
    print(json.dumps(report, indent=1))
    if os.environ.get("TOOLCORE_LOAD_REPORT"):
        Path(os.environ["TOOLCORE_LOAD_REPORT"]).write_text(json.dumps(report, indent=1) + "\n")

    assert written["errors"] == [], written["errors"][:20]
    closed = sum((c.closed_by_server for c in clients), collections.Counter())
    assert not closed, f"the server closed sockets (codes: {dict(closed)})"
    failures = [c.failure for c in clients if c.failure]
    assert not failures, f"seed {run.seed}:\n" + "\n".join(failures[:20])
    for client in clients:  # every sequence exactly once, in order
        assert client.cursor.sequences == list(range(1, run.final[client.cid] + 1)), (
            f"seed {run.seed}: client {client.index}"
        )
    calls = [(cid, call) for cid, ids in written["calls"].items() for call in ids]
    assert written["appended"] > 0, written
    assert calls or CALLS_PER_SECOND == 0, written
    for cid, call in calls:  # every call settled exactly once, seen by every client of it
        for client in clients:
            if client.cid == cid:
                assert client.responses[call] == 1, (call, client.index, client.responses[call])
    outcomes = collections.Counter(
        rest_outcome["outcome"]
        for rest_outcome in await asyncio.to_thread(_outcomes, made, servers[0], calls)
    )
    assert outcomes == {"completed": len(calls)}, outcomes
    for name, before in rss_warm.items():  # flat after the warm-up
        bound = before + max(RSS_GROWTH_MAX, RSS_GROWTH_SHARE_MAX * before)
        assert rss_end[name] <= bound, (name, before, rss_end[name])


def _outcomes(made: Site, server: Daphne, calls: list[tuple[str, str]]) -> list[dict]:
    rest = Rest(server.port, made.token)
    try:
        return [rest.call("GET", f"/tool-calls/{call}") for _, call in calls]
    finally:
        rest.close()


def _report(
    run: Run,
    clients: list[Client],
    written: dict,
    rss: tuple[dict[str, int], dict[str, int]],
    cpu: dict[str, float],
    wrote_for: float,
    daphnes: int,
) -> dict[str, Any]:
    rss_warm, rss_end = rss
    latencies = run.latencies or [0.0]
    calls = sum(len(ids) for ids in written["calls"].values())
    return {
        "size": {
            "clients": CLIENTS,
            "conversations": CONVERSATIONS,
            "seconds": SECONDS,
            "daphnes": daphnes,
            "tool_workers": sum(1 for name in run.processes if name.startswith("runworker")),
            "channel_layer": "redis" if run.site.env.get("REDIS_URL") else "in-memory",
            "database": "postgresql" if uses_postgresql() else "sqlite",
            "offered_appends_per_second": APPENDS_PER_SECOND * CONVERSATIONS,
            "offered_calls_per_second": CALLS_PER_SECOND,
        },
        "seed": run.seed,
        "appends_per_second": round(written["appended"] / written["seconds"], 1),
        "calls_per_second": round(calls / written["seconds"], 2),
        "events": sum(run.final.values()),
        "calls": calls,
        "sessions": sum(c.sessions for c in clients),
        "refused_handshakes": sum(c.refused for c in clients),
        "refused_handshakes_by_cause": dict(
            sum((c.refused_by for c in clients), collections.Counter())
        ),
        "delivered_live": sum(c.cursor.live for c in clients),
        "delivered_replayed": sum(c.cursor.replayed for c in clients),
        "latency_ms": {
            "p50": round(_percentile(latencies, 50) * 1000, 1),
            "p99": round(_percentile(latencies, 99) * 1000, 1),
            "samples": len(run.latencies),
        },
        "rss_mib": {
            name: {
                f"at {WARMUP_SECONDS:g} s": round(rss_warm[name] / MiB, 1),
                f"at {wrote_for:.0f} s": round(rss_end[name] / MiB, 1),
            }
            for name in rss_warm
        },
        f"rss_mib_every_{RSS_EVERY_SECONDS:g}_s": {
            name: [size for _, size in series] for name, series in run.rss_series.items()
        },
        "cpu_share_of_a_core": {name: round(share, 2) for name, share in cpu.items()},
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
