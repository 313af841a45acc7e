"""A database that drops the request's connection answers 503 ``unavailable``, not a 500."""

from __future__ import annotations

import psycopg
import pytest
from django.conf import settings
from django.db import close_old_connections, connection

from .api_helpers import API

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="terminates a backend with pg_terminate_backend"
    ),
]


def test_a_dropped_connection_is_503_with_retry_after(api):
    assert api.get(f"{API}/conversations").status_code == 200
    pid = connection.connection.info.backend_pid
    with psycopg.connect(settings.DATABASE_URL, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
    response = api.get(f"{API}/conversations")
    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    assert response.json()["error"]["code"] == "unavailable"
    # At the end of a request Django drops a connection that failed (the test client leaves
    # that signal out, to keep a test's transaction): the next request has a fresh one.
    close_old_connections()
    assert api.get(f"{API}/conversations").status_code == 200
