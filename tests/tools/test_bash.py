"""``bash`` run by a real worker: capture, timeout, promotion to an async run, the async tools,
cancel that kills, the environment. Real processes, real database."""

from __future__ import annotations

import hashlib
import json
import time

import pytest

from conversations.exits import exit_of, exit_wire
from conversations.models import Asset, ConversationEvent, ExecutionClaim, ToolActivity, ToolCall
from conversations.selectors import turn_results
from conversations.services.cancel import call_cancel
from conversations.storage import absolute_from_data, data_dir, sha256_file
from tests.conversations.admin_helpers import call_page_url, client_of
from tests.factories import StaffFactory
from tools.models import AsyncRun
from tools.runtime.processes import group_has_live_member
from tools.runtime.registry import HANDLERS

from .worker_helpers import model_call, response_of, running_worker, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _group_gone(pgid: int) -> bool:
    """No live process left in the group (zombies of a PID 1 that does not reap count as
    gone: they run nothing)."""
    return not group_has_live_member(pgid)


def test_a_command_is_captured_and_settles_with_its_files(user):
    script = "echo hello; sleep 0.2; echo oops >&2; sleep 0.2; printf 'no newline'; exit 3"
    with running_worker(handlers=HANDLERS):
        _, _, call_id = model_call(user, "bash", {"command": script})
        payload = wait_for(lambda: response_of(call_id))
    assert payload["outcome"] == "completed"  # it ran to the end, whatever its exit code
    text = payload["modelContent"][0]["text"]
    # The streams interleave in the order their chunks arrive (tests/tools/test_capture.py
    # proves it); on a loaded machine ``oops`` may be read after ``no newline``, 0.2 s later.
    arrived_in_order = text.startswith("hello\noops")
    lines = ["hello", "oops", "no newline"] if arrived_in_order else ["hello", "no newlineoops"]
    assert text == "\n".join(lines) + "\nProcess exit code 3."
    assets = {a.kind: a for a in Asset.objects.filter(tool_call_id=call_id)}
    assert set(assets) == {"payload", "stdout", "stderr", "output"}
    assert absolute_from_data(assets["stdout"].path).read_bytes() == b"hello\nno newline"
    assert absolute_from_data(assets["stderr"].path).read_bytes() == b"oops\n"
    result = json.loads(absolute_from_data(assets["payload"].path).read_text())
    assert (result["exitCode"], result["signal"], result["timedOut"]) == (3, None, False)
    # Recorded with the response for the pages: the card reads "Exit 3", not a success.
    assert exit_wire(exit_of(call_id))["summary"] == "Exit 3"
    assert exit_of(call_id).succeeded is False
    assert result["capture"]["stdout"] == {"bytes": 16, "storedBytes": 16, "truncated": False}
    assert result["assets"] == {k: str(assets[k].id) for k in ("stdout", "stderr", "output")}
    activity = ToolActivity.objects.get(tool_call_id=call_id)
    assert activity.is_final and "hello" in activity.payload_json["output"]["text"]
    # The card's preview: the last lines of the output, read from its file.
    assert payload["userProjection"] == {
        "argsPreview": [script],
        "resultPreview": lines,
        "previewOverflow": None,
    }


def test_a_command_killed_by_a_signal_says_which(user):
    with running_worker(handlers=HANDLERS):
        _, _, call_id = model_call(user, "bash", {"command": "echo bye; kill -9 $$"})
        payload = wait_for(lambda: response_of(call_id))
    assert payload["outcome"] == "completed"
    assert "Process killed by signal SIGKILL." in payload["modelContent"][0]["text"]
    ended = exit_wire(exit_of(call_id))
    assert (ended["summary"], ended["signal"], ended["exitCode"]) == (
        "Killed by SIGKILL",
        "SIGKILL",
        None,
    )


def test_a_long_outputs_card_shows_its_last_lines(user):
    with running_worker(handlers=HANDLERS):
        _, _, call_id = model_call(user, "bash", {"command": "seq 1 100000"})
        payload = wait_for(lambda: response_of(call_id))
    assert payload["userProjection"]["resultPreview"] == [str(n) for n in range(99995, 100001)]
    assert payload["userProjection"]["previewOverflow"] == {
        "hidden": 99994,
        "noun": "line",
        "direction": "tail",
    }


def test_the_environment_holds_no_server_secret(user, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://secret@db/x")
    monkeypatch.setenv("SECRET_KEY", "s" * 40)
    monkeypatch.setenv("TOOLCORE_ENV_GREETING", "hi")
    with running_worker(handlers=HANDLERS):
        conversation, _, call_id = model_call(user, "bash", {"command": "env; pwd"})
        payload = wait_for(lambda: response_of(call_id))
    text = payload["modelContent"][0]["text"]
    names = {line.split("=", 1)[0] for line in text.splitlines() if "=" in line}
    assert names <= {"PATH", "HOME", "LANG", "TERM", "GREETING", "PWD", "SHLVL", "_"}
    assert "GREETING=hi" in text and "TERM=dumb" in text
    assert "secret" not in text and "s" * 40 not in text
    workspace = text.splitlines()[-1]
    assert workspace.endswith(conversation.workspace) and f"HOME={workspace}" in text


def test_a_command_past_its_timeout_is_killed_and_says_so(user):
    with running_worker(handlers=HANDLERS):
        _, _, call_id = model_call(user, "bash", {"command": "echo start; sleep 60", "timeout": 1})
        payload = wait_for(lambda: response_of(call_id))  # under the command's 60 s
    text = payload["modelContent"][0]["text"]
    assert payload["outcome"] == "completed"
    assert "start" in text and "Process timed out after 1 s and was killed." in text
    assert exit_wire(exit_of(call_id))["summary"] == "Timed out after 1 s"


def test_a_long_command_is_promoted_to_an_async_run_and_its_end_is_a_notice(user, settings):
    settings.TOOLCORE_PROMOTE_AFTER = 1
    with running_worker(handlers=HANDLERS):
        conversation, turn_id, call_id = model_call(
            user, "bash", {"command": "echo begun; sleep 2; echo done"}
        )
        payload = wait_for(lambda: response_of(call_id))
        run_id = payload["asyncRunId"]
        assert payload["modelContent"][0]["text"] == f"Running in background as async run {run_id}."
        assert AsyncRun.objects.get(pk=run_id).status == "running"
        notice = wait_for(lambda: ConversationEvent.objects.filter(type="async_bash_event").first())
    assert notice.payload["asyncRunId"] == run_id and notice.payload["status"] == "exited"
    # The command's end is its run's: recorded with the notice, for its call's card.
    ended = exit_wire(exit_of(call_id))
    assert (ended["summary"], ended["asyncRunId"], ended["succeeded"]) == ("Exit 0", run_id, True)
    assert notice.payload["tail"]["stdout"] == "begun\ndone\n"
    assert notice.payload["modelContent"][0]["text"] == "begun\ndone\n"
    assert [n["sequence"] for n in turn_results(conversation.pk, turn_id)["queue"]] == [
        notice.sequence
    ]
    assert {a.kind for a in Asset.objects.filter(event=notice)} == {"stdout", "stderr", "output"}


def test_a_background_run_is_paged_and_killed_by_the_model(user):
    script = "for i in $(seq 1 300); do echo line $i; done; sleep 120"
    with running_worker(handlers=HANDLERS):
        conversation, _, call_id = model_call(
            user, "bash", {"command": script, "run_in_background": True}
        )
        run_id = wait_for(lambda: response_of(call_id))["asyncRunId"]
        wait_for(lambda: b"line 300" in _output(run_id))
        _, _, logs = model_call(
            user,
            "async_bash_logs",
            {"id": run_id, "offset": 10, "limit": 3},
            conversation=conversation,
        )
        text = wait_for(lambda: response_of(logs))["modelContent"][0]["text"]
        assert text.splitlines()[:3] == ["line 11", "line 12", "line 13"]
        assert (
            f"Lines at offsets 10-12 of 300 in the output of async run {run_id} (running)." in text
        )
        assert text.endswith("Continue with offset=13.")
        pgid = AsyncRun.objects.get(pk=run_id).pgid
        _, _, kill = model_call(user, "async_bash_kill", {"id": run_id}, conversation=conversation)
        assert wait_for(lambda: response_of(kill))["modelContent"][0]["text"] == (
            f"Killed async run {run_id}."
        )
    run = AsyncRun.objects.get(pk=run_id)
    assert run.status == "killed" and run.signal == "SIGTERM"
    assert _group_gone(pgid)
    notice = ConversationEvent.objects.get(type="async_bash_event")
    assert notice.payload["status"] == "killed"


def test_a_background_run_killed_through_the_api_is_answered_killed(user, api):
    """``POST /async-runs/{id}/kill`` answers the run after the kill, not before it."""
    script = "echo started; sleep 120"
    with running_worker(handlers=HANDLERS):
        _, _, call_id = model_call(user, "bash", {"command": script, "run_in_background": True})
        run_id = wait_for(lambda: response_of(call_id))["asyncRunId"]
        wait_for(lambda: b"started" in _output(run_id))
        pgid = AsyncRun.objects.get(pk=run_id).pgid
        answer = api.post_json(f"/api/v1/async-runs/{run_id}/kill")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["status"], body["signal"], body["exitCode"]) == ("killed", "SIGTERM", None)
    assert body["finishedAt"] is not None
    assert _group_gone(pgid)


def _output(run_id) -> bytes:
    path = data_dir() / AsyncRun.objects.get(pk=run_id).folder / "output.txt"
    return path.read_bytes() if path.exists() else b""


def test_cancelling_a_running_command_kills_its_whole_group(user):
    script = "sleep 300 & sh -c 'sleep 300' & echo started; wait"
    with running_worker(handlers=HANDLERS):
        _, _, call_id = model_call(user, "bash", {"command": script})
        claim = wait_for(
            lambda: ExecutionClaim.objects.filter(call_id=call_id, pgid__isnull=False).first()
        )
        assert not _group_gone(claim.pgid)
        started = time.monotonic()
        assert call_cancel(call_id=call_id) == {"outcome": "indeterminate", "alreadySettled": False}
        wait_for(lambda: _group_gone(claim.pgid))
        # SIGTERM, and SIGKILL after 5 s at the latest; uncancelled, it would run 300 s (the
        # bound is room for a loaded machine, not a measure of speed).
        assert time.monotonic() - started < 20
    assert not ToolCall.objects.filter(pk=call_id).exists()
    assert response_of(call_id)["outcome"] == "indeterminate"


def test_deleting_a_conversation_kills_its_background_runs(user):
    from conversations.services.conversations import conversation_delete

    with running_worker(handlers=HANDLERS):
        conversation, _, call_id = model_call(
            user, "bash", {"command": "sleep 300", "run_in_background": True}
        )
        run_id = wait_for(lambda: response_of(call_id))["asyncRunId"]
        pgid = AsyncRun.objects.get(pk=run_id).pgid
        assert not _group_gone(pgid)
        conversation_delete(conversation_id=conversation.pk)
        wait_for(lambda: _group_gone(pgid))
    assert not AsyncRun.objects.filter(pk=run_id).exists()


def test_a_worker_kills_what_dead_workers_left_on_its_host_only(user):
    """Groups recorded by recovery: the one of this host whose leader still has its start time
    is killed; another host's, and one whose pid now belongs to another process, are not."""
    import asyncio
    import socket
    import subprocess

    from tools.models import LeftProcess
    from tools.runtime.left_processes.services import left_process_record
    from tools.runtime.left_processes.watch import kill_left
    from tools.runtime.processes import start_ticks_of
    from tools.runtime.watchers import Watchers
    from tools.runtime.worker import Worker

    orphan = subprocess.Popen(["sleep", "300"], start_new_session=True)
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        here = socket.gethostname()
        left_process_record(
            host=here, pgid=orphan.pid, process_start=start_ticks_of(orphan.pid), label="mine"
        )
        left_process_record(
            host="elsewhere",
            pgid=stranger.pid,
            process_start=start_ticks_of(stranger.pid),
            label="theirs",
        )
        left_process_record(host=here, pgid=stranger.pid, process_start=1, label="recycled pid")
        worker = Worker(handlers=HANDLERS)
        watchers = Watchers(db=worker.db, host=here, worker=worker.name)
        killed = asyncio.run(kill_left(watchers))
        assert killed == ["mine"]
        assert orphan.wait(timeout=30) is not None
        assert stranger.poll() is None  # alive: not ours to kill
        assert list(LeftProcess.objects.values_list("label", flat=True)) == ["theirs"]
    finally:
        orphan.kill()
        stranger.kill()
        orphan.wait()
        stranger.wait()


# --- promotion: always an async run, its notice after the call's response ---------------------

PROMOTION_ROUNDS = 12


def _promoted(conversation, call_id) -> tuple[ConversationEvent, ConversationEvent]:
    """The call's response and its run's notice (waited for)."""
    response = wait_for(lambda: ConversationEvent.objects.filter(tool_call_id=call_id).first())
    notice = wait_for(
        lambda: ConversationEvent.objects.filter(
            conversation=conversation, type="async_bash_event"
        ).first()
    )
    return response, notice


@pytest.mark.parametrize("command", ["true", "seq 1 250"])
def test_a_background_command_that_exits_at_once_is_an_async_run_noticed_after_its_response(
    user, command
):
    """``run_in_background: true`` is always an async run, even when the process has exited
    by the time the worker looks, and its ``async_bash_event`` follows the call's response in
    the sequence. Both used to race: the quick command settled in the foreground with no run,
    or its notice was appended before the response."""
    with running_worker(handlers=HANDLERS):
        for _ in range(PROMOTION_ROUNDS):
            conversation, _, call_id = model_call(
                user, "bash", {"command": command, "run_in_background": True}
            )
            response, notice = _promoted(conversation, call_id)
            run = AsyncRun.objects.get(tool_call_id=call_id)
            assert response.payload["asyncRunId"] == str(run.pk)
            assert response.payload["modelContent"][0]["text"] == (
                f"Running in background as async run {run.pk}."
            )
            assert notice.payload["asyncRunId"] == str(run.pk)
            assert response.sequence < notice.sequence
            assert run.notice_sequence == notice.sequence and run.status == "exited"


def test_a_promoted_foreground_command_is_noticed_after_its_response(user, settings):
    settings.TOOLCORE_PROMOTE_AFTER = 1
    with running_worker(handlers=HANDLERS):
        for _ in range(3):
            conversation, _, call_id = model_call(user, "bash", {"command": "sleep 1.1; seq 1 250"})
            response, notice = _promoted(conversation, call_id)
            run = AsyncRun.objects.get(tool_call_id=call_id)
            assert response.payload["asyncRunId"] == str(run.pk)
            assert response.sequence < notice.sequence
            assert notice.payload["modelContent"][0]["text"].startswith(
                "Process exit code 0. Output: 250 lines"
            )


# --- async_bash_logs: the process_diagnostics profile on the page -----------------------------


def test_async_bash_logs_shows_a_page_that_fits_and_summarises_a_larger_one(user):
    """100 lines of 600 characters: the default page (the last 100 lines) reached the model as
    the first 39 lines, 23,956 bytes, naming the page's result.json. It is summarised within 16
    lines and 4,000 bytes, naming the run's output.txt and where to read on; a page that fits
    (19 of these lines) is shown whole."""
    script = "for i in $(seq 1 100); do printf '%03d %0596d\\n' $i 0; done; sleep 0.5"
    with running_worker(handlers=HANDLERS):
        conversation, _, call_id = model_call(
            user, "bash", {"command": script, "run_in_background": True}
        )
        run_id = wait_for(lambda: response_of(call_id))["asyncRunId"]
        wait_for(lambda: AsyncRun.objects.filter(pk=run_id, status="exited").exists())
        _, _, large = model_call(user, "async_bash_logs", {"id": run_id}, conversation=conversation)
        _, _, small = model_call(
            user,
            "async_bash_logs",
            {"id": run_id, "offset": 2, "limit": 19},
            conversation=conversation,
        )
        summary = wait_for(lambda: response_of(large))["modelContent"][0]["text"]
        whole = wait_for(lambda: response_of(small))["modelContent"][0]["text"]
    output = data_dir() / AsyncRun.objects.get(pk=run_id).folder / "output.txt"
    rows = summary.split("\n")
    assert len(rows) <= 16 and len(summary.encode()) <= 4000
    assert rows[0] == (
        f"Lines at offsets 0-99 of 100 in the output of async run {run_id} (exited): "
        "100 lines, 58.7 KiB."
    )
    assert rows[1] == "Showing 13 of 100 lines: first 2, 0 diagnostic, last 11."
    assert [row.split(": ", 1)[0] for row in rows[2:-1]] == ["0", "1", *map(str, range(89, 100))]
    assert rows[-1] == (
        f"Full output: {output} (read the lines not shown from offset=2 with limit=19, "
        "or grep it; do not rerun the command)."
    )
    assert "result.json" not in summary
    lines = [f"{n:03d} " + "0" * 596 for n in range(3, 22)]
    assert whole == "\n".join(
        [
            *lines,
            f"Lines at offsets 2-20 of 100 in the output of async run {run_id} (exited). "
            "Continue with offset=21.",
        ]
    )


# --- what a stopped command captured: evidence, verifiable forever ----------------------------


def test_a_cancelled_commands_capture_is_linked_and_stays_verifiable(user, api):
    """A cancel settles a running command ``indeterminate`` at once; its process is killed
    after (SIGTERM, SIGKILL 5 s later: this one ignores SIGTERM and writes all along). What it
    had captured is linked as fixed copies, so the assets still verify once the process has
    written more, and the model is told how much was captured."""
    script = "trap '' TERM; while :; do echo yes; done"
    with running_worker(handlers=HANDLERS):
        _, _, call_id = model_call(user, "bash", {"command": script})
        claim = wait_for(
            lambda: ExecutionClaim.objects.filter(call_id=call_id, pgid__isnull=False).first()
        )
        original = wait_for(lambda: next(data_dir().rglob(f"{call_id}/g*/output.txt"), None))
        wait_for(lambda: original.stat().st_size > 1000)
        assert call_cancel(call_id=call_id)["outcome"] == "indeterminate"
        response = ConversationEvent.objects.get(tool_call_id=call_id)
        assets = {a.kind: a for a in Asset.objects.filter(event=response)}
        wait_for(lambda: _group_gone(claim.pgid))
    assert set(assets) == {"stdout", "stderr", "output"}
    output = assets["output"]
    assert output.path.endswith("/stopped/output.txt")
    assert original.stat().st_size > output.size  # it went on writing after the settlement
    text = response.payload["modelContent"][0]["text"]
    where = data_dir() / output.path
    assert (
        f"Reason: Stopped; the external effect could not be confirmed. {output.size:,} bytes "
        f"of output were captured before the stop: {where}"
    ) in text
    for asset in assets.values():
        served = api.get(f"/api/v1/assets/{asset.pk}")
        assert served.status_code == 200, served.content[:300]
        body = b"".join(served.streaming_content)
        assert len(body) == asset.size and hashlib.sha256(body).hexdigest() == asset.sha256
        assert sha256_file(absolute_from_data(asset.path)) == asset.sha256
    # Support staff see them on the call's page.
    page = client_of(StaffFactory()).get(call_page_url(call_id)).content.decode()
    assert all(a.sha256 in page for a in assets.values())
