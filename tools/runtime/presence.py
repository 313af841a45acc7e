"""Which workers are alive, by host: one ``WorkerHeartbeat`` row a running worker
(``tools/models.py``), renewed every third of the lease, read by ``/metrics``
(``toolcore_workers_alive``) and the admin's Workers page.

Written by the database's clock, like leases: a worker whose own clock is wrong still counts as
alive exactly while its heartbeat is fresh.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction

from conversations.sql import vendor_sql
from tools.models import WorkerHeartbeat

# A dead worker's row (it never said goodbye) shows in the admin this long, then goes.
DEAD_WORKER_KEPT = timedelta(days=1)


def worker_heartbeat(*, name: str, host: str) -> None:
    """The worker ``name`` is alive now: its row renewed, or made (at its start, or after a
    prune or a restore took it) along with dropping rows of workers dead for a day."""
    now = vendor_sql().now()
    with transaction.atomic():
        if WorkerHeartbeat.objects.filter(name=name).update(heartbeat_at=now, host=host[:255]):
            return
        WorkerHeartbeat.objects.filter(
            heartbeat_at__lt=vendor_sql().now(-DEAD_WORKER_KEPT)
        ).delete()
        WorkerHeartbeat.objects.create(
            name=name[:255], host=host[:255], started_at=now, heartbeat_at=now
        )


def worker_gone(*, name: str) -> None:
    """The worker ``name`` stopped in order: no longer counted."""
    WorkerHeartbeat.objects.filter(name=name).delete()
