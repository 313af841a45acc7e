"""Failed credentials from one address are throttled (docs/security.md, "Failed logins and
tokens"): logins on the pages and the admin (django-axes), bearer tokens on the REST API and
the websocket handshakes (conversations/api/throttle.py). Each test sets a small limit; the rest of
the suite runs with a limit high enough for its deliberate bad credentials."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import Client

from config.asgi import application
from tests.conftest import client_for
from tests.conversations.api_helpers import API, asgi_get, assert_error
from tests.factories import StaffFactory
from tests.realtime.helpers import TIMEOUT, hello, receive, token_for

LIMIT = 3
PASSWORD = "pw-for-tests"  # tests/factories.py
BAD_TOKEN = "tc_" + "x" * 43


@pytest.fixture
def limit(settings):
    """A lockout after ``LIMIT`` failures, for 15 minutes."""
    settings.TOOLCORE_LOCKOUT_FAILURES = settings.AXES_FAILURE_LIMIT = LIMIT
    settings.TOOLCORE_LOCKOUT_MINUTES = 15
    settings.AXES_COOLOFF_TIME = timedelta(minutes=15)


@pytest.fixture
def short_cooloff(settings, limit):
    """The same lockout, with a cool-off of 1.5 s, so a test can wait it out."""
    settings.TOOLCORE_LOCKOUT_MINUTES = 0.025
    settings.AXES_COOLOFF_TIME = timedelta(minutes=0.025)
    return 1.6  # seconds to wait


def _login(path: str, username: str, password: str, **extra):
    return Client(**extra).post(path, {"username": username, "password": password})


def _logged_in(response) -> bool:
    return response.status_code == 302 and "sessionid" in response.cookies


def _assert_locked_page(response) -> str:
    assert response.status_code == 429
    text = " ".join(response.content.decode().split())
    assert "Too many failed logins" in text
    assert "locked because of repeated failed logins" in text
    assert "Try again after" in text and " UTC" in text
    assert 14 * 60 < int(response["Retry-After"]) <= 15 * 60
    return text


# --- the login pages --------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"])
def test_failed_logins_lock_the_address_with_a_clear_page_and_the_command_lifts_it(
    user, limit, path
):
    """Two wrong passwords answer the form again; the third locks the address: 429, a page
    saying why and until when. Then even the right password is refused, for any username, and
    ``throttle_reset`` lifts the lock at once."""
    if path.startswith("/admin/"):
        user.is_staff = True
        user.save()
    for _ in range(LIMIT - 1):
        answer = _login(path, user.username, "wrong")
        assert answer.status_code == 200 and not _logged_in(answer)
    text = _assert_locked_page(_login(path, user.username, "wrong"))
    assert "127.0.0.1" in text
    _assert_locked_page(_login(path, user.username, PASSWORD))
    _assert_locked_page(_login(path, "someone-else", "anything"))
    # Another address is not locked.
    assert _logged_in(_login(path, user.username, PASSWORD, REMOTE_ADDR="10.0.0.2"))

    call_command("throttle_reset", "127.0.0.1")
    assert _logged_in(_login(path, user.username, PASSWORD))


COOLOFF_SECONDS = 6.0
MEANWHILE_SECONDS = 2.0


@pytest.mark.django_db
def test_the_login_lock_ends_after_the_cooloff_and_tries_meanwhile_do_not_extend_it(
    user, limit, settings
):
    """A cool-off of 6 s. The try meanwhile comes 2 s after the lock: 4 s of room for a loaded
    machine before the lock would end anyway. The last login comes once the lock has ended
    for sure (6 s after the locking request returned); had the try extended the lock, it
    would last 2 s longer than that (a slow machine can only make that check weaker)."""
    settings.TOOLCORE_LOCKOUT_MINUTES = COOLOFF_SECONDS / 60
    settings.AXES_COOLOFF_TIME = timedelta(seconds=COOLOFF_SECONDS)
    for _ in range(LIMIT - 1):
        _login("/accounts/login/", user.username, "wrong")
    answer = _login("/accounts/login/", user.username, "wrong")
    locked = time.monotonic()  # the lock's time is before this
    assert answer.status_code == 429
    time.sleep(MEANWHILE_SECONDS)
    assert _login("/accounts/login/", user.username, "wrong").status_code == 429  # not counted
    time.sleep(max(0.0, locked + COOLOFF_SECONDS + 0.1 - time.monotonic()))
    assert _logged_in(_login("/accounts/login/", user.username, PASSWORD))


@pytest.mark.django_db
def test_a_forwarded_for_header_sent_by_the_client_does_not_change_its_address(user, limit):
    """The address is the one the server established (daphne --proxy-headers writes it from
    the proxy's header into the connection); a header the client sends itself is not read."""
    for n in range(LIMIT):
        answer = _login(
            "/accounts/login/", user.username, "wrong", HTTP_X_FORWARDED_FOR=f"192.0.2.{n}"
        )
    _assert_locked_page(answer)


# --- bearer tokens on the REST API ------------------------------------------------------------


@pytest.mark.django_db
def test_failed_tokens_lock_the_address_out_with_429_json_and_retry_after(user, limit, caplog):
    """Failed bearer tokens from one address: 401 until the limit, then 429 ``throttled``
    with ``Retry-After``, also for the tries after it (not counted). A valid token from the
    same address still works (it cannot be guessed, so it proves no guessing), another address
    is not locked, and ``throttle_reset`` lifts the lock."""
    url = f"{API}/conversations"
    bad = Client(HTTP_AUTHORIZATION=f"Bearer {BAD_TOKEN}")
    for _ in range(LIMIT - 1):
        assert_error(bad.get(url), 401, "unauthorized")
    with caplog.at_level(logging.WARNING, logger="conversations.api.throttle"):
        locked = bad.get(url)
    error = assert_error(locked, 429, "throttled")
    assert "127.0.0.1" in error["message"] and "UTC" in error["message"]
    assert 14 * 60 < int(locked["Retry-After"]) <= 15 * 60
    assert any("locked out" in r.getMessage() for r in caplog.records)
    again = bad.post(f"{API}/conversations", data="{}", content_type="application/json")
    assert_error(again, 429, "throttled")
    assert_error(Client(HTTP_AUTHORIZATION="Basic eDp5").get(url), 429, "throttled")

    assert client_for(user).get(url).status_code == 200
    elsewhere = Client(HTTP_AUTHORIZATION=f"Bearer {BAD_TOKEN}", REMOTE_ADDR="10.0.0.2")
    assert_error(elsewhere.get(url), 401, "unauthorized")
    # No credentials at all is not a failed check.
    assert_error(Client(REMOTE_ADDR="10.0.0.3").get(url), 401, "unauthorized")

    call_command("throttle_reset", "127.0.0.1")
    assert_error(bad.get(url), 401, "unauthorized")


@pytest.mark.django_db
def test_without_redis_another_process_lifts_the_token_lock(settings, limit):
    """Without Redis the counts are files every process of the host shares: the reset run in
    a process of its own (as ``manage.py throttle_reset`` is) lifts the lock this one counted."""
    if settings.REDIS_URL:
        pytest.skip("with REDIS_URL the counts are in Redis (the test above resets them)")
    url = f"{API}/conversations"
    bad = Client(HTTP_AUTHORIZATION=f"Bearer {BAD_TOKEN}")
    for _ in range(LIMIT - 1):
        assert_error(bad.get(url), 401, "unauthorized")
    assert_error(bad.get(url), 429, "throttled")
    reset = (
        "import django; django.setup(); from conversations.api.throttle import token_reset; "
        "print(token_reset('127.0.0.1'))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    done = subprocess.run(
        [sys.executable, "-c", reset],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"  # it found the lock this process counted
    assert_error(bad.get(url), 401, "unauthorized")


@pytest.mark.django_db
def test_the_token_lock_ends_after_the_cooloff(limit, short_cooloff):
    bad = Client(HTTP_AUTHORIZATION=f"Bearer {BAD_TOKEN}")
    for _ in range(LIMIT):
        answer = bad.get(f"{API}/conversations")
    assert_error(answer, 429, "throttled")
    time.sleep(short_cooloff)  # past the cool-off: a slow machine only sleeps past it further
    assert_error(bad.get(f"{API}/conversations"), 401, "unauthorized")


@pytest.mark.django_db(transaction=True)  # the barrier authenticates in a thread of its own
def test_the_turn_barrier_counts_failed_tokens_too(limit):
    bad = Client(HTTP_AUTHORIZATION=f"Bearer {BAD_TOKEN}")
    url = f"{API}/conversations/{'0' * 8}-0000-4000-8000-{'0' * 12}/turns/x/results"
    answers = [bad.get(url) for _ in range(LIMIT)]
    assert [a.status_code for a in answers] == [401] * (LIMIT - 1) + [429]
    assert_error(answers[-1], 429, "throttled")


@pytest.mark.django_db(transaction=True)  # served by the ASGI application, on its threads
def test_the_address_is_the_connections_as_the_server_set_it(limit):
    """Through the ASGI application: the address counted is the connection's client (what
    daphne --proxy-headers sets from the proxy's X-Forwarded-For), not a forwarding header the
    request carries."""
    bearer = (b"authorization", f"Bearer {BAD_TOKEN}".encode())
    for n in range(LIMIT):
        spoofed = (b"x-forwarded-for", f"192.0.2.{n}".encode())
        status, body = asgi_get(
            f"{API}/conversations",
            client=("198.51.100.7", 1000 + n),
            headers=[bearer, spoofed],
            app=application,
        )
    assert status == 429
    assert "198.51.100.7" in json.loads(body)["error"]["message"]
    status, _ = asgi_get(
        f"{API}/conversations", client=("198.51.100.8", 1), headers=[bearer], app=application
    )
    assert status == 401


@pytest.mark.django_db
def test_an_unreachable_throttle_cache_lets_the_refusal_be_a_401(settings, limit, caplog):
    """Fault injected: the throttle's Redis is a closed port. A failed token is still a 401
    (logged, not counted); a cache outage must not refuse every client."""
    settings.CACHES = {
        **settings.CACHES,
        settings.THROTTLE_CACHE: {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
            "OPTIONS": {"socket_connect_timeout": 0.2, "socket_timeout": 0.2},
        },
    }
    bad = Client(HTTP_AUTHORIZATION=f"Bearer {BAD_TOKEN}")
    with caplog.at_level(logging.WARNING, logger="conversations.api.throttle"):
        for _ in range(LIMIT + 1):
            assert_error(bad.get(f"{API}/conversations"), 401, "unauthorized")
    assert any("not counted" in r.getMessage() for r in caplog.records)


# --- websocket handshakes ---------------------------------------------------------------------


async def _handshake(token: str, address: str):
    from channels.testing import WebsocketCommunicator

    socket = WebsocketCommunicator(
        application,
        "/ws/conversations/",
        headers=[(b"host", b"testserver"), (b"authorization", f"Bearer {token}".encode())],
    )
    socket.scope["client"] = (address, 4000)
    connected, _ = await socket.connect(timeout=TIMEOUT)
    assert connected
    return socket


@pytest.mark.django_db(transaction=True)
async def test_failed_socket_tokens_lock_the_address_out_with_4429(user, limit):
    """A failed token on a handshake closes 4401 until the limit; then an ``error`` frame
    ``throttled`` saying until when, and 4429. REST and sockets share the address's count; a
    valid token still connects."""
    address = "203.0.113.9"
    for _ in range(LIMIT - 1):
        socket = await _handshake(BAD_TOKEN, address)
        assert await socket.receive_output(timeout=TIMEOUT) == {
            "type": "websocket.close",
            "code": 4401,
        }
    socket = await _handshake(BAD_TOKEN, address)
    frame = await receive(socket)
    assert frame["type"] == "error" and frame["code"] == "throttled"
    assert address in frame["message"] and 14 * 60 < frame["retryAfter"] <= 15 * 60
    assert await socket.receive_output(timeout=TIMEOUT) == {"type": "websocket.close", "code": 4429}

    good = await _handshake(await token_for(user), address)
    await hello(good)
    await good.disconnect()


@pytest.mark.django_db
def test_the_reset_command_names_what_it_forgot(user, limit, capsys):
    bad = Client(HTTP_AUTHORIZATION=f"Bearer {BAD_TOKEN}")
    bad.get(f"{API}/conversations")
    _login("/accounts/login/", user.username, "wrong")
    _login("/accounts/login/", user.username, "wrong")
    call_command("throttle_reset", "127.0.0.1", "10.9.9.9")
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "127.0.0.1: 2 failed login(s) and its failed token checks forgotten.",
        "10.9.9.9: 0 failed login(s) and no failed token check forgotten.",
    ]


@pytest.mark.django_db
def test_support_staff_see_the_failed_logins_in_the_admin(user, limit):
    _login("/accounts/login/", user.username, "wrong", REMOTE_ADDR="203.0.113.44")
    staff = Client()
    staff.force_login(StaffFactory())
    page = staff.get("/admin/axes/accessattempt/")
    assert page.status_code == 200
    assert "203.0.113.44" in page.content.decode()


@pytest.mark.django_db
def test_by_address_and_username_only_the_failing_username_is_locked(
    user, other_user, limit, settings
):
    """``TOOLCORE_LOCKOUT_BY=address_username``: many people behind one address keep logging
    in while one username is locked there."""
    settings.AXES_LOCKOUT_PARAMETERS = [["ip_address", "username"]]
    for _ in range(LIMIT):
        answer = _login("/accounts/login/", user.username, "wrong")
    _assert_locked_page(answer)
    _assert_locked_page(_login("/accounts/login/", user.username, PASSWORD))
    assert _logged_in(_login("/accounts/login/", other_user.username, PASSWORD))
