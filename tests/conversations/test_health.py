"""``/healthz`` answers whatever the ``Host`` header; every other URL keeps host validation.
``/readyz`` reports the workers alive (and fails when expected ones are not) and the disk."""

from __future__ import annotations

import json

import pytest

from .api_helpers import PROBE_HOST, asgi_get


def test_healthz_answers_a_host_that_allowed_hosts_does_not_list(client, production_hosts):
    response = client.get("/healthz", HTTP_HOST=PROBE_HOST)
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_other_urls_keep_host_validation(client, production_hosts):
    assert client.get("/readyz", HTTP_HOST=PROBE_HOST).status_code == 400
    assert client.get("/", HTTP_HOST=PROBE_HOST).status_code == 400
    api = client.get("/api/v1/conversations", HTTP_HOST=PROBE_HOST)
    assert api.status_code == 400 and api.json()["error"]["code"] == "bad_request"
    assert client.get("/readyz", HTTP_HOST="toolcore.example.com").status_code == 200


def test_healthz_keeps_its_method_check(client, production_hosts):
    assert client.post("/healthz", HTTP_HOST=PROBE_HOST).status_code == 405


def test_healthz_answers_any_host_through_the_asgi_handler(production_hosts):
    status, body = asgi_get("/healthz", PROBE_HOST)
    assert status == 200 and json.loads(body) == {"status": "ok"}
    assert asgi_get("/", PROBE_HOST)[0] == 400


# --- /readyz: the workers and the disk --------------------------------------------------------


def _heartbeat(name: str, host: str, *, age: float = 0, stopped: bool = False):
    from datetime import timedelta

    from django.utils import timezone

    from tools.models import WorkerHeartbeat

    at = timezone.now() - timedelta(seconds=age)
    return WorkerHeartbeat.objects.create(
        name=name, host=host, started_at=at, heartbeat_at=at, stopped_at=at if stopped else None
    )


@pytest.mark.django_db
def test_readyz_reports_the_workers_alive_by_host_and_fails_when_none_is(client, settings):
    """``{alive, byHost}`` of the workers whose heartbeat is younger than the lease; workers
    are expected once some ran (their rows) or when this process starts some, and then none
    alive is 503."""
    _heartbeat("w1", "host-a")
    _heartbeat("w2", "host-a")
    _heartbeat("w3", "host-b", age=settings.TOOLCORE_CLAIM_LEASE + 5)  # died
    ready = client.get("/readyz")
    assert ready.status_code == 200
    body = ready.json()
    assert body["workers"] == {"alive": 2, "byHost": {"host-a": 2, "host-b": 0}}
    assert body["checks"]["workers"] == "ok"

    from tools.models import WorkerHeartbeat

    WorkerHeartbeat.objects.filter(host="host-a").update(
        stopped_at=WorkerHeartbeat.objects.get(name="w1").heartbeat_at
    )
    down = client.get("/readyz")
    assert down.status_code == 503
    assert down.json()["status"] == "not_ready"
    assert down.json()["checks"]["workers"] == "none alive"
    assert down.json()["workers"] == {"alive": 0, "byHost": {"host-a": 0, "host-b": 0}}


@pytest.mark.django_db
def test_readyz_expects_workers_when_this_process_starts_them(client, settings):
    settings.TOOLCORE_WORKERS = 1
    down = client.get("/readyz")
    assert down.status_code == 503 and down.json()["checks"]["workers"] == "none alive"
    _heartbeat("w1", "here")
    assert client.get("/readyz").status_code == 200


@pytest.mark.django_db
def test_readyz_says_when_the_disk_of_data_dir_is_full_and_stays_ready(client, settings, tmp_path):
    """A full ``DATA_DIR`` is reported (``full``), not a failed check: reads that write nothing
    keep working, so the process stays in the load balancer."""
    import os
    import subprocess

    mount = tmp_path / "small"
    mount.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True
        ).returncode
    ):
        pytest.skip("needs root and mount -t tmpfs for a disk of its own")
    try:
        settings.DATA_DIR = mount
        small = client.get("/readyz").json()["disk"]
        assert small["full"] is True  # 4 MiB is below the 16 MiB a settlement may need
        assert small["totalBytes"] == 4 * 1024 * 1024 and small["freeBytes"] > 0
        with open(mount / "filler", "wb") as handle:
            try:
                while True:
                    handle.write(b"\0" * 65536)
                    handle.flush()
            except OSError:
                pass
        ready = client.get("/readyz")
        assert ready.status_code == 200 and ready.json()["status"] == "ready"
        assert ready.json()["disk"]["freeBytes"] < 65536
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
