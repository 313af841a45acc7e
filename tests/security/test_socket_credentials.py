"""Credentials of open sockets and cross-origin handshakes, as a matrix over both websockets
(docs/realtime.md, "Authentication"; the single cases are in tests/realtime/test_socket_auth.py).

Every way a socket's credentials can end (token revoked, token expired, user deactivated,
session logged out, session of a deactivated user, password changed) closes every socket they
opened with 4401 within the check interval, while sockets whose credentials hold stay open. A
handshake carrying a session cookie from any other origin is refused."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.test import Client
from django.utils import timezone

from config.asgi import application
from conversations.api.auth import token_create, token_revoke
from conversations.models import ApiToken
from tests.factories import UserFactory
from tests.realtime.helpers import connect, receive

pytestmark = pytest.mark.django_db(transaction=True)

PATHS = ("/ws/conversations/", "/ws/workbench/")
CHECK_SECONDS = 1


def _token(user) -> tuple[int, str]:
    row, secret = token_create(user=user)
    return row.pk, secret


def _cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


# Each loss: how the socket authenticates, then what ends it.
def _revoke(user, token_id):
    token_revoke(token_id=token_id)


def _expire(user, token_id):
    ApiToken.objects.filter(pk=token_id).update(expires_at=timezone.now() - timedelta(seconds=1))


def _deactivate(user, token_id):
    get_user_model().objects.filter(pk=user.pk).update(is_active=False)


def _log_out(user, token_id):
    for session in Session.objects.all():
        if str(session.get_decoded().get("_auth_user_id")) == str(user.pk):
            session.delete()


def _change_password(user, token_id):
    user.set_password("another-password")
    user.save()


LOSSES = {
    "token revoked": ("token", _revoke),
    "token expired": ("token", _expire),
    "token of a deactivated user": ("token", _deactivate),
    "session logged out": ("session", _log_out),
    "session of a deactivated user": ("session", _deactivate),
    "session after a password change": ("session", _change_password),
}


async def _open(how: str, user, path: str):
    if how == "token":
        token_id, secret = await sync_to_async(_token)(user)
        socket = await connect(secret, path=path)
    else:
        token_id = None
        cookie = await sync_to_async(_cookie)(user)
        socket = await connect(
            headers=[(b"cookie", cookie), (b"origin", b"http://testserver")], path=path
        )
    await receive(socket)  # hello, or the workbench's snapshot
    return socket, token_id


async def test_every_way_credentials_end_closes_every_socket_4401(settings):
    settings.TOOLCORE_WS_AUTH_CHECK_SECONDS = CHECK_SECONDS
    doomed, kept = [], []
    for name, (how, loss) in LOSSES.items():
        for path in PATHS:
            victim = await sync_to_async(UserFactory)()
            bystander = await sync_to_async(UserFactory)()  # the same way in, still valid
            socket, token_id = await _open(how, victim, path)
            doomed.append((name, path, socket, loss, victim, token_id))
            kept.append((name, path, (await _open(how, bystander, path))[0]))
    for _, _, _, loss, victim, token_id in doomed:
        await sync_to_async(loss)(victim, token_id)
    closes = await asyncio.gather(
        *(socket.receive_output(timeout=CHECK_SECONDS * 5) for _, _, socket, *_ in doomed)
    )
    for (name, path, *_), closed in zip(doomed, closes, strict=True):
        assert closed == {"type": "websocket.close", "code": 4401}, (name, path, closed)
    for name, path, socket in kept:
        assert await socket.receive_nothing(timeout=0.1), (name, path)
        await socket.disconnect()


ORIGINS = [
    b"http://evil.example",
    b"http://localhost",  # an allowed host, but not the host the page came from
    b"http://testserver.evil.example",
    b"http://evil.example/testserver",
    b"http://testserver:8080",
    b"http://user@testserver",
    b"null",
    b"file://",
    b"",
]


@pytest.mark.parametrize("path", PATHS)
async def test_a_session_cookie_from_another_origin_is_refused(user, path):
    cookie = await sync_to_async(_cookie)(user)
    for origin in ORIGINS:
        socket = WebsocketCommunicator(
            application,
            path,
            headers=[(b"host", b"testserver"), (b"cookie", cookie), (b"origin", origin)],
        )
        connected, _ = await socket.connect(timeout=5)
        if connected:  # accepted to say 4401 at once: never a user's socket
            assert (await socket.receive_output(timeout=5)) == {
                "type": "websocket.close",
                "code": 4401,
            }, origin
    same = await connect(
        headers=[(b"cookie", cookie), (b"origin", b"http://testserver")], path=path
    )
    await receive(same)
    await same.disconnect()
