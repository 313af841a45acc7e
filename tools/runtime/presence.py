"""Which workers are alive, by host: one ``WorkerHeartbeat`` row a running worker
(``tools/models.py``), renewed every third of the lease, read by ``/metrics``
(``toolcore_workers_alive``), the admin's Workers page, the recovery sweep (a host without a
sign of life for ``TOOLCORE_HOST_GRACE`` seconds gives up its pinned conversations) and the web
processes that ask a host for a log page (``host_pages.py``: a worker's ``channel``).

A worker that stops in order keeps its row, marked stopped at that moment: it no longer
counts as alive, but its stop is its host's last sign of life, so a host whose workers all
restart in order (a deploy) keeps its conversations for the grace, as one whose workers died
does from their last heartbeat.

Written by the database's clock, like leases: a worker whose own clock is wrong still counts as
alive exactly while its heartbeat is fresh.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction

from conversations.services.conversations import conversations_host_release
from conversations.services.participants import (
    Action,
    RecoveryParticipant,
    recovery_participant_register,
)
from conversations.sql import vendor_sql
from conversations.sql.common import pinned_hosts
from tools.models import WorkerHeartbeat

from .launches.services import launches_host_lost

# A dead worker's row (it never said goodbye) shows in the admin this long, then goes.
DEAD_WORKER_KEPT = timedelta(days=1)


def worker_heartbeat(*, name: str, host: str, channel: str | None = None) -> None:
    """The worker ``name`` is alive now: its row renewed, or made (at its start, or after a
    prune or a restore took it) along with dropping rows of workers dead for a day. ``channel``:
    where it answers log pages of its host's disk (``host_pages.py``)."""
    now = vendor_sql().now()
    fields = {
        "heartbeat_at": now,
        "host": host[:255],
        "channel": (channel or "")[:255],
        "stopped_at": None,
    }
    with transaction.atomic():
        if WorkerHeartbeat.objects.filter(name=name).update(**fields):
            return
        WorkerHeartbeat.objects.filter(
            heartbeat_at__lt=vendor_sql().now(-DEAD_WORKER_KEPT)
        ).delete()
        WorkerHeartbeat.objects.create(name=name[:255], started_at=now, **fields)


def worker_gone(*, name: str) -> None:
    """The worker ``name`` stopped in order: no longer counted alive nor asked for log pages,
    its stop the last sign of life of its host (``hosts_gone``)."""
    now = vendor_sql().now()
    WorkerHeartbeat.objects.filter(name=name).update(heartbeat_at=now, stopped_at=now, channel="")


# --- hosts gone with their workspaces (docs/deployment.md, "Pinned workspaces") --------------


def hosts_gone() -> list[str]:
    """The hosts conversations are pinned to that gave no sign of life (a worker's heartbeat,
    or its stop in order) for ``TOOLCORE_HOST_GRACE`` seconds (by the database's clock); never
    this process's own host, which is alive since it asks. None without pinning."""
    if settings.TOOLCORE_SHARED_WORKSPACES:
        return []
    pinned = [host for host in pinned_hosts() if host != settings.TOOLCORE_HOST_NAME]
    if not pinned:
        return []
    grace = timedelta(seconds=settings.TOOLCORE_HOST_GRACE)
    live = set(
        WorkerHeartbeat.objects.filter(
            host__in=pinned, heartbeat_at__gte=vendor_sql().now(-grace)
        ).values_list("host", flat=True)
    )
    return [host for host in pinned if host not in live]


def host_release(host: str) -> Action | None:
    """Recovery's step for a host gone: its conversations released (their next call settles
    failed naming the host), and the launches that waited for it ended ``lost``."""
    released = conversations_host_release(host=host)
    lost = launches_host_lost(host=host)
    if not released and not lost:
        return None
    return Action(
        f"host {host}",
        f"gone for over {settings.TOOLCORE_HOST_GRACE} s: {released} conversation(s) released, "
        f"{lost} waiting launch(es) lost",
    )


def register() -> None:
    """Recovery releases the hosts gone, after the async runs and the launches (whose rows
    the dead workers left are lost first). Called at start (``tools/apps.py``)."""
    recovery_participant_register(
        RecoveryParticipant(noun="host", stale=hosts_gone, lose=host_release)
    )
