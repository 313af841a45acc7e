"""Worker processes of the execution benches: ``Worker`` as ``manage.py runworker_tools`` runs
it, in a child interpreter (``bench/execution.py --worker``) set up first and started on a line
on stdin, so that the interpreter's start is not timed; optionally traced (the steps of each
pickup) or profiled (``cProfile`` per thread).
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from execution_setup import OPTIONS, ROOT, SCRIPT

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
            line = [sys.executable, str(SCRIPT), "--worker", str(CONCURRENCY)]
            if trace is not None:
                line += ["--trace", str(trace)]
            if OPTIONS.profile is not None:
                line += ["--profile", str(OPTIONS.profile / f"workers-{count}-{i}.prof")]
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
