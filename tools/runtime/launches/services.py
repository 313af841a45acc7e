"""Launches: processes a user starts from the workbench (a dev server, a watcher), owned by the
user and not by a conversation (docs/subsystems/launches.md).

A launch is created ``running`` with no host: a worker takes it (a compare-and-set on the empty
host), starts its process and watches it, renewing a heartbeat. Stopping announces to whichever
worker watches it; one nobody took yet is ended at once. Every change is published on the
owner's workbench group as ``launch.changed`` (its end with a compact_diagnostic summary of its
output); a launch whose watcher stopped renewing its heartbeat becomes ``lost``.
"""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Q
from django.utils import timezone

from conversations.errors import Forbidden, ValidationFailed, found
from conversations.grants import run_commands_require
from conversations.models import Conversation
from conversations.services import publish
from conversations.services.message_limits import commands_read
from conversations.services.participants import (
    Action,
    PurgeParticipant,
    RecoveryParticipant,
    purge_participant_register,
    recovery_participant_register,
)
from conversations.services.runners import LAUNCH, LAUNCH_STOP, announce
from conversations.shapes import iso
from conversations.sql import vendor_sql
from conversations.storage import data_dir
from projections.model import model_content
from projections.units import clean_text
from tools.models import Launch, ProcessStatus
from tools.permissions import denial_text, evaluate
from tools.workspaces import WorkspaceRefused, owner_workspace_root, workspace_checked

from ..left_processes.services import left_process_record


def workbench_group(owner_id: Any) -> str:
    return f"workbench.{owner_id}"


def launch_folder(launch_id: UUID | str) -> Path:
    """``DATA_DIR/launches/<id>/``: its stdout.txt, stderr.txt and output.txt."""
    return data_dir() / "launches" / str(launch_id)


def launch_wire(launch: Launch, *, summary: str | None = None) -> dict[str, Any]:
    wire = {
        "id": str(launch.id),
        "name": launch.name,
        "command": launch.command,
        "cwd": launch.cwd,
        "status": launch.status,
        "exitCode": launch.exit_code,
        "signal": launch.signal or None,
        "pid": launch.pid,
        "startedAt": iso(launch.started_at),
        "finishedAt": iso(launch.finished_at),
    }
    if summary is not None:
        wire["summary"] = summary
    return wire


def publish_launch_changed(launch: Launch, *, summary: str | None = None) -> None:
    publish.later(
        workbench_group(launch.owner_id),
        {"type": "launch.changed", "launch": launch_wire(launch, summary=summary)},
    )


def launch_cwd(owner_id: Any, cwd: str) -> Path:
    """The launch's directory: ``cwd`` below the owner's workspace root (the root itself when
    empty), checked like a workspace (``tools/workspaces.py``: no symlink on the way), when the
    launch is made and again when it starts; 422 otherwise."""
    if "\x00" in cwd or Path(cwd).is_absolute():
        raise ValidationFailed(
            "cwd must be a directory relative to your workspace root.", field="cwd"
        )
    try:
        return workspace_checked(owner_workspace_root(owner_id) / cwd, owner_id=owner_id)
    except WorkspaceRefused:
        raise ValidationFailed("cwd resolves outside your workspace root.", field="cwd") from None


def launch_create(*, owner: AbstractBaseUser, name: str, command: str, cwd: str = "") -> Launch:
    """A new launch, waiting for a worker to start it; needs ``tools.run_commands``."""
    run_commands_require(user=owner, doing="Starting a launch")
    name, command, cwd = clean_text(name), clean_text(command), clean_text(cwd)
    launch_cwd(owner.pk, cwd)
    commands_read(owner_id=owner.pk, calls=[("bash", {"command": command})])  # bounded reading
    # Decided like a command its owner types: the global rules of bash, where only a deny
    # counts (an ask is the owner's own say-so); nothing is written when it is denied.
    decision = evaluate(None, "bash", {"command": command})
    if decision.decision == "deny":
        raise Forbidden(f"The launch's command is denied. {denial_text(decision)}")
    with publish.atomic():
        launch = Launch.objects.create(
            owner=owner,
            name=name,
            command=command,
            cwd=cwd,
            workspace_host=_workspace_host(owner.pk, cwd),
            status=ProcessStatus.RUNNING,
            started_at=timezone.now(),
        )
        announce(LAUNCH, launch.pk)
        publish_launch_changed(launch)
    return launch


def _workspace_host(owner_id: Any, cwd: str) -> str:
    """The host holding ``cwd``: that of the owner's conversation whose workspace holds it,
    when pinned; "" (any host) otherwise, and always with shared workspaces."""
    if settings.TOOLCORE_SHARED_WORKSPACES or not cwd:
        return ""
    parts = Path(cwd).parts
    holders = [str(Path(*parts[: i + 1])) for i in range(len(parts))]
    pinned = (
        Conversation.objects.filter(owner_id=owner_id, workspace__in=holders)
        .exclude(host="")
        .values_list("host", flat=True)
        .first()
    )
    return pinned or ""


def _for_host(host: str) -> Q:
    """The launches a worker on ``host`` may take: those of any host, and of its own."""
    return Q(workspace_host="") | Q(workspace_host=host)


def launch_take(*, launch_id: Any, host: str) -> Launch | None:
    """A worker on ``host`` takes a launch nobody took yet (compare-and-set), when its
    ``cwd`` is on this host or any; None if taken or another host's."""
    with publish.atomic():
        taken = (
            Launch.objects.filter(pk=launch_id, status=ProcessStatus.RUNNING, host="")
            .filter(_for_host(host))
            .update(host=host[:255], heartbeat_at=vendor_sql().now())
        )
        if not taken:
            return None
        return Launch.objects.get(pk=launch_id)


def launches_waiting(host: str = "") -> list[UUID]:
    """Launches nobody took yet that a worker on ``host`` may take (a worker looks at start
    and on its slow poll)."""
    waiting = Launch.objects.filter(status=ProcessStatus.RUNNING, host="").filter(_for_host(host))
    return list(waiting.values_list("id", flat=True))


def launches_host_lost(*, host: str) -> int:
    """The launches that waited for ``host``, gone with its workspaces: ``lost`` (recovery,
    ``tools/runtime/presence.py``). How many."""
    waiting = Launch.objects.filter(status=ProcessStatus.RUNNING, host="", workspace_host=host)
    ended = (
        launch_finish(
            launch_id=launch_id,
            status=ProcessStatus.LOST,
            exit_code=None,
            signal=None,
            untaken=True,
        )
        for launch_id in waiting.values_list("id", flat=True)
    )
    return sum(1 for launch in ended if launch is not None)


def launch_started(*, launch_id: Any, pid: int, pgid: int, process_start: int) -> None:
    """Its process runs: record the group (for a sweep on the same host) and say so."""
    with publish.atomic():
        now = vendor_sql().clock()
        Launch.objects.filter(pk=launch_id).update(
            pid=pid, pgid=pgid, process_start=process_start, started_at=now, heartbeat_at=now
        )
        publish_launch_changed(Launch.objects.get(pk=launch_id))


def launches_heartbeat(*, launch_ids: list[Any]) -> int:
    return Launch.objects.filter(pk__in=launch_ids, status=ProcessStatus.RUNNING).update(
        heartbeat_at=vendor_sql().now()
    )


def launch_finish(
    *,
    launch_id: Any,
    status: str,
    exit_code: int | None,
    signal: str | None,
    untaken: bool = False,
) -> Launch | None:
    """End a running launch and publish its end with a compact_diagnostic summary of its
    output; None when it had ended already (or, ``untaken``, when a worker has taken it)."""
    now = timezone.now()
    running = Launch.objects.filter(pk=launch_id, status=ProcessStatus.RUNNING)
    if untaken:
        running = running.filter(host="")
    with publish.atomic():
        ended = running.update(
            status=status, exit_code=exit_code, signal=signal or "", finished_at=now
        )
        if not ended:
            return None
        launch = Launch.objects.get(pk=launch_id)
        output = launch_folder(launch.pk) / "output.txt"
        process = {"exit_code": exit_code, "signal": signal}
        summary = model_content(
            tool_name="launch",
            profile="process_diagnostics",
            outcome="completed",
            process=process if output.exists() else None,
            text=None if output.exists() else "(no output was captured)",
            path=str(output),
        )[0]["text"]
        publish_launch_changed(launch, summary=summary)
    return launch


def launch_stop(*, owner: AbstractBaseUser, launch_id: Any) -> Launch:
    """Stop a launch: its watcher kills its process group; one no worker took yet ends at
    once. Stopping an ended launch changes nothing."""
    launch = launch_for(owner, launch_id)
    if launch.status != ProcessStatus.RUNNING:
        return launch
    # Not taken yet: end it here, unless a worker takes it at this very moment (then it is
    # that worker's to stop).
    ended = launch_finish(
        launch_id=launch.pk, status=ProcessStatus.KILLED, exit_code=None, signal=None, untaken=True
    )
    if ended is not None:
        return ended
    with publish.atomic():
        announce(LAUNCH_STOP, launch.pk)
    return Launch.objects.get(pk=launch.pk)


def launches_stale() -> list[UUID]:
    """Running launches whose watcher's heartbeat is older than the lease (by the database's
    clock, as heartbeats are written): recovery ends each ``lost`` on its own."""
    cutoff = vendor_sql().now(-timedelta(seconds=settings.TOOLCORE_CLAIM_LEASE))
    stale = Launch.objects.filter(status=ProcessStatus.RUNNING, heartbeat_at__lt=cutoff)
    return list(stale.values_list("id", flat=True))


def launch_lose(*, launch_id: Any) -> Launch | None:
    """A launch whose watcher stopped: ``lost``; None when it had ended meanwhile."""
    return launch_finish(
        launch_id=launch_id, status=ProcessStatus.LOST, exit_code=None, signal=None
    )


def launch_recover(launch_id: Any) -> Action | None:
    """Recovery's step for a launch whose watcher stopped (``launches_stale``): ``lost``, and
    the process group it left recorded for a worker of its host to kill."""
    launch = launch_lose(launch_id=launch_id)
    if launch is None:
        return None
    left_process_record(
        host=launch.host,
        pgid=launch.pgid,
        process_start=launch.process_start,
        label=f"launch {launch.pk}",
    )
    return Action("-", f"launch {launch.pk} lost (its watcher stopped)")


def launches_lost() -> list[Launch]:
    """Every stale launch ``lost``, one after the other."""
    lost = (launch_lose(launch_id=launch_id) for launch_id in launches_stale())
    return [launch for launch in lost if launch is not None]


def launch_for(owner: AbstractBaseUser, launch_id: Any) -> Launch:
    """The owner's launch; another owner's answers 404 like a missing one."""
    return found(Launch.objects.filter(owner_id=owner.pk), launch_id, "Launch")


def launches_purge(*, older_than_days: int) -> int:
    """Delete ended launches that finished before the cutoff, with their log folders; each is
    published as ``launch.removed`` to its owner's workbench. Running ones are kept."""
    cutoff = timezone.now() - timedelta(days=older_than_days)
    old = list(
        Launch.objects.exclude(status=ProcessStatus.RUNNING)
        .filter(finished_at__lt=cutoff)
        .values_list("pk", "owner_id")
    )
    count = 0
    for launch_id, owner_id in old:
        with publish.atomic():
            if not Launch.objects.filter(pk=launch_id).delete()[0]:
                continue  # gone meanwhile
            count += 1
            publish.later(
                workbench_group(owner_id), {"type": "launch.removed", "id": str(launch_id)}
            )
        shutil.rmtree(launch_folder(launch_id), ignore_errors=True)
    return count


def register() -> None:
    """What the core asks of launches at its own steps (conversations/services/participants.py):
    recovery makes the launches whose watcher stopped ``lost``; ``manage.py purge`` deletes the
    old ended ones. Called at start (``tools/apps.py``), after the async runs: recovery sweeps
    the runs first."""
    recovery_participant_register(
        RecoveryParticipant(noun="launch", stale=launches_stale, lose=launch_recover)
    )
    purge_participant_register(PurgeParticipant(noun="ended launch(es)", purge=launches_purge))
