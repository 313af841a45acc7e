"""Async runs: the notice of a run that ended, its assets, the queue, and runs lost with their
watcher."""

from __future__ import annotations

import hashlib
import threading
import uuid
from datetime import timedelta

import psycopg
import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from conversations.models import Asset, Conversation, ConversationEvent, ExecutionClaim
from conversations.selectors import turn_results
from conversations.services.claims import claim_acquire
from conversations.services.queue import queue_ack
from conversations.services.recovery import recover_all
from conversations.services.settlement import ClaimGuard, call_settle
from conversations.storage import absolute_from_data, attempt_relative, data_dir, sha256_file
from tests.storage.helpers import stored_bytes
from tests.tools.worker_helpers import database_url
from tests.waits import wait_for
from tools.models import AsyncRun, PermissionRule
from tools.runtime.async_runs.services import (
    TAIL_BYTES,
    CallNotSettled,
    async_run_finish,
    async_run_start,
    async_runs_heartbeat,
)

from .helpers import assistant_calls, expire_claim, new_conversation, open_turn

pytestmark = pytest.mark.django_db


def _run(
    user,
    *,
    stdout: bytes = b"",
    stderr: bytes = b"",
    output: bytes | None = None,
    settled: bool = True,
):
    """A background run of a ``bash`` call, its capture files written as a capture leaves
    them; the call settled as a promotion settles it (``settled``), or still running."""
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    PermissionRule.objects.create(tool_name="bash", pattern="", decision="allow")
    (call_id,) = assistant_calls(conversation, turn_id, ("bash", {"command": "make"})).call_ids
    claim = claim_acquire(call_id=call_id, worker="w")
    folder = attempt_relative(conversation.pk, call_id, claim.generation)
    (data_dir() / folder).mkdir(parents=True)
    for name, data in (
        ("stdout.txt", stdout),
        ("stderr.txt", stderr),
        ("output.txt", stdout + stderr if output is None else output),
    ):
        (data_dir() / folder / name).write_bytes(data)
    run = async_run_start(
        run_id=uuid.uuid4(),
        conversation_id=conversation.pk,
        tool_call_id=call_id,
        command="make",
        cwd="/ws",
        folder=folder,
        host="h1",
        pid=4242,
        pgid=4242,
        process_start=123,
    )
    if settled:
        call_settle(
            call_id=call_id,
            outcome="completed",
            guard=ClaimGuard(claim.token, claim.generation),
            text=f"Running in background as async run {run.pk}.",
            async_run_id=run.pk,
        )
    return conversation, turn_id, run


def test_a_finished_run_leaves_one_notice_with_its_assets_and_tails(user):
    out = b"compiling\n" * 1000 + b"error: it broke\n"
    conversation, turn_id, run = _run(user, stdout=out, stderr="é".encode() * 3000)
    event = async_run_finish(run_id=run.pk, status="exited", exit_code=2, signal=None)
    assert event.type == "async_bash_event" and event.tool_call_id is None
    payload = event.payload
    assert (payload["asyncRunId"], payload["toolCallId"]) == (str(run.pk), str(run.tool_call_id))
    assert (payload["status"], payload["exitCode"], payload["signal"]) == ("exited", 2, None)
    assert payload["wakeWhenIdle"] is True and payload["command"] == "make"
    text = payload["modelContent"][0]["text"]
    assert "Process exit code 2." in text and "error: it broke" in text
    tail = payload["tail"]
    assert tail["stdout"].endswith("error: it broke\n")
    assert len(tail["stdout"].encode()) <= TAIL_BYTES
    # The stderr tail starts on a whole character: 4096 bytes of 2-byte é are 2048 of them.
    assert tail["stderr"] == "é" * 2048
    assets = Asset.objects.filter(event=event).order_by("kind")
    assert [a.kind for a in assets] == ["output", "stderr", "stdout"]
    stdout_asset = assets.get(kind="stdout")
    assert stdout_asset.sha256 == hashlib.sha256(out).hexdigest()
    assert set(payload["assetIds"]) == {str(a.id) for a in assets}
    run.refresh_from_db()
    assert (run.status, run.exit_code, run.notice_sequence) == ("exited", 2, event.sequence)
    assert run.finished_at is not None
    # Ending it again changes nothing.
    assert (
        async_run_finish(run_id=run.pk, status="killed", exit_code=None, signal="SIGKILL") is None
    )
    assert ConversationEvent.objects.filter(type="async_bash_event").count() == 1


def test_the_queue_holds_the_notice_until_acknowledged(user):
    conversation, turn_id, run = _run(user, stdout=b"done\n")
    event = async_run_finish(run_id=run.pk, status="exited", exit_code=0, signal=None)
    queue = turn_results(conversation.pk, turn_id)["queue"]
    assert [n["sequence"] for n in queue] == [event.sequence]
    assert queue_ack(conversation_id=conversation.pk, up_to=event.sequence - 1)["queue"] == queue
    acked = queue_ack(conversation_id=conversation.pk, up_to=event.sequence)
    assert (acked["acknowledged"], acked["queue"]) == (1, [])
    assert queue_ack(conversation_id=conversation.pk, up_to=event.sequence)["acknowledged"] == 0


def test_a_run_whose_watcher_stopped_is_lost_with_its_notice(user, settings):
    settings.TOOLCORE_CLAIM_LEASE = 30
    conversation, turn_id, run = _run(user, stdout=b"half of it\n")
    assert async_runs_heartbeat(run_ids=[run.pk]) == 1
    assert not [a for a in recover_all() if "async run" in a.action]  # the watcher is alive
    AsyncRun.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=31))
    actions = [str(a) for a in recover_all() if "async run" in a.action]
    assert actions == [f"{run.tool_call_id}: async run {run.pk} lost (its watcher stopped)"]
    run.refresh_from_db()
    assert run.status == "lost" and run.notice_sequence is not None
    notice = ConversationEvent.objects.get(type="async_bash_event")
    assert notice.payload["status"] == "lost" and notice.payload["exitCode"] is None
    assert Asset.objects.filter(event=notice).count() == 3  # what was captured, as it is


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="row locks of concurrent transactions (PostgreSQL)"
)
def test_a_finishing_run_takes_the_conversation_lock_before_its_row(user):
    """The lock order of every writer: conversation, then the run. A conversation delete holds
    the conversation and then deletes its runs; a finish that locked its run first deadlocked
    with it (found by CI: test_deleting_a_conversation_kills_its_background_runs)."""
    conversation, _, run = _run(user, stdout=b"done\n")
    finished: list = []
    with transaction.atomic():
        # The delete's first step: the conversation row, held.
        list(Conversation.objects.select_for_update().filter(pk=conversation.pk).values("pk"))
        finisher = threading.Thread(
            target=_finish_in_own_connection, args=(run.pk, finished), daemon=True
        )
        finisher.start()
        # The finisher is now waiting for a lock this transaction holds (seen from a connection
        # of its own: pg_stat_activity is a snapshot per transaction).
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            (holder,) = cursor.fetchone()
        wait_for(lambda: _waits_for(holder), what="the finisher waiting for a lock")
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '3s'")
            # The delete's second step: the runs. It would wait on a run row the finisher
            # locked first (and time out here); the finisher waits for the conversation instead.
            cursor.execute(
                "DELETE FROM tools_asyncrun WHERE conversation_id = %s", [conversation.pk]
            )
        Conversation.objects.filter(pk=conversation.pk).delete()
    finisher.join(timeout=30)
    assert finished == [None]  # it found the conversation gone: nothing to end, no error


def _waits_for(holder: int) -> bool:
    """Whether a backend of the test database waits for a lock that backend ``holder`` holds."""
    with psycopg.connect(database_url(), autocommit=True) as probe:
        return (
            probe.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND %s = ANY(pg_blocking_pids(pid))",
                [holder],
            ).fetchone()[0]
            > 0
        )


def _finish_in_own_connection(run_id, finished: list) -> None:
    try:
        finished.append(
            async_run_finish(run_id=run_id, status="completed", exit_code=0, signal=None)
        )
    finally:
        connections.close_all()


def test_a_notice_waits_for_its_calls_response_and_follows_it(user):
    """A quick command can end before its call's settlement commits: the notice is not
    written before the response (it would take a lower sequence), but once the response is
    there, after it."""
    conversation, _, run = _run(user, stdout=b"done\n", settled=False)
    before = Conversation.objects.get(pk=conversation.pk).last_sequence
    with pytest.raises(CallNotSettled):
        async_run_finish(run_id=run.pk, status="exited", exit_code=0, signal=None)
    run.refresh_from_db()
    assert run.status == "running" and run.notice_sequence is None
    assert Conversation.objects.get(pk=conversation.pk).last_sequence == before
    assert not Asset.objects.filter(tool_call_id=run.tool_call_id).exists()
    claim = ExecutionClaim.objects.get(call_id=run.tool_call_id)
    response = call_settle(
        call_id=run.tool_call_id,
        outcome="completed",
        guard=ClaimGuard(claim.token, claim.generation),
        text=f"Running in background as async run {run.pk}.",
        async_run_id=run.pk,
    )
    notice = async_run_finish(run_id=run.pk, status="exited", exit_code=0, signal=None)
    assert response.sequence < notice.sequence


def test_a_lost_run_waits_for_its_call_and_fixes_what_it_captured(user, settings):
    """The worker died before settling the call it promoted: recovery settles the call first
    (once its claim expired), then the run is lost with its notice, after the response. The
    notice's assets are fixed copies: the orphan process may go on writing until a sweep on
    its host kills it, and the assets still verify."""
    settings.TOOLCORE_CLAIM_LEASE = 30
    conversation, _, run = _run(user, stdout=b"half of it\n", settled=False)
    AsyncRun.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=31))
    assert not [a for a in recover_all() if "async run" in a.action]  # its call is still held
    run.refresh_from_db()
    assert run.status == "running"
    expire_claim(run.tool_call_id)
    actions = [str(a) for a in recover_all()]
    assert actions[0] == f"{run.tool_call_id}: settled indeterminate (claim expired)"
    assert f"{run.tool_call_id}: async run {run.pk} lost (its watcher stopped)" in actions
    response = ConversationEvent.objects.get(tool_call_id=run.tool_call_id)
    notice = ConversationEvent.objects.get(type="async_bash_event")
    assert response.sequence < notice.sequence
    with (data_dir() / run.folder / "output.txt").open("ab") as still_running:
        still_running.write(b"written later\n")
    for event, folder in ((response, "stopped"), (notice, "lost")):
        assets = Asset.objects.filter(event=event)
        assert {a.kind for a in assets} == {"stdout", "stderr", "output"}
        for asset in assets:
            assert f"/{folder}/" in asset.path
            assert sha256_file(absolute_from_data(asset.path)) == asset.sha256
            # The asset of record: the file, or the object uploaded before the notice's commit.
            assert hashlib.sha256(stored_bytes(asset)).hexdigest() == asset.sha256
    text = response.payload["modelContent"][0]["text"]
    output = Asset.objects.get(event=response, kind="output")
    assert f"11 bytes of output were captured before the stop: {data_dir() / output.path}" in text
