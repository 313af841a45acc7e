"""Backup and restore (docs/deployment.md): ``deploy/backup.sh`` then ``deploy/restore.sh``
into a fresh database on the same server (PostgreSQL: ``pg_dump``/``pg_restore``; SQLite: the
backup API) and a fresh ``DATA_DIR``; a process pointed at the copy finds the same events,
calls, cards, claims and assets, every asset's file with its SHA-256."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest
from django.contrib.auth.models import Permission
from django.db import connection

from conversations.models import Asset
from conversations.services.interactions import call_resolve
from tests.conversations.helpers import assistant_calls, new_conversation, open_turn
from tests.conversations.host_helpers import HOST_TOOL, png, ready_host_calls
from tests.tools.worker_helpers import response_of, running_worker, wait_for
from tools.runtime.host.claim_tokens import holder_name
from tools.runtime.host.services import host_claim, host_settle
from tools.runtime.registry import HANDLERS

from .snapshot import snapshot

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
POSTGRESQL = connection.vendor == "postgresql"


def _seed(user) -> None:
    """Settled calls with every kind of file, and calls still open: awaiting approval, ready,
    and running under a host's claim."""
    user.user_permissions.add(Permission.objects.get(codename="run_commands"))
    user = type(user).objects.get(pk=user.pk)  # a fresh permission cache
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    script = "seq 1 300; echo warning >&2; printf 'no newline'"
    (bash,) = assistant_calls(conversation, turn_id, ("bash", {"command": script})).call_ids
    allow = {"kind": "approval", "decision": "allow", "persist": False}
    with running_worker(handlers=HANDLERS):
        call_resolve(call_id=bash, user=user, request_id="approve", resolution=allow)
        assert wait_for(lambda: response_of(bash))["outcome"] == "completed"

    _, _, (settled, running, _ready) = ready_host_calls(user, count=3)
    held = {}
    for call_id in (settled, running):
        (claim,) = host_claim(
            tool_names=[HOST_TOOL],
            worker="host-1",
            limit=1,
            owner_id=user.pk,
            holder=holder_name(user_id=user.pk),
        )
        assert str(claim.call_id) == call_id
        held[call_id] = claim
    image = base64.b64encode(png(8, 8)).decode()
    host_settle(
        call_id=settled,
        token=held[settled].token,
        generation=held[settled].generation,
        outcome="completed",
        content=[
            {"type": "text", "text": "two notes"},
            {"type": "image", "mediaType": "image/png", "data": image},
        ],
        owner_id=user.pk,
        holder=holder_name(user_id=user.pk),
    )

    waiting = new_conversation(user)
    assistant_calls(waiting, open_turn(waiting), ("bash", {"command": "rm -rf build"}))


def _database_url(name: str) -> str:
    """A URL of ``name`` on the server of the test database (for pg_dump, psql, the probe)."""
    db = connection.settings_dict
    if not POSTGRESQL:
        return f"sqlite:///{name}"
    password = f":{quote(db['PASSWORD'], safe='')}" if db.get("PASSWORD") else ""
    host = db.get("HOST") or "localhost"
    return (
        f"postgres://{quote(db['USER'], safe='')}{password}@{host}:{db.get('PORT') or 5432}/{name}"
    )


@contextmanager
def _fresh_database(tmp_path: Path) -> Iterator[str]:
    """The URL of a database that does not hold anything yet, dropped afterwards."""
    if not POSTGRESQL:
        yield _database_url(str(tmp_path / "restored.sqlite3"))
        return
    import psycopg

    name = f"restore_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    params = connection.get_connection_params()
    params.pop("prepare_threshold", None)
    with psycopg.connect(**params, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _database_url(name)
    finally:
        with psycopg.connect(**params, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _script(name: str, folder: Path, **env: str) -> None:
    run_env = {**os.environ, "PYTHON": sys.executable, **env}
    result = subprocess.run(
        ["sh", str(DEPLOY / name), str(folder)], env=run_env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def _snapshot_of(database_url: str, data_dir: Path) -> dict:
    """What a process of the deployment's settings reads from that database and DATA_DIR."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DATABASE_URL": database_url,
        "DATA_DIR": str(data_dir),
    }
    result = subprocess.run(
        [sys.executable, "-m", "tests.ops.snapshot"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.skipif(
    POSTGRESQL and not (shutil.which("pg_dump") and shutil.which("pg_restore")),
    reason="the PostgreSQL backup needs pg_dump and pg_restore (postgresql-client)",
)
def test_a_backup_restores_events_calls_and_assets_with_their_digests(user, settings, tmp_path):
    _seed(user)
    before = snapshot()
    kinds = {a["kind"] for a in before["assets"]}
    assert {"payload", "stdout", "stderr", "output", "image"} <= kinds
    assert {c["state"] for c in before["calls"]} == {"running", "ready", "awaiting_approval"}
    assert len(before["claims"]) == 1 and before["unapplied_migrations"] == 0
    for asset in before["assets"]:
        assert (asset["file_size"], asset["file_sha256"]) == (asset["size"], asset["sha256"])
    assert (Path(settings.DATA_DIR) / "index").is_dir()  # line indexes: not backed up

    backup, restored = tmp_path / "backup", tmp_path / "restored-data"
    source = _database_url(connection.settings_dict["NAME"])
    _script("backup.sh", backup, DATABASE_URL=source, DATA_DIR=str(settings.DATA_DIR))
    assert {p.name for p in backup.iterdir()} == {
        "database.dump" if POSTGRESQL else "database.sqlite3",
        "data.tar",
    }
    with _fresh_database(tmp_path) as target:
        _script("restore.sh", backup, DATABASE_URL=target, DATA_DIR=str(restored))
        after = _snapshot_of(target, restored)
        assert after == before
        # A second restore over the first is refused: it never mixes two states.
        again = subprocess.run(
            ["sh", str(DEPLOY / "restore.sh"), str(backup)],
            env={**os.environ, "DATABASE_URL": target, "DATA_DIR": str(restored)},
            capture_output=True,
            text=True,
        )
        assert again.returncode != 0 and "not empty" in again.stderr

    assert not (restored / "index").exists()
    assert Asset.objects.count() == len(after["assets"])
