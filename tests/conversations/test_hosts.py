"""A ``Host`` that ``ALLOWED_HOSTS`` does not list: one WARNING line (no traceback, no second
"Bad Request" line) and a 400, in JSON under ``/api/`` and at ``/readyz``, Django's page
elsewhere; through the sync test client and Django's ASGI handler (the chain daphne runs)."""

from __future__ import annotations

import json
import logging

import pytest

from conversations.api.hosts import REFUSED_MESSAGE

from .api_helpers import PROBE_HOST, asgi_get

REFUSED = {"error": {"code": "bad_request", "message": REFUSED_MESSAGE}}


def _logged(caplog) -> list[logging.LogRecord]:
    """What reached the log at WARNING or above."""
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/readyz", "/api/v1/conversations", "/api/v1/nowhere"])
def test_an_unlisted_host_gets_a_json_400_and_one_warning(client, production_hosts, caplog, path):
    caplog.set_level(logging.INFO)
    response = client.get(path, HTTP_HOST=PROBE_HOST)
    assert response.status_code == 400 and response["Content-Type"] == "application/json"
    assert response.json() == REFUSED
    (record,) = _logged(caplog)
    assert (record.name, record.levelname, record.exc_info) == (
        "django.security.DisallowedHost",
        "WARNING",
        None,
    )
    assert record.getMessage().startswith(f"GET {path}: Invalid HTTP_HOST header: '{PROBE_HOST}'")


@pytest.mark.django_db
def test_a_page_for_an_unlisted_host_is_the_400_page_and_one_warning(
    client, production_hosts, caplog
):
    response = client.get("/admin/", HTTP_HOST=PROBE_HOST)
    assert response.status_code == 400 and response["Content-Type"].startswith("text/html")
    (record,) = _logged(caplog)
    assert record.name == "django.security.DisallowedHost" and record.exc_info is None


@pytest.mark.django_db(transaction=True)
def test_the_asgi_chain_refuses_the_same_way(production_hosts, caplog):
    status, body = asgi_get("/readyz", PROBE_HOST)
    assert status == 400 and json.loads(body) == REFUSED
    assert [(r.name, r.levelname) for r in _logged(caplog)] == [
        ("django.security.DisallowedHost", "WARNING")
    ]
    status, body = asgi_get("/readyz", "toolcore.example.com")
    assert status == 200 and json.loads(body)["status"] == "ready"


def test_healthz_still_answers_any_host_and_logs_nothing(client, production_hosts, caplog):
    assert client.get("/healthz", HTTP_HOST=PROBE_HOST).json() == {"status": "ok"}
    assert _logged(caplog) == []
