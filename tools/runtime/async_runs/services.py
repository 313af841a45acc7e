"""Async runs: background shell commands and the notices they leave
(docs/subsystems/async_runs.md).

A ``bash`` call promoted to the background settles ``completed`` at once; its process goes on
as an ``AsyncRun`` watched by the worker that started it. When it ends, one transaction updates
the row and appends an ``async_bash_event`` (the notice, with a compact_diagnostic summary, the
last 4 KiB of each stream, and the capture files as assets, hashed then: a growing file has no
fixed digest before). Notices not yet acknowledged form the conversation's queue. A run whose
watcher stopped renewing its heartbeat (a worker killed with ``kill -9``) becomes ``lost``, with
its notice, at the next sweep.

A notice always follows its call's ``tool_call_response`` in the conversation's sequence: the
finishing transaction, with the conversation row locked, checks that the response exists and
otherwise writes nothing (``CallNotSettled``: the watcher tries again once the call settled,
recovery at a later sweep). A quick command can end before its call's settlement commits; the
order is so a fact of the database, not of timing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import connections
from django.utils import timezone

from conversations.detached import detached
from conversations.models import Asset, Conversation, ConversationEvent
from conversations.selectors import call_response
from conversations.services import publish
from conversations.services.events import event_append
from conversations.services.exits import command_exit_record
from conversations.services.participants import (
    Action,
    RecoveryParticipant,
    delete_participant_register,
    recovery_participant_register,
)
from conversations.services.queue import publish_queue_changed
from conversations.services.runners import RUN_KILL, announce
from conversations.services.settlement import AttemptFile, asset_row
from conversations.sql import vendor_sql
from conversations.storage import (
    CAPTURE_MEDIA_TYPE,
    StorageUnavailable,
    asset_store,
    capture_found,
    capture_snapshot,
    data_dir,
)
from projections.model import model_content
from projections.units import clean_text, utf8_prefix
from tools.models import AsyncRun, ProcessStatus

from ..left_processes.services import left_process_record

logger = logging.getLogger(__name__)

TAIL_BYTES = 4096
# Where the notice of a lost run fixes what its process had captured (it may still be writing
# until a sweep on its host kills it), in the run's folder.
LOST_CAPTURE = "lost"


class CallNotSettled(Exception):
    """The run's call has no response yet: its notice must wait, to follow the response."""


def async_run_start(
    *,
    run_id: UUID,
    conversation_id: Any,
    tool_call_id: Any,
    command: str,
    cwd: str,
    folder: str,
    host: str,
    pid: int,
    pgid: int,
    process_start: int,
) -> AsyncRun:
    """The row of a process going on in the background, watched from ``host``."""
    now = vendor_sql().clock()
    return AsyncRun.objects.create(
        id=run_id,
        conversation_id=conversation_id,
        tool_call_id=tool_call_id,
        command=command,
        cwd=cwd,
        folder=folder,
        status=ProcessStatus.RUNNING,
        pid=pid,
        pgid=pgid,
        process_start=process_start,
        host=host[:255],
        started_at=now,
        heartbeat_at=now,
    )


def async_runs_heartbeat(*, run_ids: Sequence[Any]) -> int:
    """The watcher of these running runs is alive (every third of the lease)."""
    return AsyncRun.objects.filter(pk__in=list(run_ids), status=ProcessStatus.RUNNING).update(
        heartbeat_at=vendor_sql().now()
    )


def _tail(path: Path) -> str:
    """The last ``TAIL_BYTES`` of a capture file as text, starting on a whole character."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - TAIL_BYTES))
            data = handle.read(TAIL_BYTES)
    except FileNotFoundError:
        return ""
    start = 0
    while start < min(len(data), 4) and data[start] & 0xC0 == 0x80:
        start += 1  # a continuation byte: the character began before the window
    return clean_text(utf8_prefix(data[start:], TAIL_BYTES).decode("utf-8", "replace"))


def _capture_files(folder: Path, *, lost: bool) -> list[AttemptFile]:
    """The capture files of a run's folder as they are (a file at the cap may have lost bytes);
    fixed copies for a lost run, whose process may still be writing."""
    found = capture_snapshot(folder, LOST_CAPTURE) if lost else capture_found(folder)
    return [AttemptFile(path, kind, CAPTURE_MEDIA_TYPE, cut) for path, kind, cut in found]


def _call_settled(tool_call_id: Any) -> bool:
    return call_response(tool_call_id).exists()


def async_run_finish(
    *,
    run_id: Any,
    status: str,
    exit_code: int | None,
    signal: str | None,
    timed_out: bool = False,
    timeout_seconds: float | None = None,
    not_stored_bytes: int = 0,
    files: Sequence[AttemptFile] | None = None,
) -> ConversationEvent | None:
    """End a running run: its row, its ``async_bash_event`` and its assets in one transaction,
    then ``queue.changed``. ``files``: its capture files with their truncation as the capture
    knows it (default: the folder's, as they are). None when the run was not running any more
    (another ended it). ``CallNotSettled``, writing nothing, while the run's call has no
    ``tool_call_response``: the notice is to follow it."""
    run = AsyncRun.objects.filter(pk=run_id, status=ProcessStatus.RUNNING).first()
    if run is None:
        return None
    if not _call_settled(run.tool_call_id):  # early, before hashing: checked again below
        raise CallNotSettled(str(run.tool_call_id))
    folder = data_dir() / run.folder
    if files is None:
        files = _capture_files(folder, lost=status == ProcessStatus.LOST)
    assets = [
        asset_row(f.path, f.kind, f.media_type, f.truncated, asset_id=f.asset_id) for f in files
    ]
    try:
        # The captures become the asset store's before the rows that name them commit (a no-op
        # for DATA_DIR), as a settlement's files do (docs/subsystems/settlement.md).
        asset_store().upload(assets)
    except StorageUnavailable as exc:
        logger.warning("the run's notice goes without its captures: %s", exc)
        assets = []
    output = folder / "output.txt"
    process = {
        "exit_code": exit_code,
        "signal": signal,
        "timed_out": timed_out,
        "timeout_seconds": timeout_seconds,
        "not_stored_bytes": not_stored_bytes,
    }
    payload = {
        "asyncRunId": str(run.pk),
        "toolCallId": str(run.tool_call_id),
        "command": run.command,
        "status": status,
        "exitCode": exit_code,
        "signal": signal,
        "modelContent": model_content(
            tool_name="bash",
            profile="process_diagnostics",
            outcome="completed",
            process=process if output.exists() else None,
            text=None if output.exists() else "(no output was captured)",
            path=str(output),
        ),
        "tail": {"stdout": _tail(folder / "stdout.txt"), "stderr": _tail(folder / "stderr.txt")},
        "assetIds": [str(a.id) for a in assets],
        "wakeWhenIdle": True,
    }
    now = timezone.now()
    with publish.atomic():
        # Lock order as every writer: the conversation row first (the event's sequence), then
        # the run. Updating the run first deadlocked with a conversation delete, which locks
        # the conversation and then deletes its runs. Deleted meanwhile: nothing to end.
        if not _conversation_locked(run.conversation_id):
            return None
        # With the conversation locked no response can be appended meanwhile: the notice takes
        # a later sequence than the call's response, or waits.
        if not _call_settled(run.tool_call_id):
            raise CallNotSettled(str(run.tool_call_id))
        ended = AsyncRun.objects.filter(pk=run.pk, status=ProcessStatus.RUNNING).update(
            status=status,
            exit_code=exit_code,
            signal=signal or "",
            finished_at=now,
            heartbeat_at=now,
        )
        if not ended:
            return None
        event = event_append(
            conversation_id=run.conversation_id,
            type=ConversationEvent.Type.ASYNC_BASH_EVENT,
            payload=payload,
        )
        Asset.objects.bulk_create(
            Asset(
                id=a.id,
                conversation_id=run.conversation_id,
                tool_call_id=run.tool_call_id,
                event_id=event.pk,
                kind=a.kind,
                path=a.path,
                size=a.size,
                sha256=a.sha256,
                media_type=a.media_type,
                truncated=a.truncated,
            )
            for a in assets
        )
        AsyncRun.objects.filter(pk=run.pk).update(notice_sequence=event.sequence)
        # How the command ended, for its call's card and the admin (nothing for a lost run).
        command_exit_record(
            tool_call_id=run.tool_call_id,
            conversation_id=run.conversation_id,
            exit_code=exit_code,
            signal=signal,
            timed_out=timed_out,
            timeout_seconds=timeout_seconds,
            async_run_id=run.pk,
        )
        publish_queue_changed(run.conversation_id)
    return event


def _conversation_locked(conversation_id: Any) -> bool:
    """Lock the conversation row (in the caller's transaction); False when it is gone."""
    return bool(
        list(Conversation.objects.select_for_update().filter(pk=conversation_id).values("pk"))
    )


def async_runs_stale() -> list[UUID]:
    """Running runs whose watcher's heartbeat is older than the lease (heartbeats are the
    database's clock): recovery makes each ``lost`` on its own (``async_run_lose``)."""
    cutoff = vendor_sql().now(-timedelta(seconds=settings.TOOLCORE_CLAIM_LEASE))
    stale = AsyncRun.objects.filter(status=ProcessStatus.RUNNING, heartbeat_at__lt=cutoff)
    return list(stale.values_list("id", flat=True))


def async_run_lose(*, run_id: Any) -> AsyncRun | None:
    """A run whose watcher stopped: ``lost``, with its notice (the files as far as they were
    captured, fixed); the run as it was, or None when it had ended meanwhile. A run whose call
    has not settled yet (its worker died before settling it; recovery settles the call once
    its claim expired) waits for a later sweep: its notice follows the call's response."""
    run = AsyncRun.objects.filter(pk=run_id, status=ProcessStatus.RUNNING).first()
    if run is None:
        return None
    try:
        ended = async_run_finish(
            run_id=run.pk, status=ProcessStatus.LOST, exit_code=None, signal=None
        )
    except CallNotSettled:
        return None
    return run if ended else None


def async_run_recover(run_id: Any) -> Action | None:
    """Recovery's step for a run whose watcher stopped (``async_runs_stale``): ``lost``, with
    its notice, and the process group it left recorded for a worker of its host to kill. A
    recovery participant: called by the core with the run's id."""
    run = async_run_lose(run_id=run_id)
    if run is None:
        return None
    left_process_record(
        host=run.host, pgid=run.pgid, process_start=run.process_start, label=f"async run {run.pk}"
    )
    return Action(str(run.tool_call_id), f"async run {run.pk} lost (its watcher stopped)")


def async_runs_lost() -> list[AsyncRun]:
    """Every stale run ``lost``, one after the other."""
    lost = (async_run_lose(run_id=run_id) for run_id in async_runs_stale())
    return [run for run in lost if run is not None]


# How long a kill waits for the run's end: SIGTERM, SIGKILL 5 s later, and the end recorded.
KILL_WAIT_SECONDS = 8.0
KILL_POLL_SECONDS = 0.1


def _run_read(run_id: Any) -> AsyncRun:
    try:
        return AsyncRun.objects.get(pk=run_id)
    finally:
        connections.close_all()  # a detached thread gives its connection back


async def async_run_end_wait(*, run_id: Any, seconds: float | None = None) -> AsyncRun:
    """The run read again until it is no longer ``running``, for at most ``seconds`` (default
    ``KILL_WAIT_SECONDS``): as it is then (still ``running`` when no watcher ended it by then).
    Each read runs on the detached threads, so the wait holds no request thread and no
    connection."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (KILL_WAIT_SECONDS if seconds is None else seconds)
    while True:
        run = await detached(_run_read)(run_id)
        if run.status != ProcessStatus.RUNNING or loop.time() >= deadline:
            return run
        await asyncio.sleep(KILL_POLL_SECONDS)


def async_run_kill(*, run: AsyncRun) -> None:
    """Ask the run's watcher to kill its process group (SIGTERM, SIGKILL after 5 s); it then
    ends ``killed`` with its notice. Nothing for a run that ended."""
    if run.status == ProcessStatus.RUNNING:
        with publish.atomic():
            announce(RUN_KILL, run.pk)


def conversation_runs_kill(conversation_id: Any) -> None:
    """Kill every running run of a conversation being deleted (``async_run_kill`` each: their
    watchers kill their process groups). A delete participant: called by the core with the
    conversation's id."""
    for run in AsyncRun.objects.filter(
        conversation_id=conversation_id, status=ProcessStatus.RUNNING
    ):
        async_run_kill(run=run)


def register() -> None:
    """What the core asks of async runs at its own steps (conversations/services/participants.py):
    recovery makes the runs whose watcher stopped ``lost``; deleting a conversation kills its
    runs. Called at start (``tools/apps.py``)."""
    recovery_participant_register(
        RecoveryParticipant(noun="async run", stale=async_runs_stale, lose=async_run_recover)
    )
    delete_participant_register(conversation_runs_kill)
