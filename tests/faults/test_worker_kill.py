"""``kill -9`` of a ``runworker_tools`` process while its calls run and while it settles them;
another worker recovers: every call settled exactly once, nothing lost, the invariants hold.
What a stopped command captured is evidence linked to its ``indeterminate`` response, not an
orphan. Real processes sharing the test database (SQLite or PostgreSQL) and ``DATA_DIR``."""

from __future__ import annotations

import signal

import pytest

from conversations.models import Asset, ConversationEvent, ExecutionClaim
from conversations.orphans import orphan_folders
from conversations.storage import absolute_from_data, data_dir, sha256_file
from tests.conversations.helpers import assistant_calls
from tests.tools.worker_helpers import approve, stop_worker, wait_for, worker_process
from tools.runtime.processes import group_has_live_member

from .helpers import assert_intact, bash_conversation, settled_once

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

LEASE_SECONDS = 3  # renewed every second: a loaded machine does not stall a worker past it
UNSANDBOXED = {"TOOLCORE_SANDBOX": "off"}


FILES = {f"f{n}.txt": f"file {n}\n" * 50 for n in range(20)}  # the workspace's


def _kill(process) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait()


def test_kill_9_while_calls_run(user):
    conversation, turn_id = bash_conversation(user, FILES)
    sleeps = assistant_calls(
        conversation,
        turn_id,
        *[("bash", {"command": f"echo started {n}; sleep 60"}) for n in range(3)],
    ).call_ids
    approve(user, sleeps)
    # Unsandboxed, so the commands outlive their worker and the next one's sweep must kill
    # them (in the sandbox they end with it: tests/tools/test_worker_crash.py).
    dying = worker_process("w-dies", lease_seconds=LEASE_SECONDS, env=UNSANDBOXED)
    try:
        wait_for(lambda: ExecutionClaim.objects.filter(pgid__isnull=False).count() == 3, 30)
    except AssertionError:
        raise AssertionError(stop_worker(dying)[-3000:]) from None
    groups = list(ExecutionClaim.objects.values_list("pgid", flat=True))
    _kill(dying)
    assert all(group_has_live_member(pgid) for pgid in groups)  # the commands go on
    # Calls made while no worker lives wait; the next worker runs them.
    later = assistant_calls(
        conversation, turn_id, ("read", {"path": "f1.txt"}), ("bash", {"command": "echo after"})
    ).call_ids
    calls = [*sleeps, *later]
    successor = worker_process("w-next", lease_seconds=LEASE_SECONDS)
    try:
        wait_for(lambda: ConversationEvent.objects.filter(tool_call_id__in=calls).count() == 5, 30)
        # Its sweep kills the groups the dead worker left (SIGTERM, SIGKILL 5 s later).
        wait_for(lambda: not any(group_has_live_member(pgid) for pgid in groups), 30)
    finally:
        stop_worker(successor)
    payloads = settled_once(calls)
    assert [payloads[str(c)]["outcome"] for c in sleeps] == ["indeterminate"] * 3
    assert [payloads[str(c)]["outcome"] for c in later] == ["completed"] * 2
    for n, call_id in enumerate(sleeps):
        _assert_capture_linked(call_id, f"started {n}\n".encode())
    # Nothing a crash left is an orphan once recovery settled its call: no purge step.
    assert not list(orphan_folders())
    assert_intact(purge=False)


def _assert_capture_linked(call_id, output: bytes) -> None:
    """The lost attempt's captures are assets of the response, as found (fixed copies), with
    their sizes and digests; the model text says how much output was captured."""
    response = ConversationEvent.objects.get(tool_call_id=call_id)
    assets = {a.kind: a for a in Asset.objects.filter(event=response)}
    assert set(assets) == {"stdout", "stderr", "output"}
    for asset in assets.values():
        path = absolute_from_data(asset.path)
        assert "/stopped/" in asset.path
        assert path.stat().st_size == asset.size and sha256_file(path) == asset.sha256
    assert absolute_from_data(assets["output"].path).read_bytes() == output
    text = response.payload["modelContent"][0]["text"]
    where = data_dir() / assets["output"].path
    assert f"{len(output)} bytes of output were captured before the stop: {where}" in text


def test_kill_9_while_settling(user):
    """A worker settling a stream of quick calls is killed as it settles them (killed right
    after one settlement committed, it is in the middle of the next ones): the calls it had
    not settled are recovered, read-only ones run again, commands settle indeterminate."""
    conversation, turn_id = bash_conversation(user, FILES)
    reads = [("read", {"path": f"f{n}.txt"}) for n in range(20)]
    commands = [("bash", {"command": f"echo {n}"}) for n in range(8)]
    calls = assistant_calls(conversation, turn_id, *reads, *commands).call_ids
    responses = ConversationEvent.objects.filter(tool_call_id__in=calls)
    # Reads may run more than three times when a loaded machine stalls a worker past its
    # lease: here they are to complete, not to give up.
    patient = {"TOOLCORE_MAX_ATTEMPTS": "10"}
    dying = worker_process("w-dies", lease_seconds=LEASE_SECONDS, concurrency=8, env=patient)
    try:
        wait_for(lambda: responses.count() >= 4, timeout=30, every=0.005)
    except AssertionError:
        raise AssertionError(stop_worker(dying)[-3000:]) from None
    _kill(dying)
    settled_before = responses.count()
    successor = worker_process("w-next", lease_seconds=LEASE_SECONDS, env=patient)
    try:
        # A hang bound: under a CPU hog the 28 calls, their recovery after the 3 s lease and the
        # reads run again took more than 40 s (make test-stress).
        wait_for(lambda: responses.count() == len(calls), timeout=120)
    finally:
        stop_worker(successor)
    payloads = settled_once(calls)
    outcomes = {p["outcome"] for p in payloads.values()}
    assert outcomes <= {"completed", "indeterminate"}, outcomes
    for call_id in calls[:20]:  # reads are replay-safe: run again when their claim expired
        assert payloads[str(call_id)]["outcome"] == "completed"
    assert settled_before < len(calls)  # the kill did interrupt the stream
    # Only the attempts that did not settle are orphans (a read run again leaves its first
    # attempt's folder); a command settled indeterminate links what it captured.
    stopped = {str(c) for c in calls[20:] if payloads[str(c)]["outcome"] == "indeterminate"}
    assert not [o for o in orphan_folders() if o.path.parent.name in stopped]
    assert_intact()
