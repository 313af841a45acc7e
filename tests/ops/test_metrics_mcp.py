"""The MCP endpoint's answers and outages in ``/metrics`` (docs/deployment.md, "Metrics"):
``/mcp/`` is an ASGI application beside Django (``config/asgi.py``), which Django's
``AnswerCountMiddleware`` never sees; it counts its answers itself, by the status it sends.
Requests go through the real ``config.asgi.application``; the metrics are read through the real
view, as Prometheus reads them."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from django.db import OperationalError

from conversations.api.auth import token_create
from tests.factories import UserFactory
from tests.mcp.asgi_helpers import INITIALIZE, request

from .metrics_helpers import Samples, scrape, value

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("_connections_given_back"),
]

ANSWERS = "toolcore_http_responses_total"


def _delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def _token() -> str:
    return token_create(user=UserFactory())[1]


async def test_mcp_answers_are_counted_by_status_class():
    token = await sync_to_async(_token)()
    before = await sync_to_async(scrape)()
    refused = await request(body=INITIALIZE)  # no token
    assert refused.status == 401
    between = await sync_to_async(scrape)()
    assert _delta(before, between, ANSWERS, status_class="4xx") == 1
    assert _delta(before, between, ANSWERS, status_class="2xx") == 1  # the first scrape's own
    answered = await request(body=INITIALIZE, token=token)
    assert answered.status == 200 and answered.sse()[0]["result"]["serverInfo"]
    after = await sync_to_async(scrape)()
    assert _delta(between, after, ANSWERS, status_class="2xx") == 2  # and the scrape between
    assert _delta(between, after, ANSWERS, status_class="4xx") == 0


async def test_an_mcp_outage_is_a_counted_503_and_a_counted_outage(monkeypatch):
    """Fault injection, as in tests/conversations/test_api_database_down.py: the database away
    at the token check (an error at one precise step cannot be produced on demand)."""
    token = await sync_to_async(_token)()

    def away(*args, **kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr("conversations.mcp.transport._user_of", away)
    before = await sync_to_async(scrape)()
    answer = await request(body=INITIALIZE, token=token)
    assert answer.status == 503 and answer.headers["retry-after"] == "1"
    after = await sync_to_async(scrape)()
    assert _delta(before, after, ANSWERS, status_class="5xx") == 1
    outages = {"kind": "database", "where": "mcp"}
    assert _delta(before, after, "toolcore_outages_total", **outages) == 1
