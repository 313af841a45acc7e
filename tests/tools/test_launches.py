"""Launches run by a real worker: taken once, started, paged, stopped; their changes published on
the owner's workbench."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth.models import Permission

from tests.conftest import client_for
from tests.realtime.helpers import received
from tools.models import Launch
from tools.runtime.launches.services import workbench_group
from tools.runtime.processes import group_has_live_member, live_members
from tools.runtime.registry import HANDLERS

from .worker_helpers import running_worker, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
API = "/api/v1"


@pytest.fixture
def launcher(user):
    user.user_permissions.add(Permission.objects.get(codename="run_commands"))
    return client_for(user)


def test_a_launch_runs_its_command_and_its_end_is_published(launcher, user, settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(workbench_group(user.pk), channel)
    with running_worker(handlers=HANDLERS) as worker:
        body = {"name": "greeter", "command": "pwd; echo hello; exit 4", "cwd": "site"}
        launch_id = launcher.post_json(f"{API}/launches", body).json()["id"]
        launch = wait_for(
            lambda: Launch.objects.filter(pk=launch_id).exclude(status="running").first()
        )
    assert (launch.status, launch.exit_code, launch.host) == ("exited", 4, worker.host)
    page = launcher.get(f"{API}/launches/{launch_id}/log").json()
    assert page["lines"][0].endswith(f"/{user.pk}/site") and page["lines"][1] == "hello"
    assert page["status"] == "exited"
    changes = [m["launch"] for m in received(layer, channel) if m["type"] == "launch.changed"]
    assert [c["status"] for c in changes][0] == "running" and changes[-1]["status"] == "exited"
    assert any(c["pid"] for c in changes)  # started, with its pid
    assert "hello" in changes[-1]["summary"] and "Process exit code 4." in changes[-1]["summary"]


def _runs(pgid: int, name: str) -> bool:
    """Whether a process called ``name`` runs in the group."""
    for pid in live_members(pgid):
        try:
            with open(f"/proc/{pid}/comm") as comm:
                if comm.read().strip() == name:
                    return True
        except OSError:
            continue
    return False


def test_stopping_a_running_launch_kills_its_group(launcher):
    with running_worker(handlers=HANDLERS):
        body = {"name": "server", "command": "sleep 300 & sleep 300; wait"}
        launch_id = launcher.post_json(f"{API}/launches", body).json()["id"]
        started = wait_for(lambda: Launch.objects.filter(pk=launch_id, pgid__isnull=False).first())
        assert group_has_live_member(started.pgid)
        # The command itself runs (past the sandbox's set-up, where a stop is a SIGKILL).
        wait_for(lambda: _runs(started.pgid, "sleep"), what="the launch's sleep")
        assert launcher.post_json(f"{API}/launches/{launch_id}/stop").status_code == 200
        stopped = wait_for(lambda: Launch.objects.filter(pk=launch_id, status="killed").first())
    assert stopped.signal == "SIGTERM" and stopped.finished_at is not None
    assert not group_has_live_member(started.pgid)


def test_a_launch_is_taken_by_one_worker_only(launcher):
    with running_worker(handlers=HANDLERS) as first, running_worker(handlers=HANDLERS) as second:
        launch_id = launcher.post_json(
            f"{API}/launches", {"name": "once", "command": "echo once"}
        ).json()["id"]
        launch = wait_for(lambda: Launch.objects.filter(pk=launch_id, status="exited").first())
    assert launch.host in {first.host, second.host}
    page = launcher.get(f"{API}/launches/{launch_id}/log").json()
    assert page["lines"] == ["once"]  # one process ran it
