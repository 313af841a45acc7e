"""The database or the channel layer away answers 503 ``unavailable`` with ``Retry-After``, never
a 500: in every mode (``DEBUG`` on or off) and through every handler (django-ninja's, sync and
async views; the middleware, for other views and for errors raised outside any view). A pooled
connection that the server closed is replaced before use: it costs no request an error.

The outages of the handler tests are real exceptions of the database driver, Django or redis-py
raised from a patched function (fault injection: an error at one precise step of a request
cannot be produced on demand); the PostgreSQL tests cut real connections."""

from __future__ import annotations

import psycopg
import pytest
import redis.exceptions
from django.db import OperationalError, close_old_connections, connection
from django.middleware.common import CommonMiddleware

from conversations import selectors
from conversations.api.base import api as ninja_api
from tests.faults.helpers import admin_url, terminate_backends

from .api_helpers import API, assert_error, assert_unavailable

postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="PostgreSQL only: terminates backends with pg_terminate_backend (SQLite has no server)",
)

OUTAGES = {
    "django": (OperationalError("server closed the connection unexpectedly"), "database"),
    "psycopg": (psycopg.OperationalError("consuming input failed"), "database"),
    "redis": (redis.exceptions.ConnectionError("Error 111 connecting"), "channel layer"),
}


def _raising(exc):
    def fail(*args, **kwargs):
        raise exc

    return fail


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_a_dropped_connection_is_503_with_retry_after(api):
    assert api.get(f"{API}/conversations").status_code == 200
    pid = connection.connection.info.backend_pid
    with psycopg.connect(admin_url(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
    response = api.get(f"{API}/conversations")
    assert_unavailable(response)
    # At the end of a request Django drops a connection that failed (the test client leaves
    # that signal out, to keep a test's transaction): the next request has a fresh one.
    close_old_connections()
    assert api.get(f"{API}/conversations").status_code == 200


@postgresql_only
@pytest.mark.django_db(transaction=True)
def test_pooled_connections_the_server_closed_cost_no_request_an_error(api, user):
    """Every connection of the test database terminated while it sits in the pool (as between
    two requests): the next requests are answered, not 503 (the pool checks each connection it
    hands out and replaces a dead one)."""
    assert api.get(f"{API}/conversations").status_code == 200
    connection.close()  # back to the pool, as at the end of every request
    assert terminate_backends(connection.settings_dict["NAME"]) >= 1
    for _ in range(3):
        response = api.get(f"{API}/conversations")
        assert response.status_code == 200, response.content
        connection.close()
    created = api.post_json(f"{API}/conversations", {"title": "after"})
    assert created.status_code == 201, created.content


@pytest.mark.django_db
@pytest.mark.parametrize("debug", [True, False], ids=["debug-on", "debug-off"])
@pytest.mark.parametrize("kind", list(OUTAGES))
def test_an_outage_in_a_ninja_view_is_503_in_every_mode(api, settings, monkeypatch, debug, kind):
    """django-ninja answers an unknown exception itself with ``DEBUG`` on (a 500 with the
    traceback): outages have handlers of their own there."""
    settings.DEBUG = debug
    exc, what = OUTAGES[kind]
    monkeypatch.setattr(selectors, "conversations_page", _raising(exc))
    assert_unavailable(api.get(f"{API}/conversations"), what)


@pytest.mark.django_db(transaction=True)  # the async view reads on threads of its own
@pytest.mark.parametrize("debug", [True, False], ids=["debug-on", "debug-off"])
def test_an_outage_in_the_async_barrier_view_is_503(api, user, settings, monkeypatch, debug):
    settings.DEBUG = debug
    monkeypatch.setattr(
        "conversations.api.conversations._barrier_scope", _raising(OUTAGES["django"][0])
    )
    cid = tid = "00000000-0000-0000-0000-000000000000"
    assert_unavailable(api.get(f"{API}/conversations/{cid}/turns/{tid}/results?wait=1"))


@pytest.mark.django_db
@pytest.mark.parametrize("debug", [True, False], ids=["debug-on", "debug-off"])
def test_an_outage_in_a_view_outside_ninja_is_503(api, settings, monkeypatch, debug):
    settings.DEBUG = debug
    monkeypatch.setattr(ninja_api, "get_openapi_schema", _raising(OUTAGES["psycopg"][0]))
    assert_unavailable(api.get(f"{API}/openapi.json"))


@pytest.mark.django_db
@pytest.mark.parametrize("debug", [True, False], ids=["debug-on", "debug-off"])
@pytest.mark.parametrize("path", [f"{API}/conversations", "/", "/admin/"])
def test_an_outage_outside_any_view_is_503_on_every_path(api, settings, monkeypatch, debug, path):
    """Raised by a middleware, which Django answers 500 (its debug page with ``DEBUG`` on): the
    answer is 503 too, JSON under ``/api/``, plain text on the pages."""
    settings.DEBUG = debug
    api.raise_request_exception = False  # the answer is the subject, not the exception
    monkeypatch.setattr(CommonMiddleware, "process_request", _raising(OUTAGES["django"][0]))
    response = api.get(path)
    if path.startswith(API):
        assert_unavailable(response)
    else:
        assert response.status_code == 503
        assert response["Retry-After"] == "1"
        assert response["Content-Type"].startswith("text/plain")
        assert b"The database is unavailable" in response.content


@pytest.mark.django_db
def test_other_errors_stay_500(api, settings, monkeypatch):
    """Only outages are 503: a bug is still a JSON 500 (and logged with its traceback)."""
    settings.DEBUG = False
    api.raise_request_exception = False
    monkeypatch.setattr(selectors, "conversations_page", _raising(RuntimeError("a bug")))
    assert_error(api.get(f"{API}/conversations"), 500, "internal_error")
