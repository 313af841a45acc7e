"""Process groups dead holders left running, to be killed by a worker on their host
(docs/subsystems/claims_and_recovery.md, "Orphan process groups")."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from conversations.services.participants import process_left_register
from tools.models import LeftProcess


def left_process_record(*, host: str, pgid: Any, process_start: Any, label: str) -> None:
    """Remember a group left on ``host`` (nothing when its identity is unknown)."""
    if host and pgid is not None and process_start is not None:
        LeftProcess.objects.create(
            host=host[:255], pgid=pgid, process_start=process_start, label=label[:300]
        )


def left_processes_of(*, host: str) -> list[LeftProcess]:
    return list(LeftProcess.objects.filter(host=host))


def left_processes_forget(*, ids: Iterable[Any]) -> None:
    LeftProcess.objects.filter(pk__in=list(ids)).delete()


def register() -> None:
    """Recovery records here the groups an expired claim left (conversations/services/
    participants.py); the async runs and launches it makes ``lost`` record theirs directly.
    Called at start (``tools/apps.py``)."""
    process_left_register(left_process_record)
