"""A full server restart: an approval and an ``ask_user`` question pending across it are answered
after it, and the approved call then runs, in the restarted server's own worker. Real daphne
processes over HTTP, sharing the test database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission

from conversations.api.auth import token_create
from conversations.models import ToolCall
from tests.conversations.helpers import assistant_calls, new_conversation, open_turn
from tests.ports import free_port
from tests.realtime.daphne_helpers import ROOT, stop_process

from .worker_helpers import database_url

QUESTIONS = [{"id": "env", "question": "Which environment?", "options": ["staging", "prod"]}]

pytestmark = pytest.mark.django_db(transaction=True)


def _serve(port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=database_url(),
        SECRET_KEY="restart-test-secret-" + "x" * 32,
        ALLOWED_HOSTS="127.0.0.1,localhost",
        DATA_DIR=str(settings.DATA_DIR),
        TOOLCORE_WORKSPACE_ROOT=str(settings.TOOLCORE_WORKSPACE_ROOT),
        TOOLCORE_WORKERS="1",
        LOG_LEVEL="WARNING",
    )
    daphne = Path(sys.executable).with_name("daphne")
    server = subprocess.Popen(
        [str(daphne), "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as answer:
                if answer.status == 200:
                    return server
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise AssertionError("the server did not start: " + server.communicate()[1][-2000:])


def _request(port: int, token: str, method: str, path: str, body=None) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1{path}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def test_pending_questions_survive_a_restart_and_the_call_then_runs(user):
    user.user_permissions.add(Permission.objects.get(codename="run_commands"))
    _, token = token_create(user=user, name="restart")
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    bash_id, ask_id = assistant_calls(
        conversation,
        turn_id,
        ("bash", {"command": "echo approved after the restart"}),
        ("ask_user", {"questions": QUESTIONS}),
    ).call_ids
    port = free_port()
    first = _serve(port)
    try:
        # The first server sees both waiting for a person, and runs nothing.
        assert (
            _request(port, token, "GET", f"/tool-calls/{bash_id}")["state"] == "awaiting_approval"
        )
        assert _request(port, token, "GET", f"/tool-calls/{ask_id}")["state"] == "awaiting_input"
    finally:
        stop_process(first, 20)
    second = _serve(port)
    try:
        base = f"/conversations/{conversation.pk}/turns/{turn_id}/results"
        assert _request(port, token, "GET", base)["settled"] is False
        _request(
            port,
            token,
            "POST",
            f"/tool-calls/{bash_id}/resolution",
            {"requestId": "r1", "kind": "approval", "decision": "allow"},
        )
        _request(
            port,
            token,
            "POST",
            f"/tool-calls/{ask_id}/resolution",
            {"requestId": "r2", "kind": "input", "value": {"answers": {"env": "staging"}}},
        )
        results = _request(port, token, "GET", f"{base}?wait=20")
    finally:
        stop_process(second, 20)
    assert results["settled"] is True, results
    by_tool = {r["toolName"]: r for r in results["results"]}
    assert by_tool["bash"]["outcome"] == "completed"
    assert by_tool["bash"]["modelContent"][0]["text"] == "approved after the restart\n"
    assert by_tool["ask_user"]["outcome"] == "completed"
    assert by_tool["ask_user"]["modelContent"][0]["text"] == "env: staging"
    assert not ToolCall.objects.filter(conversation=conversation).exists()
