"""``/healthz`` (the process answers) and ``/readyz`` (database, migrations, channel layer, the
workers alive; and whether commands run in the sandbox, ``tools/sandbox.py``, and the disk of
``DATA_DIR``)."""

from __future__ import annotations

import asyncio
import shutil

from asgiref.sync import async_to_sync
from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from tools.sandbox import sandbox_report

from ..selectors import workers_alive_by_host
from ..services.publish import live_layer_alias
from .middleware import SyncAndAsyncMiddleware
from .responses import json_response

HEALTHZ_PATH = "/healthz"
# Free bytes of DATA_DIR's disk under which /readyz calls it full.
DISK_FULL_BYTES = 16 * 1024 * 1024


@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    return json_response({"status": "ok"})


class HealthzMiddleware(SyncAndAsyncMiddleware):
    """Answers ``/healthz`` whatever the ``Host`` header; every other URL keeps host validation.

    A load balancer probes by IP address, which ``ALLOWED_HOSTS`` does not list, so this sits
    first in ``MIDDLEWARE``, before anything calls ``request.get_host()``. The answer says
    nothing about the site, so it needs no host check.
    """

    def before(self, request: HttpRequest) -> HttpResponse | None:
        return healthz(request) if request.path_info == HEALTHZ_PATH else None


async def _layer_round_trip() -> None:
    """A message to a new channel and back, through each configured layer (the default one,
    and the live one of conversation events when it is another)."""
    for alias in dict.fromkeys((DEFAULT_CHANNEL_LAYER, live_layer_alias())):
        layer = get_channel_layer(alias)
        if layer is None:
            raise RuntimeError("no channel layer configured")
        channel = await layer.new_channel()
        await layer.send(channel, {"type": "ready.check"})
        message = await asyncio.wait_for(layer.receive(channel), timeout=2)
        if message.get("type") != "ready.check":
            raise RuntimeError("channel layer returned another message")


@require_GET
def readyz(request: HttpRequest) -> HttpResponse:
    checks: dict[str, str] = {}
    try:
        connection = connections[DEFAULT_DB_ALIAS]
        connection.ensure_connection()
        checks["database"] = "ok"
        plan = MigrationExecutor(connection).migration_plan(
            MigrationExecutor(connection).loader.graph.leaf_nodes()
        )
        checks["migrations"] = "ok" if not plan else f"{len(plan)} unapplied"
    except Exception as exc:  # noqa: BLE001 - readiness reports any failure
        checks.setdefault("database", f"error: {exc.__class__.__name__}")
        checks.setdefault("migrations", "unknown")
    try:
        async_to_sync(_layer_round_trip)()
        checks["channelLayer"] = "ok"
    except Exception as exc:  # noqa: BLE001
        checks["channelLayer"] = f"error: {exc.__class__.__name__}"
    workers = _workers(checks)
    ready = all(value == "ok" for value in checks.values())
    # The command sandbox is reported, not checked: commands run only where a worker started,
    # and a worker without its sandbox refuses to start unless DEBUG is on. The disk is
    # reported too, not checked: with DATA_DIR full, reads that write nothing keep working.
    body = {"status": "ready" if ready else "not_ready", "checks": checks}
    body["workers"] = workers
    body["sandbox"] = sandbox_report()
    body["disk"] = disk_report()
    return json_response(body, 200 if ready else 503)


def _workers(checks: dict[str, str]) -> dict[str, object]:
    """``{alive, byHost}``, the workers whose heartbeat is younger than the lease; the check
    ``workers`` fails when workers are expected (this process starts some, or some ran in the
    last day: their rows) and none is alive."""
    if checks.get("database") != "ok":
        return {"alive": None, "byHost": {}}
    try:
        by_host = workers_alive_by_host()
    except Exception as exc:  # noqa: BLE001 - readiness reports any failure
        checks["workers"] = f"error: {exc.__class__.__name__}"
        return {"alive": None, "byHost": {}}
    alive = sum(by_host.values())
    expected = settings.TOOLCORE_WORKERS > 0 or bool(by_host)
    checks["workers"] = "ok" if alive or not expected else "none alive"
    return {"alive": alive, "byHost": by_host}


def disk_report() -> dict[str, object]:
    """``DATA_DIR``'s disk: free and total bytes, and ``full`` below ``DISK_FULL_BYTES`` free
    (a settlement writes its result files there; below it, calls settle with the disk-full
    reason)."""
    try:
        usage = shutil.disk_usage(settings.DATA_DIR)
    except OSError as exc:
        return {"freeBytes": None, "totalBytes": None, "full": None, "error": exc.strerror}
    return {
        "freeBytes": usage.free,
        "totalBytes": usage.total,
        "full": usage.free < DISK_FULL_BYTES,
    }
