"""Running real workers in tests: a worker's event loop on a thread of its own
(``running_worker``), or a ``manage.py runworker_tools`` process on the test database
(``worker_process``, ``stop_worker``); a model call made ready (``model_call``, ``approve``),
waiting for it (``wait_for``, from ``tests/waits.py``) and its response (``response_of``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, connections

from conversations.models import ConversationEvent, ToolCall
from conversations.services.interactions import call_resolve
from tests.conversations.api_helpers import grant_run_commands
from tests.conversations.helpers import assistant_calls, new_conversation, open_turn
from tests.realtime.daphne_helpers import ROOT, stop_process
from tests.waits import wait_for  # noqa: F401 - the tests import it from here too
from tools.runtime.worker import Worker


@contextlib.contextmanager
def running_worker(**kwargs: Any) -> Iterator[Worker]:
    """A ``Worker(**kwargs)`` running until the block ends (then stopped and joined)."""
    worker = Worker(**kwargs)
    started = threading.Event()
    state: dict[str, Any] = {}

    async def main() -> None:
        state["loop"] = asyncio.get_running_loop()
        state["stop"] = asyncio.Event()
        started.set()
        await worker.run(state["stop"])

    thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    thread.start()
    started.wait(5)
    try:
        yield worker
    finally:
        state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(15)
        assert not thread.is_alive(), "the worker did not stop"
        connections.close_all()


def approve(user, call_ids) -> None:
    """``user``, given ``tools.run_commands``, approves those of the calls the permission port
    asks about (``awaiting_approval``), once each."""
    grant_run_commands(user)
    user = type(user).objects.get(pk=user.pk)  # a fresh permission cache
    approval = {"kind": "approval", "decision": "allow", "persist": False}
    for call_id in call_ids:
        if ToolCall.objects.filter(pk=call_id, state="awaiting_approval").exists():
            call_resolve(call_id=call_id, user=user, request_id="approve", resolution=approval)


def model_call(user, tool: str, arguments: dict, conversation=None) -> tuple[Any, str, Any]:
    """A model call of ``tool`` in ``conversation`` (a new one by default), approved by
    ``user`` (``approve``) when the permission port asks: ``(conversation, turn id, call
    id)``."""
    conversation = conversation or new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, (tool, arguments)).call_ids
    if ToolCall.objects.filter(pk=call_id, state="awaiting_approval").exists():
        approve(user, [call_id])
    return conversation, turn_id, call_id


def response_of(call_id: Any) -> dict[str, Any] | None:
    event = ConversationEvent.objects.filter(tool_call_id=call_id).first()
    return None if event is None else event.payload


def database_url() -> str:
    """The URL of the test database, for processes of their own sharing it."""
    db = connection.settings_dict
    if connection.vendor == "postgresql":
        return (
            f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
        )
    return f"sqlite:///{db['NAME']}"


def worker_process(
    name: str,
    *,
    lease_seconds: float,
    concurrency: int = 4,
    wrapper: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> subprocess.Popen:
    """A ``manage.py runworker_tools`` process on the test database, ``DATA_DIR`` and
    workspaces (``wrapper``: a command it runs under, e.g. ``faketime``). Its stderr goes to
    ``<tmp>/worker-<name>.stderr`` (a pipe nobody reads could fill and stop it)."""
    environ = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL"}}
    environ.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=database_url(),
        SECRET_KEY="crash-test-secret-" + "x" * 32,
        ALLOWED_HOSTS="localhost",
        DATA_DIR=str(settings.DATA_DIR),
        TOOLCORE_WORKSPACE_ROOT=str(settings.TOOLCORE_WORKSPACE_ROOT),
        TOOLCORE_CLAIM_LEASE=str(lease_seconds),
        LOG_LEVEL="WARNING",
        **(env or {}),
    )
    command = [sys.executable, "manage.py", "runworker_tools", "--name", name]
    log = Path(settings.DATA_DIR).parent / f"worker-{name}.stderr"
    with log.open("ab") as stderr:
        process = subprocess.Popen(
            [*wrapper, *command, "--concurrency", str(concurrency)],
            cwd=ROOT,
            env=environ,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    process.log = log  # type: ignore[attr-defined]
    return process


def stop_worker(process: subprocess.Popen) -> str:
    """SIGTERM (SIGKILL if it lingers 20 s); what it wrote on stderr."""
    stop_process(process, 20)
    return worker_stderr(process)


def worker_stderr(process: subprocess.Popen) -> str:
    return process.log.read_text(errors="replace")  # type: ignore[attr-defined]
