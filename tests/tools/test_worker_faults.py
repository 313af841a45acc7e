"""A database error after a command's process started: the worker kills the process group and
the call settles ``indeterminate`` with what it captured, never ``failed``, and no process runs
on untracked (docs/reliability.md, "Faults and what is guaranteed").

Fault injection: each test patches ONE service function, where the runtime calls it, to raise
``django.db.OperationalError`` on its first call (that is the fault; later calls run the real
service). A terminated connection cannot be made to fail at one chosen step deterministically
(``pg_terminate_backend`` hits whatever statement runs), and SQLite has no server to lose.
Everything else is real: a real worker, real processes, a real database and DATA_DIR.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import OperationalError

from conversations.models import Asset, ConversationEvent
from conversations.orphans import orphan_folders
from conversations.storage import absolute_from_data, data_dir, sha256_file
from tests.conversations.helpers import new_conversation
from tests.faults.helpers import assert_intact
from tools.models import AsyncRun
from tools.runtime import bash as bash_module
from tools.runtime import worker as worker_module
from tools.runtime.registry import HANDLERS
from tools.workspaces import conversation_workspace

from .worker_helpers import model_call, response_of, running_worker, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

SLEEP_SECONDS = 2
# Output first (a live update, something to capture), then the effect that must never happen.
SCRIPT = f"echo begun; sleep {SLEEP_SECONDS}; echo late > marker"


def _fail(monkeypatch, module: Any, name: str, *, times: int = 1) -> list[int]:
    """``module.name`` raises ``OperationalError`` on its first ``times`` calls (the injected
    fault), then runs the real service. The list counts the calls."""
    real = getattr(module, name)
    calls: list[int] = []

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) <= times:
            raise OperationalError("injected: the database went away")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, failing)
    return calls


def _call(user, arguments: dict) -> tuple[Any, Any, Path]:
    """A ``bash`` call made ready (approved when the permission port asks), its workspace
    made."""
    conversation = new_conversation(user)
    workspace = conversation_workspace(conversation)
    workspace.mkdir(parents=True)
    _, _, call_id = model_call(user, "bash", arguments, conversation)
    return conversation, call_id, workspace


def _processes_in(workspace: Path) -> list[int]:
    """Processes whose working directory is ``workspace``: what runs of the command."""
    target = os.path.realpath(workspace)
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/cwd") == target:
                    found.append(int(name))
            except OSError:  # gone meanwhile, or a zombie
                continue
    return found


def _assert_stopped(response: ConversationEvent, workspace: Path, started: float) -> None:
    """Indeterminate, the process group gone before its effect, what it captured linked and
    verifiable, and the model told how much."""
    payload = response.payload
    assert payload["outcome"] == "indeterminate", payload["modelContent"]
    wait_for(lambda: not _processes_in(workspace), what="the command's processes gone")
    # Past the time the command would have written its marker (none of it runs any more, so
    # on a slow machine the check can only become easier to pass, not fail).
    time.sleep(max(0.0, started + SLEEP_SECONDS + 0.8 - time.monotonic()))
    assert not (workspace / "marker").exists()  # killed before it wrote
    assets = {a.kind: a for a in Asset.objects.filter(event=response)}
    assert {"stdout", "stderr", "output"} <= set(assets), assets
    for asset in assets.values():
        path = absolute_from_data(asset.path)
        assert path.stat().st_size == asset.size and sha256_file(path) == asset.sha256
    output = assets["output"]
    assert absolute_from_data(output.path).read_bytes() in (b"", b"begun\n")
    text = payload["modelContent"][0]["text"]
    assert text.startswith("Tool call outcome unknown: it was stopped while running")
    if output.size:
        where = data_dir() / output.path
        assert f"{output.size:,} bytes of output were captured before the stop: {where}" in text
    else:
        assert "No output was captured before the stop." in text


STEPS = {
    "recording the process": (bash_module, "claim_process_record", False),
    "a live update": (worker_module, "activity_fold", False),
    "the announce": (worker_module, "claim_announce", False),
    "the promotion": (bash_module, "async_run_start", True),
    "the settlement's first try": (worker_module, "call_settle", True),
}


@pytest.mark.parametrize("step", list(STEPS))
def test_a_database_error_after_the_start_kills_the_command_and_settles_indeterminate(
    user, monkeypatch, step
):
    module, name, background = STEPS[step]
    calls = _fail(monkeypatch, module, name)
    conversation, call_id, workspace = _call(
        user, {"command": SCRIPT, "run_in_background": background}
    )
    started = time.monotonic()
    with running_worker(handlers=HANDLERS):
        wait_for(lambda: response_of(call_id))
        response = ConversationEvent.objects.get(tool_call_id=call_id)
        assert calls, f"{name} was never called"
        assert "failed" not in response.payload["outcome"]
        _assert_stopped(response, workspace, started)
        if step == "the settlement's first try":
            # Its async run was killed; its notice follows the response.
            notice = wait_for(
                lambda: ConversationEvent.objects.filter(
                    conversation=conversation, type="async_bash_event"
                ).first()
            )
            assert notice.payload["status"] == "killed"
            assert response.sequence < notice.sequence
    assert response.payload["attempts"] == 1  # settled by its own worker, not by recovery
    if step == "the promotion":
        assert not AsyncRun.objects.filter(tool_call_id=call_id).exists()


def test_a_settlement_that_never_reaches_the_database_is_left_to_recovery(
    user, monkeypatch, settings
):
    """The error stops the command; then every try of its settlement fails too. The claim
    expires and recovery settles the call ``indeterminate``, linking what the attempt captured:
    nothing is an orphan, the invariants hold without ``purge_orphans``."""
    settings.TOOLCORE_CLAIM_LEASE = 2
    _fail(monkeypatch, bash_module, "claim_process_record")
    settles = _fail(monkeypatch, worker_module, "call_settle", times=1000)
    _, call_id, workspace = _call(user, {"command": SCRIPT})
    started = time.monotonic()
    with running_worker(handlers=HANDLERS):
        wait_for(lambda: response_of(call_id), timeout=60)  # the tries, the lease, the sweep
    response = ConversationEvent.objects.get(tool_call_id=call_id)
    assert len(settles) == worker_module.SETTLE_TRIES  # its own worker tried, and gave up
    _assert_stopped(response, workspace, started)
    paths = Asset.objects.filter(event=response).values_list("path", flat=True)
    assert all("/stopped/" in path for path in paths)  # fixed copies made by recovery
    assert not list(orphan_folders())
    assert_intact(purge=False)


def test_an_echo_whose_live_update_fails_is_indeterminate_with_its_output(user, monkeypatch):
    """The reported case: under terminated backends ``echo`` calls settled ``failed`` ("The
    tool failed unexpectedly (OperationalError)") though their stdout.txt held the echo. The
    command ran: ``indeterminate``, its output linked and named."""
    calls = _fail(monkeypatch, worker_module, "activity_fold")
    _, call_id, _ = _call(user, {"command": "echo hello"})
    with running_worker(handlers=HANDLERS):
        payload = wait_for(lambda: response_of(call_id))
    assert calls and payload["outcome"] == "indeterminate", payload["modelContent"]
    response = ConversationEvent.objects.get(tool_call_id=call_id)
    output = Asset.objects.get(event=response, kind="output")
    assert absolute_from_data(output.path).read_bytes() == b"hello\n"
    text = payload["modelContent"][0]["text"]
    assert (
        "The server could not keep track of the command (OperationalError), so it stopped it. "
        f"6 bytes of output were captured before the stop: {data_dir() / output.path}"
    ) in text
