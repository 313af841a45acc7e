"""``/healthz`` answers whatever the ``Host`` header; every other URL keeps host validation."""

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
