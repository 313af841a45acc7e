"""A worker process killed with ``kill -9`` mid-run, and the worker that comes after it: its
sweep kills the group the dead one left (unsandboxed: in the sandbox, the command ended with its
worker), settles the command ``indeterminate`` and runs the read-only call again. Real processes sharing the test database (SQLite or PostgreSQL)."""

from __future__ import annotations

import signal
import subprocess

import pytest

from conversations.models import ConversationEvent, ExecutionClaim
from tests.conversations.helpers import assistant_calls, new_conversation, open_turn
from tools.models import PermissionRule
from tools.runtime.processes import group_has_live_member
from tools.workspaces import conversation_workspace

from .worker_helpers import response_of, stop_worker, wait_for, worker_process

LEASE_SECONDS = 2

pytestmark = pytest.mark.django_db(transaction=True)


def start_worker(name: str, sandbox: str = "bwrap") -> subprocess.Popen:
    return worker_process(name, lease_seconds=LEASE_SECONDS, env={"TOOLCORE_SANDBOX": sandbox})


# Unsandboxed, the dead worker's command goes on until the next worker's sweep kills its group;
# in the sandbox (--die-with-parent) it ends with its worker. The calls are recovered alike.
@pytest.mark.parametrize("sandbox", ["off", "bwrap"])
def test_after_kill_9_the_next_worker_kills_the_group_and_recovers_both_calls(user, sandbox):
    PermissionRule.objects.create(tool_name="bash", pattern="", decision="allow")
    conversation = new_conversation(user)
    workspace = conversation_workspace(conversation)
    workspace.mkdir(parents=True)
    # A pattern that backtracks for many seconds on this line (up to grep's 30 s limit): the
    # read is still running when its worker dies.
    (workspace / "slow.txt").write_text("a" * 40 + "!\n")
    turn_id = open_turn(conversation)
    bash_id, grep_id = assistant_calls(
        conversation,
        turn_id,
        ("bash", {"command": "sleep 1000"}),
        ("grep", {"pattern": "(a|aa)+b", "path": "slow.txt"}),
    ).call_ids
    first = start_worker("w-dies", sandbox)
    try:
        claims = wait_for(
            lambda: (
                ExecutionClaim.objects.filter(worker="w-dies").count() == 2
                and ExecutionClaim.objects.filter(call_id=bash_id, pgid__isnull=False).first()
            ),
            timeout=30,
        )
    except AssertionError:
        raise AssertionError(stop_worker(first)[-3000:]) from None
    first.send_signal(signal.SIGKILL)
    first.wait()
    pgid = claims.pgid
    if sandbox == "off":
        assert group_has_live_member(pgid)  # the dead worker's command goes on
    else:
        wait_for(lambda: not group_has_live_member(pgid), what="the sandbox ended with its worker")
    (workspace / "slow.txt").write_text("aaab\n")  # the next run of the read is quick
    second = start_worker("w-next", sandbox)
    try:
        bash = wait_for(lambda: response_of(bash_id), timeout=30)
        grep = wait_for(lambda: response_of(grep_id), timeout=30)
    finally:
        stop_worker(second)
    assert bash["outcome"] == "indeterminate" and bash["attempts"] == 1
    assert not group_has_live_member(pgid)  # killed by the next worker's sweep
    # Run again (twice, when a loaded machine stalled the next worker past its 2 s lease).
    assert grep["outcome"] == "completed" and grep["attempts"] >= 2
    assert "slow.txt:1:aaab" in grep["modelContent"][0]["text"]
    # Nothing settled twice.
    responses = ConversationEvent.objects.filter(type="tool_call_response")
    assert sorted(str(e.tool_call_id) for e in responses) == sorted([str(bash_id), str(grep_id)])
