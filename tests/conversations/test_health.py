"""``/healthz`` answers whatever the ``Host`` header; every other URL keeps host validation."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.core.handlers.asgi import ASGIHandler

PROBE_HOST = "10.1.2.3"  # a load balancer probes by IP address


@pytest.fixture
def production_hosts(settings):
    settings.DEBUG = False
    settings.ALLOWED_HOSTS = ["toolcore.example.com"]


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


def _asgi_get(path: str, host: str) -> tuple[int, bytes]:
    """One GET through Django's ASGI handler (the async middleware chain daphne runs)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"host", host.encode())],
        "client": (PROBE_HOST, 40000),
        "server": (PROBE_HOST, 8000),
    }

    async def run() -> tuple[int, bytes]:
        app = ApplicationCommunicator(ASGIHandler(), scope)
        await app.send_input({"type": "http.request", "body": b"", "more_body": False})
        start = await app.receive_output(10)
        body = b""
        while True:
            message = await app.receive_output(10)
            body += message.get("body", b"")
            if not message.get("more_body"):
                return start["status"], body

    return async_to_sync(run)()


def test_healthz_answers_any_host_through_the_asgi_handler(production_hosts):
    status, body = _asgi_get("/healthz", PROBE_HOST)
    assert status == 200 and json.loads(body) == {"status": "ok"}
    assert _asgi_get("/", PROBE_HOST)[0] == 400
