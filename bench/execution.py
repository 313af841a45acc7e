"""Execution benches: the runtime's paths beside a baseline doing the same work, in the same run.

    python bench/execution.py [--runs N] [--quick] [--only NAME] [--profile DIR]

Run from the repository root (the script puts the root on ``sys.path``). Prints a Markdown
table with PASS/FAIL per goal and always exits 0 when the benches ran: it is a report, not a
test. Each figure is the median of ``--runs`` runs (3), the measured path and its baseline run
in turns (a, b, a, b, …) so that load from other processes falls on both; a latency is a
percentile of its samples, taken in turns with the baseline's.

Rows are a table of benches (``BENCHES``): each takes the table, the runs and a scratch folder
and adds its rows. Add a bench by appending one.

- Capture: each capture runs in a fresh interpreter (``--child``) that reports its time and its
  peak resident set (``VmHWM``, cross-checked by sampling) above the resident set it had when
  the capture started: what the capture itself adds, whatever ran before it. Its time is
  measured inside that interpreter, around the capture alone. No database.
- Pickup latency: an idle ``manage.py runworker_tools`` process and sequential ``bash`` calls,
  each made ready by its own assistant message (allowed by a rule). From the ``COMMIT`` that
  makes the call ready (stamped in this process) to the first instruction of its process
  (``date +%s.%N``, the same wall clock); the baseline, sampled in turns: a transaction that
  sends ``pg_notify`` and commits, heard by a ``LISTEN``ing connection in another process, from
  its ``COMMIT`` to the notification read. The floor, sampled in turns too: a raw psycopg
  process (``--floor``) that hears a notification, claims a ready row of a scratch table in one
  statement (the worker's claim, pick ``SKIP LOCKED``, move, insert the claim) and a durable
  commit, and ``Popen``s the same command. Then the same pickups with a traced worker process
  (``--trace``), for the time of each step.
- Claim-run-settle: 1,000 ``read`` calls of a small file, made ready beforehand (10
  conversations of 100), run by 1, 2 and 4 worker processes (4 calls at once each, the
  default), set up beforehand and started together: from their start to the commit of the
  1,000th response event, with the CPU the processes and PostgreSQL used meanwhile. Baseline:
  as many raw psycopg ``INSERT`` + ``DELETE`` transactions (bench/core.py's ``RawEvents``).
- ``grep`` over a generated 50,000-file workspace against ``grep -rnE``. Django, no database.

The pickup and claim-run-settle benches need PostgreSQL, the one database several processes
share: they run on a throw-away database (bench/_setup.py) and are skipped, with the reason
printed, when ``DATABASE_URL`` is not PostgreSQL. ``--profile DIR`` writes a ``cProfile`` of
each worker process they start (per thread, in thread CPU time) to DIR.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import json
import math
import os
import platform
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _report import Report, ratio_text, spread  # noqa: E402

from tools.runtime.capture import ProcessCapture, tool_environment  # noqa: E402
from tools.runtime.live import LiveOutput  # noqa: E402

MIB = 1024 * 1024
CAPTURE_BYTES = 256 * MIB
ZEROS = f"head -c {CAPTURE_BYTES} /dev/zero"
TEXT = f"head -c {CAPTURE_BYTES} /dev/zero | tr '\\0' x"


# --- measuring ---------------------------------------------------------------------------------


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))


class Table:
    def __init__(self, report: Report) -> None:
        self.report = report
        self.verdicts: list[bool] = []

    def add(
        self,
        figure: str,
        measured_text: str,
        baseline_text: str,
        ratios: list[float] | float | None,
        goal: str = "",
        ok=None,
        verdict: str = "",
        **values: Any,
    ) -> None:
        """A row; ``ratios`` one number or the runs' ratios (the median printed, the smallest
        and largest in brackets); ``values`` the numbers behind the texts (bench/_report.py)."""
        verdict = verdict or ("" if ok is None else ("PASS" if ok else "FAIL"))
        if ok is not None:
            self.verdicts.append(ok)
        ratio = "" if ratios is None else spread(ratios, ratio_text)
        print(
            f"| {figure} | {measured_text} | {baseline_text} | {ratio} | {goal} | {verdict} |",
            flush=True,
        )
        self.report.row(
            figure=figure,
            measured=measured_text,
            baseline=baseline_text,
            ratio=ratio,
            goal=goal,
            ok=ok,
            values={**values, "ratio": ratios},
        )

    def skip(self, figure: str, reason: str) -> None:
        print(f"| {figure} | skipped: {reason} | | | | |", flush=True)
        self.report.skip(figure, reason)


def seconds(t: float) -> str:
    return f"{t * 1000:.0f} ms" if t < 1 else f"{t:.2f} s"


def millis(t: float) -> str:
    return f"{t * 1000:.2f} ms" if t < 0.01 else f"{t * 1000:.1f} ms"


def percentile(values: list[float], p: float) -> float:
    """The ``p``-th percentile (0–100), nearest rank."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(p / 100 * len(ordered))))
    return ordered[rank - 1]


def per_run(a: list[float], b: list[float]) -> list[float]:
    """``a[i] / b[i]`` for each run."""
    return [x / y for x, y in zip(a, b, strict=True)]


def by_run(samples: list[float], runs: int, p: float) -> list[float]:
    """The ``p``-th percentile of each of ``runs`` consecutive slices of ``samples`` (taken in
    turns with their baseline's): the spread of a percentile from run to run."""
    size = max(1, len(samples) // max(1, runs))
    return [percentile(samples[i : i + size], p) for i in range(0, size * runs, size)]


def in_turns(runs: int, *fns: Callable[[], object]) -> list[list]:
    """Each of ``fns`` run ``runs`` times, in turns; their answers per function."""
    answers: list[list] = [[] for _ in fns]
    for _ in range(runs):
        for fn, got in zip(fns, answers, strict=True):
            gc.collect()
            got.append(fn())
    return answers


# --- process capture ---------------------------------------------------------------------------


def _shell_redirect(command: str, folder: Path) -> Callable[[], float]:
    """The baseline: the shell writes the whole output to a file itself."""

    def run() -> float:
        target = folder / "redirect.out"
        started = time.perf_counter()
        subprocess.run(["sh", "-c", f"{command} > {target}"], check=True)
        spent = time.perf_counter() - started
        target.unlink()
        return spent

    return run


def _capture(command: str, folder: Path, *, live: bool) -> Callable[[], dict]:
    """One capture in a fresh interpreter (so its peak memory is the capture's own)."""

    def run() -> dict:
        shutil.rmtree(folder / "attempt", ignore_errors=True)
        shutil.rmtree(folder / "index", ignore_errors=True)
        child = [sys.executable, __file__, "--child", command, str(folder)]
        done = subprocess.run(child + (["--live"] if live else []), capture_output=True, check=True)
        report = json.loads(done.stdout)
        assert report["result"]["capture"]["stdout"]["bytes"] == CAPTURE_BYTES, report
        return report

    return run


def child(command: str, folder: Path, live: bool) -> None:
    """The measured side: seconds of the capture, and the resident set before and at its
    peak (``VmHWM``, cross-checked by sampling ``VmRSS`` every 10 ms from the event loop)."""

    async def capture_once() -> dict:
        loop = asyncio.get_running_loop()

        def sample() -> None:
            sampled.append(_status_kib("VmRSS:"))
            handle[0] = loop.call_later(0.01, sample)

        handle = [loop.call_later(0.01, sample)]
        output = LiveOutput() if live else None
        capture = ProcessCapture(
            command=command,
            cwd=folder,
            env=tool_environment(folder),
            folder=folder / "attempt",
            on_output=output.feed if output else None,
            index_dir=folder / "index",
        )
        try:
            return await capture.run(600)
        finally:
            handle[0].cancel()

    sampled: list[int] = []
    gc.collect()
    before = _status_kib("VmRSS:")
    started = time.perf_counter()
    result = asyncio.run(capture_once())
    spent = time.perf_counter() - started
    peak = max([_status_kib("VmHWM:"), *sampled])
    print(json.dumps({"seconds": spent, "growth": (peak - before) * 1024, "result": result}))


def _capture_rows(
    table: Table, runs: int, folder: Path, *, name: str, command: str, live: bool, goal: bool
) -> None:
    captured, redirected = in_turns(
        runs, _capture(command, folder, live=live), _shell_redirect(command, folder)
    )
    spent = [r["seconds"] for r in captured]
    ratios = per_run(spent, redirected)
    table.add(
        f"{name} (baseline: the shell redirects it to a file)",
        spread(spent, seconds),
        spread(redirected, seconds),
        ratios,
        "≤ 2" if goal else "",
        statistics.median(ratios) <= 2 if goal else None,
        measured=spent,
        baseline=redirected,
        unit="s",
    )
    growth = [r["growth"] / MIB for r in captured]
    table.add(
        f"{name}: peak RSS growth (baseline: the output's size)",
        spread(growth, lambda v: f"{v:.1f} MiB"),
        f"{CAPTURE_BYTES // MIB} MiB",
        [g * MIB / CAPTURE_BYTES for g in growth],
        "≤ 32 MiB",
        statistics.median(growth) <= 32,
        measured=growth,
        baseline=CAPTURE_BYTES / MIB,
        unit="MiB",
    )


def bench_capture(table: Table, runs: int, folder: Path) -> None:
    _capture_rows(
        table,
        runs,
        folder,
        name="capture of 256 MiB on stdout (`head -c 268435456 /dev/zero`)",
        command=ZEROS,
        live=False,
        goal=True,
    )


def bench_capture_live_text(table: Table, runs: int, folder: Path) -> None:
    _capture_rows(
        table,
        runs,
        folder,
        name="capture + live output of 256 MiB of text (the zeros through `tr '\\0' x`)",
        command=TEXT,
        live=True,
        goal=True,
    )


def bench_capture_live_zeros(table: Table, runs: int, folder: Path) -> None:
    # No goal: every NUL becomes U+FFFD (3 bytes) in the live view, whose bounded output then
    # costs a UTF-8 encoding of every byte; ASCII text takes the fast path of the row above.
    _capture_rows(
        table,
        runs,
        folder,
        name="capture + live output of 256 MiB of NUL bytes (worst case for the live view)",
        command=ZEROS,
        live=True,
        goal=False,
    )


# --- Django and the database -------------------------------------------------------------------


class Django:
    """Django set up once, on demand, and a throw-away database created once for the benches
    that need PostgreSQL (bench/_setup.py); both undone at the end."""

    def __init__(self) -> None:
        self.ready = False
        self.connection: Any = None
        self.user: Any = None

    def setup(self) -> None:
        if not self.ready:
            import _setup  # noqa: F401  (the environment of the benches)
            import django

            django.setup()
            self.ready = True

    def postgresql(self) -> Any:
        """The bench database's connection, created at the first call; None (and the benches
        skip) when the settings' database is not PostgreSQL."""
        self.setup()
        from django.db import connection

        if connection.vendor != "postgresql":
            return None
        if self.connection is None:
            from _setup import django_on_bench_database
            from django.contrib.auth import get_user_model

            self.connection = django_on_bench_database()
            self.user = get_user_model().objects.create(username="bench")
        return self.connection

    def skip_reason(self) -> str:
        from django.db import connection

        return (
            f"needs PostgreSQL (worker processes share it); DATABASE_URL gives {connection.vendor}"
        )

    def _wait_alone(self, timeout: float = 20.0) -> None:
        """Until the sessions of the worker processes stopped have ended (a database in use
        cannot be dropped)."""
        name = self.connection.settings_dict["NAME"]
        deadline = time.monotonic() + timeout
        with self.connection._nodb_cursor() as cursor:
            while time.monotonic() < deadline:
                cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [name])
                if cursor.fetchone()[0] == 0:
                    return
                time.sleep(0.1)

    def close(self) -> None:
        if not self.ready:
            return
        from django.conf import settings
        from django.db import connections

        data = Path(settings.DATA_DIR)
        try:
            connections.close_all()
            if self.connection is not None:
                from _setup import drop_bench_database

                self.connection.close_pool()
                self._wait_alone()
                drop_bench_database(self.connection)
        finally:
            if data.name.startswith("toolcore-bench-") and data.parent == Path(
                tempfile.gettempdir()
            ):
                shutil.rmtree(data, ignore_errors=True)  # the one bench/_setup.py made


DJANGO = Django()


def _conninfo(connection: Any) -> str:
    """A libpq connection string to the bench database (psycopg, outside Django)."""
    from psycopg.conninfo import make_conninfo

    params = connection.get_connection_params()
    keep = {"dbname", "user", "password", "host", "port"}
    return make_conninfo(**{k: v for k, v in params.items() if k in keep and v not in (None, "")})


def _process_env(connection: Any) -> dict[str, str]:
    """The environment of a worker process on the bench database and the bench's folders."""
    from urllib.parse import quote

    from django.conf import settings

    db = connection.settings_dict
    auth = quote(db["USER"] or "postgres", safe="")
    if db.get("PASSWORD"):
        auth += ":" + quote(db["PASSWORD"], safe="")
    url = f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    env = dict(os.environ)
    env.update(
        DATABASE_URL=url,
        DATA_DIR=str(settings.DATA_DIR),
        TOOLCORE_WORKSPACE_ROOT=str(settings.TOOLCORE_WORKSPACE_ROOT),
        DEBUG="0",
        LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
    )
    return env


def _listening(connection: Any, channel: str) -> int:
    """How many sessions of the bench database have sent ``LISTEN channel`` last: the worker
    listens on its channels in a fixed order, the last one once it is ready."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query = %s",
            [f"LISTEN {channel}"],
        )
        return cursor.fetchone()[0]


def _wait_listening(connection: Any, count: int, check: Callable[[], None]) -> None:
    """Until exactly ``count`` sessions listen (workers started and ready, or gone); ``check``
    raises when a worker process ended."""
    from conversations.services.runners import CHANNELS

    deadline = time.monotonic() + 60
    while _listening(connection, CHANNELS[-1]) != count:
        check()
        if time.monotonic() > deadline:
            raise RuntimeError(f"not {count} listening worker processes within 60 s")
        time.sleep(0.05)


def _conversation(title: str, files: dict[str, str] | None = None) -> tuple[Any, str]:
    """A conversation of the bench user with an open turn; ``files`` written in its workspace."""
    from conversations.services.conversations import conversation_create
    from conversations.services.messages import message_post
    from tools.workspaces import conversation_workspace

    conversation = conversation_create(owner=DJANGO.user, title=title)
    workspace = conversation_workspace(conversation)
    workspace.mkdir(parents=True, exist_ok=True)
    for name, text in (files or {}).items():
        (workspace / name).write_text(text)
    posted = message_post(
        conversation_id=conversation.pk,
        message_id=f"u-{uuid.uuid4().hex}",
        role="user",
        content=[{"type": "text", "text": "bench"}],
    )
    return conversation, posted.body["turnId"]


def _post_calls(conversation: Any, turn_id: str, calls: list[tuple[str, dict]]) -> list:
    """An assistant message with these tool calls (≤ 128 a message); their ids."""
    from conversations.services.messages import message_post

    content = [
        {"type": "tool_call", "id": f"c{i}", "name": name, "arguments": arguments}
        for i, (name, arguments) in enumerate(calls)
    ]
    posted = message_post(
        conversation_id=conversation.pk,
        message_id=f"a-{uuid.uuid4().hex}",
        role="assistant",
        turn_id=turn_id,
        content=content,
    )
    return posted.call_ids


# --- grep ------------------------------------------------------------------------------------

GREP_FILES = 50_000
GREP_PATTERN = r"needle_[0-9]+\(\)"  # the same in Python (the tool) and POSIX ERE (grep -E)
# fmt: off
_WORDS = [
    "def", "class", "return", "import", "self", "value", "items", "result", "config", "path",
    "request", "user", "event", "call", "state", "error", "index", "count", "name", "data", "list",
    "dict", "async", "await", "yield", "lambda", "None", "True", "False",
]
# fmt: on


def make_tree(root: Path, files: int, *, seed: int = 7) -> int:
    """``files`` source-like files (~2 KiB each), 100 a folder; a few matches planted."""
    rng = random.Random(seed)
    planted = 0
    for n in range(files):
        folder = root / f"pkg{n // 1000:02}" / f"mod{n // 100 % 10}"
        if n % 100 == 0:
            folder.mkdir(parents=True, exist_ok=True)
        lines = []
        for _ in range(rng.randint(30, 70)):
            words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(2, 8)))
            lines.append(f"    {words}  # {rng.randint(0, 10**6)}")
        if n % 1250 == 0:  # 40 matches in 50,000 files: the cost is the search, not the result
            lines.insert(rng.randint(0, len(lines)), f"    needle_{n}()")
            planted += 1
        (folder / f"file{n:05}.py").write_text("\n".join(lines) + "\n")
    return planted


def _grep_tool(workspace: Path) -> dict:
    """The ``grep`` tool over ``workspace`` (``<workspace root>/1/<name>``): its result.json."""
    from tools.runtime.base import CallContext
    from tools.runtime.files.grep import grep

    async def _no_update(_fields: dict) -> None:
        return None

    ctx = CallContext(
        call_id=uuid.uuid4(),
        conversation_id=uuid.uuid4(),
        owner_id=1,
        tool_name="grep",
        arguments={"pattern": GREP_PATTERN},
        generation=1,
        token=uuid.uuid4(),
        worker="bench",
        workspace=workspace,
        managed_root=workspace.parent / "managed",
        attempt_dir=workspace.parent / "attempt",
        update=_no_update,
    )
    [written] = asyncio.run(grep(ctx)).files
    return json.loads(written.path.read_bytes())


def _grep_rn(workspace: Path) -> int:
    done = subprocess.run(
        ["grep", "-rnE", GREP_PATTERN, "."], cwd=workspace, capture_output=True, check=False
    )
    return done.stdout.count(b"\n")


def _walk_and_read(workspace: Path) -> int:
    """The floor of any Python search: every file opened and read, no regex, no decoding."""
    total, stack = 0, [str(workspace)]
    while stack:
        with os.scandir(stack.pop()) as scan:
            for entry in scan:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    fd = os.open(entry.path, os.O_RDONLY)
                    try:
                        total += len(os.read(fd, 65536))
                    finally:
                        os.close(fd)
    return total


def bench_grep(table: Table, runs: int, folder: Path) -> None:
    """The ``grep`` tool over the tree vs ``grep -rnE`` of the same pattern, on a warm page
    cache; the pattern matches a few dozen lines, so the figure is the search of every file (as
    ``grep`` does), not the writing of its result."""
    DJANGO.setup()
    from django.conf import settings

    files = GREP_FILES // 10 if QUICK else GREP_FILES
    # The tool checks that its workspace lies below the workspace root, in its owner's folder.
    root, settings.TOOLCORE_WORKSPACE_ROOT = settings.TOOLCORE_WORKSPACE_ROOT, folder
    workspace = folder / "1" / "grep-ws"
    workspace.mkdir(parents=True)
    try:
        planted = make_tree(workspace, files)
        size = sum(p.stat().st_size for p in workspace.rglob("*.py"))
        # Warm the page cache, and check that all three see the same matches.
        result = _grep_tool(workspace)
        assert result["matchCount"] == planted and result["stopped"] is None, result
        assert _grep_rn(workspace) == planted
        _walk_and_read(workspace)

        def timed(fn: Callable[[], object]) -> Callable[[], float]:
            def run() -> float:
                started = time.perf_counter()
                fn()
                return time.perf_counter() - started

            return run

        tool, grep, floor = in_turns(
            runs,
            timed(lambda: _grep_tool(workspace)),
            timed(lambda: _grep_rn(workspace)),
            timed(lambda: _walk_and_read(workspace)),
        )
    finally:
        settings.TOOLCORE_WORKSPACE_ROOT = root
        shutil.rmtree(workspace, ignore_errors=True)
    ratios = per_run(tool, grep)
    table.add(
        f"`grep` tool over {files:,} files ({size / MIB:.0f} MiB), {planted} matches "
        "(baseline: `grep -rnE` of the same pattern)",
        spread(tool, seconds),
        spread(grep, seconds),
        ratios,
        "≤ 3",
        statistics.median(ratios) <= 3,
        measured=tool,
        baseline=grep,
        unit="s",
    )
    table.add(
        "  floor: `os.scandir` walk + read of every file, no regex (baseline: `grep -rnE`)",
        spread(floor, seconds),
        spread(grep, seconds),
        per_run(floor, grep),
        measured=floor,
        baseline=grep,
        unit="s",
    )
    table.add(
        "  the `grep` tool against that floor",
        spread(tool, seconds),
        spread(floor, seconds),
        per_run(tool, floor),
        measured=tool,
        baseline=floor,
        unit="s",
    )


# --- worker processes --------------------------------------------------------------------------

CONCURRENCY = 4  # TOOLCORE_WORKER_CONCURRENCY's default: calls one worker process runs at once


def worker_child(concurrency: int, trace: str | None, profile: str | None) -> None:
    """A worker process as ``manage.py runworker_tools`` runs it (the same ``Worker`` and
    handlers), set up first and started on a line on stdin, so that the interpreter's start is
    not timed; SIGTERM stops it. With ``trace``, stamps of each pickup go to that file; with
    ``profile``, ``cProfile`` statistics of its loop and database threads."""
    import django

    django.setup()
    from tools.runtime.registry import HANDLERS
    from tools.runtime.worker import Worker

    if trace:
        _install_trace(trace)
    profiles = _install_profile() if profile else []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        worker = Worker(handlers=HANDLERS, concurrency=concurrency)
        print("ready", flush=True)
        await loop.run_in_executor(None, sys.stdin.readline)
        if profiles:
            profiles[0].enable()
        await worker.run(stop)
        if profiles:
            profiles[0].disable()

    asyncio.run(main())
    if profiles:
        import pstats

        pstats.Stats(*profiles).dump_stats(profile)


def _install_profile() -> list:
    """A ``cProfile`` per thread (one profiler follows one thread): the loop's first, then one
    per database thread, each enabled around the jobs the worker gives it. They count the
    thread's CPU time (``time.thread_time``), not waits for the database, the disk or the GIL."""
    import cProfile
    import threading

    import tools.runtime.worker as worker_module

    def profiler() -> cProfile.Profile:
        return cProfile.Profile(time.thread_time)

    profiles = [profiler()]
    local = threading.local()
    db = worker_module.Worker.db

    async def profiled_db(self, fn, /, *args, **kwargs):
        def job(*a, **k):
            if not hasattr(local, "profile"):
                local.profile = profiler()
                profiles.append(local.profile)
            local.profile.enable()
            try:
                return fn(*a, **k)
            finally:
                local.profile.disable()

        return await db(self, job, *args, **kwargs)

    worker_module.Worker.db = profiled_db
    return profiles


def _install_trace(path: str) -> None:
    """Wall-clock stamps of the steps of a pickup, one JSON line per process started: the
    notification heard, the loop awake, the claim (on its thread), the call's row read, and
    ``Popen`` of the command. For sequential calls to an idle worker (the pickup bench)."""
    import tools.runtime.worker as worker_module
    from tools.runtime import capture

    marks: dict[str, float] = {}
    out = open(path, "a", buffering=1)  # noqa: SIM115 - open for the life of the process
    wake, pick_up = worker_module.Worker.wake, worker_module.Worker._pick_up
    claim = worker_module.claim_acquire_batch
    start = capture.ProcessCapture.start

    class TracedSubprocess:
        """``subprocess`` as capture.py sees it, with ``Popen`` stamped."""

        def __getattr__(self, name: str) -> Any:
            return getattr(subprocess, name)

        def Popen(self, *args: Any, **kwargs: Any) -> subprocess.Popen:  # noqa: N802
            marks["popen_begun"] = time.time()
            process = subprocess.Popen(*args, **kwargs)
            marks["popen_returned"] = time.time()
            return process

    def traced_wake(self, tool_name=None):
        marks.setdefault("notified", time.time())
        return wake(self, tool_name)

    async def traced_pick_up(self):
        if "notified" in marks:
            marks.setdefault("awake", time.time())
        return await pick_up(self)

    def traced_claim(**kwargs):
        began = time.time()
        claims = claim(**kwargs)
        if claims:
            marks.update(claim_begun=began, claimed=time.time())
        return claims

    async def traced_start(self):
        marks["start_begun"] = time.time()
        await start(self)
        marks["start_returned"] = time.time()
        out.write(json.dumps({"folder": str(self.folder), **marks}) + "\n")
        marks.clear()

    worker_module.Worker.wake = traced_wake
    worker_module.Worker._pick_up = traced_pick_up
    worker_module.claim_acquire_batch = traced_claim
    capture.ProcessCapture.start = traced_start
    capture.subprocess = TracedSubprocess()


class Workers:
    """``count`` gated worker processes (``--worker``) on the bench database."""

    def __init__(self, env: dict, count: int, folder: Path, *, trace: Path | None = None):
        self.log = open(folder / f"workers-{uuid.uuid4().hex[:8]}.log", "w+")  # noqa: SIM115

        def command(i: int) -> list[str]:
            line = [sys.executable, __file__, "--worker", str(CONCURRENCY)]
            if trace is not None:
                line += ["--trace", str(trace)]
            if PROFILE is not None:
                line += ["--profile", str(PROFILE / f"workers-{count}-{i}.prof")]
            return line

        self.processes = [
            subprocess.Popen(
                command(i),
                cwd=ROOT,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.log,
                text=True,
            )
            for i in range(count)
        ]
        for process in self.processes:
            if process.stdout.readline().strip() != "ready":
                self.stop()
                raise RuntimeError(f"a worker process did not start: {self.errors()}")

    def go(self) -> None:
        for process in self.processes:
            process.stdin.write("go\n")
            process.stdin.flush()

    def check(self) -> None:
        if any(p.poll() is not None for p in self.processes):
            raise RuntimeError(f"a worker process ended: {self.errors()}")

    def errors(self) -> str:
        self.log.seek(0)
        return self.log.read()[-3000:]

    def stop(self) -> str:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        errors = self.errors()
        self.log.close()
        return errors


def _wait_response(call_id: Any, timeout: float = 60.0) -> dict:
    """The payload of the call's response event, polled every 5 ms."""
    from conversations.models import ConversationEvent

    query = ConversationEvent.objects.filter(tool_call_id=call_id, type="tool_call_response")
    deadline = time.monotonic() + timeout
    while True:
        payload = query.values_list("payload", flat=True).first()
        if payload is not None:
            return payload
        if time.monotonic() > deadline:
            raise RuntimeError(f"no response to call {call_id} within {timeout:.0f} s")
        time.sleep(0.005)


# --- pickup latency ----------------------------------------------------------------------------

PICKUP_COMMAND = "date +%s.%N"  # the process's first instruction stamps the wall clock
PICKUP_SAMPLES, PICKUP_WARMUP, TRACE_SAMPLES = 200, 10, 100
BENCH_CHANNEL = "toolcore_bench_roundtrip"
_EPOCH = re.compile(r"\b(1\d{9}\.\d{9})\b")


def listen_child(channel: str) -> None:
    """The baseline's other end: ``LISTEN channel`` on its own connection, and print the
    wall-clock time at which each notification arrives (``payload time``)."""
    import psycopg

    with psycopg.connect(os.environ["BENCH_CONNINFO"], autocommit=True) as conn:
        conn.execute(f"LISTEN {channel}")
        print("ready", flush=True)
        for note in conn.notifies():
            got = time.time()
            if note.payload == "stop":
                return
            print(f"{note.payload} {got:.6f}", flush=True)


class NotifyRoundTrip:
    """The baseline: a transaction that sends ``pg_notify`` and commits, heard by a listening
    connection in another process; time from the ``COMMIT`` sent to the notification read."""

    def __init__(self, connection: Any) -> None:
        import psycopg

        conninfo = _conninfo(connection)
        self.conn = psycopg.connect(conninfo)
        self.child = subprocess.Popen(
            [sys.executable, __file__, "--listen", BENCH_CHANNEL],
            env={**os.environ, "BENCH_CONNINFO": conninfo},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        if self.child.stdout.readline().strip() != "ready":
            raise RuntimeError("the listening process did not start")
        self.count = 0

    def _send(self, payload: str) -> float:
        self.conn.execute("SELECT pg_notify(%s, %s)", (BENCH_CHANNEL, payload))
        sent = time.time()
        self.conn.commit()
        return sent

    def sample(self) -> float:
        self.count += 1
        sent = self._send(str(self.count))
        payload, got = self.child.stdout.readline().split()
        assert payload == str(self.count), payload
        return float(got) - sent

    def close(self) -> None:
        self._send("stop")
        self.child.wait(10)
        self.conn.close()


FLOOR_CHANNEL = "toolcore_bench_floor"
FLOOR_CALLS, FLOOR_CLAIMS = "bench_floor_calls", "bench_floor_claims"
# A claim as the worker's: pick with SKIP LOCKED, move running, insert the claim, one statement.
FLOOR_CLAIM = (
    f"WITH picked AS (SELECT id FROM {FLOOR_CALLS} WHERE state = 'ready' ORDER BY created_at "
    f"LIMIT 4 FOR UPDATE SKIP LOCKED), moved AS (UPDATE {FLOOR_CALLS} c SET state = 'running', "
    f"generation = c.generation + 1 FROM picked WHERE c.id = picked.id RETURNING c.id, "
    f"c.generation, c.command), claimed AS (INSERT INTO {FLOOR_CLAIMS} (call_id, token, "
    f"generation, expires_at) SELECT id, gen_random_uuid(), generation, now() + interval '30 s' "
    f"FROM moved RETURNING call_id) SELECT m.id, m.command FROM moved m JOIN claimed c "
    f"ON c.call_id = m.id"
)


def floor_child() -> None:
    """The pickup's raw floor, the other end: ``LISTEN``, and on each notification claim the
    ready rows in one statement and a durable commit, then start each one's command with
    ``Popen`` (``/bin/sh -c``, its own session, its stdout a pipe) and print what it printed.
    No Django, no asyncio, no files: what any worker must do at the least."""
    import psycopg

    with (
        psycopg.connect(os.environ["BENCH_CONNINFO"], autocommit=True) as listener,
        psycopg.connect(os.environ["BENCH_CONNINFO"]) as conn,
    ):
        listener.execute(f"LISTEN {FLOOR_CHANNEL}")
        print("ready", flush=True)
        for note in listener.notifies():
            if note.payload == "stop":
                return
            with conn.transaction():
                claimed = conn.execute(FLOOR_CLAIM).fetchall()
            for _call, command in claimed:
                child = subprocess.Popen(
                    ["/bin/sh", "-c", command],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    start_new_session=True,
                )
                out, _ = child.communicate()
                print(f"{note.payload} {out.decode().strip()}", flush=True)


class PickupFloor:
    """The pickup's floor, sampled in turns with the pickups: a transaction that inserts a
    ready row and sends ``pg_notify``, and a process that hears it, claims the row and starts
    its command (``floor_child``); from the ``COMMIT`` sent to the command's first
    instruction, as the pickups are measured."""

    def __init__(self, connection: Any) -> None:
        import psycopg

        conninfo = _conninfo(connection)
        self.conn = psycopg.connect(conninfo)
        self.conn.execute(
            f"CREATE TABLE IF NOT EXISTS {FLOOR_CALLS} (id bigserial PRIMARY KEY, state text "
            "NOT NULL, generation int NOT NULL DEFAULT 0, command text NOT NULL, "
            "created_at timestamptz NOT NULL DEFAULT now())"
        )
        self.conn.execute(
            f"CREATE INDEX IF NOT EXISTS {FLOOR_CALLS}_ready ON {FLOOR_CALLS} (state, created_at)"
        )
        self.conn.execute(
            f"CREATE TABLE IF NOT EXISTS {FLOOR_CLAIMS} (call_id bigint PRIMARY KEY, token uuid "
            "NOT NULL, generation int NOT NULL, expires_at timestamptz NOT NULL)"
        )
        self.conn.commit()
        self.child = subprocess.Popen(
            [sys.executable, __file__, "--floor"],
            env={**os.environ, "BENCH_CONNINFO": conninfo},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
        )
        if self.child.stdout.readline().strip() != "ready":
            raise RuntimeError("the floor's process did not start")
        self.count = 0

    def _send(self, payload: str, command: str | None) -> float:
        if command is not None:
            self.conn.execute(
                f"INSERT INTO {FLOOR_CALLS} (state, command) VALUES ('ready', %s)", (command,)
            )
        self.conn.execute("SELECT pg_notify(%s, %s)", (FLOOR_CHANNEL, payload))
        sent = time.time()
        self.conn.commit()
        return sent

    def sample(self) -> float:
        self.count += 1
        sent = self._send(str(self.count), PICKUP_COMMAND)
        payload, started = self.child.stdout.readline().split()
        assert payload == str(self.count), payload
        return float(started) - sent

    def close(self) -> None:
        self._send("stop", None)
        self.child.wait(10)
        self.conn.close()


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
    (call_id,) = _post_calls(conversation, turn_id, [("bash", {"command": PICKUP_COMMAND})])
    ((sent, returned),) = clock.ready
    time.sleep(0.05)  # the pickup runs undisturbed by the polling below
    payload = _wait_response(call_id)
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
    from tools.models import PermissionRule

    samples = PICKUP_SAMPLES // 4 if QUICK else PICKUP_SAMPLES
    conversation, turn_id = _conversation("pickup")
    PermissionRule.objects.create(
        conversation=conversation, tool_name="bash", pattern=PICKUP_COMMAND, decision="allow"
    )
    env = _process_env(connection)
    log = open(folder / "runworker_tools.log", "w+")  # noqa: SIM115
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "runworker_tools"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    roundtrip = NotifyRoundTrip(connection)
    floor = PickupFloor(connection)
    clock = CommitClock()
    try:
        try:
            _wait_listening(connection, 1, lambda: _alive(worker, log))
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
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
            log.seek(0)
            errors = log.read()
            log.close()
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
    samples = TRACE_SAMPLES // 4 if QUICK else TRACE_SAMPLES
    trace = folder / "pickup-trace.jsonl"
    workers = Workers(env, 1, folder, trace=trace)
    try:
        _wait_listening(connection, 0, workers.check)  # the first worker process gone
        workers.go()
        _wait_listening(connection, 1, workers.check)
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


# --- claim, run, settle ------------------------------------------------------------------------

THROUGHPUT_CALLS = 1000
THROUGHPUT_PROCESSES = (1, 2, 4)
SMALL_FILE = "".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(40))


def _ready_reads(n: int) -> list:
    """``n`` ready ``read`` calls of a small file, 100 to a conversation (one assistant message
    each); the conversations' ids."""
    from conversations.models import ToolCall

    conversations = []
    for c in range(n // 100):
        conversation, turn_id = _conversation(f"reads-{c}", {"small.txt": SMALL_FILE})
        _post_calls(conversation, turn_id, [("read", {"path": "small.txt"})] * 100)
        conversations.append(conversation.pk)
    ready = ToolCall.objects.filter(conversation_id__in=conversations, state="ready").count()
    assert ready == n, ready
    return conversations


class CPU:
    """CPU seconds used so far by some processes, by the PostgreSQL server's processes, and by
    the whole machine (busy and in all, over every core), from ``/proc``."""

    def __init__(self, pids: list[int]) -> None:
        self.each = [self._process(pid) for pid in pids]
        self.workers = sum(self.each)
        self.postgres = sum(
            self._process(int(p.name))
            for p in Path("/proc").iterdir()
            if p.name.isdigit() and self._comm(p) == "postgres"
        )
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
        hz = os.sysconf("SC_CLK_TCK")
        self.total = sum(ticks[:8]) / hz
        self.busy = self.total - (ticks[3] + ticks[4]) / hz  # less idle and iowait

    @staticmethod
    def _comm(proc: Path) -> str:
        try:
            return (proc / "comm").read_text().strip()
        except OSError:
            return ""

    @staticmethod
    def _process(pid: int) -> float:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def since(self, before: CPU) -> dict[str, float]:
        each = [after - was for after, was in zip(self.each, before.each, strict=True)]
        return {
            "workers": self.workers - before.workers,
            "least": min(each),
            "most": max(each),
            "postgres": self.postgres - before.postgres,
            "busy": (self.busy - before.busy) / (self.total - before.total),
        }


def _claim_run_settle(env: dict, processes: int, n: int, folder: Path) -> dict[str, float]:
    """Seconds from starting ``processes`` worker processes (set up beforehand) to the commit of
    the ``n``-th response event, and the CPU used meanwhile."""
    from django.db.models import Max

    from conversations.models import ConversationEvent

    conversations = _ready_reads(n)
    responses = ConversationEvent.objects.filter(
        conversation_id__in=conversations, type="tool_call_response"
    )
    workers = Workers(env, processes, folder)
    pids = [p.pid for p in workers.processes]
    try:
        cpu = CPU(pids)
        started = time.time()
        workers.go()
        deadline = time.monotonic() + 600
        while responses.count() < n:
            workers.check()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{n} calls not settled within 600 s")
            time.sleep(0.1)
        used = CPU(pids).since(cpu)
        last = responses.aggregate(last=Max("created_at"))["last"].timestamp()
    finally:
        errors = workers.stop()
    assert "Traceback" not in errors, errors
    outcomes = {p["outcome"] for p in responses.values_list("payload", flat=True).iterator()}
    assert outcomes == {"completed"}, outcomes
    return {"seconds": last - started, **used}


def bench_claim_run_settle(table: Table, runs: int, folder: Path) -> None:
    """1,000 ready ``read`` calls (10 conversations of 100) run by 1, 2 and 4 worker processes
    (4 calls at once each); the raw baseline: as many ``INSERT`` + ``DELETE`` transactions with
    psycopg (bench/core.py's ``RawEvents``)."""
    n = THROUGHPUT_CALLS // 5 if QUICK else THROUGHPUT_CALLS
    figure = f"claim-run-settle of {n:,} `read` calls"
    connection = DJANGO.postgresql()
    if connection is None:
        table.skip(figure, DJANGO.skip_reason())
        return
    from core import RawEvents

    env = _process_env(connection)
    raw = RawEvents(connection, DJANGO.user, "raw")

    def baseline() -> float:
        raw.scratch_rows(n)
        return raw.transactions(n, "tool_call_response", delete_scratch=True)

    measures = [lambda k=k: _claim_run_settle(env, k, n, folder) for k in THROUGHPUT_PROCESSES]
    *answers, raws = in_turns(runs, *measures, baseline)
    raw.conn.close()
    got = {
        k: {key: statistics.median(a[key] for a in runs_of_k) for key in runs_of_k[0]}
        for k, runs_of_k in zip(THROUGHPUT_PROCESSES, answers, strict=True)
    }
    spent = {
        k: [a["seconds"] for a in runs_of_k]
        for k, runs_of_k in zip(THROUGHPUT_PROCESSES, answers, strict=True)
    }
    raw_time = statistics.median(raws)
    one = got[1]["seconds"]

    def cpu(k: int) -> str:
        g = got[k]
        each = "" if k == 1 else f" (each process {g['least']:.2f}–{g['most']:.2f} s)"
        return (
            f"; CPU a call: workers {g['workers'] / n * 1000:.1f} ms{each}, PostgreSQL "
            f"{g['postgres'] / n * 1000:.1f} ms; machine busy {g['busy']:.0%}"
        )

    table.add(
        f"{figure}, 1 worker process (baseline: {n:,} raw psycopg `INSERT` + `DELETE` "
        "transactions)",
        f"{spread(spent[1], seconds)} ({one / n * 1000:.2f} ms a call{cpu(1)})",
        f"{spread(raws, seconds)} ({raw_time / n * 1000:.2f} ms each)",
        per_run(spent[1], raws),
        measured=spent[1],
        baseline=raws,
        unit="s",
    )
    # More processes can only use the CPU one process leaves idle: on this machine, at most
    # 1 ÷ (the share of the whole machine busy while one process runs) times faster.
    ceilings = [1 / a["busy"] for a in answers[0]]
    table.add(
        f"  ceiling of any speedup on {os.cpu_count()} cores: 1 ÷ the machine's busy share with "
        "1 process (a goal above it is out of reach here)",
        "",
        "",
        ceilings,
    )
    for k in THROUGHPUT_PROCESSES[1:]:
        goal = k == 4
        speedups = per_run(spent[1], spent[k])
        ok = statistics.median(speedups) >= 1.5 if goal else None
        above = ok is False and statistics.median(ceilings) < 1.5
        table.add(
            f"{figure}, {k} worker processes (baseline: 1; ratio: speedup)",
            f"{spread(spent[k], seconds)} ({got[k]['seconds'] / n * 1000:.2f} ms a call{cpu(k)})",
            spread(spent[1], seconds),
            speedups,
            "speedup ≥ 1.5" if goal else "",
            ok,
            "FAIL (goal above the ceiling)" if above else "",
            measured=spent[k],
            baseline=spent[1],
            unit="s",
            floor=statistics.median(ceilings) if goal else None,
        )


BENCHES: list[Callable[[Table, int, Path], None]] = [
    bench_capture,
    bench_capture_live_text,
    bench_capture_live_zeros,
    bench_pickup,
    bench_claim_run_settle,
    bench_grep,
]
QUICK = False  # --quick: one run, smaller sizes
PROFILE: Path | None = None  # --profile DIR


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f}"


def main() -> None:
    global QUICK, PROFILE
    report = Report("execution")  # takes ``--json PATH`` off the command line
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--quick", action="store_true", help="1 run per figure, smaller sizes")
    parser.add_argument(
        "--only", metavar="NAME", help="only the benches whose name contains NAME (bench_…)"
    )
    parser.add_argument("--child", nargs=2, metavar=("COMMAND", "FOLDER"), help=argparse.SUPPRESS)
    parser.add_argument("--live", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker", type=int, metavar="CONCURRENCY", help=argparse.SUPPRESS)
    parser.add_argument("--trace", metavar="FILE", help=argparse.SUPPRESS)
    parser.add_argument(
        "--profile",
        metavar="DIR",
        type=Path,
        help="write cProfile statistics of each worker process started to DIR "
        "(workers-<count>-<i>.prof; each run overwrites them)",
    )
    parser.add_argument("--listen", metavar="CHANNEL", help=argparse.SUPPRESS)
    parser.add_argument("--floor", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]), args.live)
        return
    if args.worker:
        worker_child(args.worker, args.trace, args.profile and str(args.profile))
        return
    if args.listen:
        listen_child(args.listen)
        return
    if args.floor:
        floor_child()
        return
    QUICK, PROFILE = args.quick, args.profile
    if PROFILE is not None:
        PROFILE.mkdir(parents=True, exist_ok=True)
    runs = 1 if args.quick else max(1, args.runs)
    started = time.perf_counter()
    report.header = (
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; Python "
        f"{platform.python_version()}; {os.cpu_count()} cores; {_load()} at the start; "
        f"medians of {runs} runs (smallest–largest). Ratio: measured over baseline (lower is "
        "better) unless the row says otherwise."
    )
    print(report.header + "\n")
    print("| figure | measured | baseline | ratio | goal | result |")
    print("|---|---|---|---|---|---|")
    table = Table(report)
    try:
        with tempfile.TemporaryDirectory(prefix="toolcore-bench-") as tmp:
            for bench in BENCHES:
                if args.only is None or args.only in bench.__name__:
                    os.sync()  # what the bench before wrote is on disk, not written back now
                    bench(table, runs, Path(tmp))
    finally:
        DJANGO.close()
    footer = (
        f"{sum(table.verdicts)} of {len(table.verdicts)} goals met; "
        f"{time.perf_counter() - started:.0f} s in all; {_load()} at the end."
    )
    print(f"\n{footer}")
    report.write(footer)


if __name__ == "__main__":
    main()
