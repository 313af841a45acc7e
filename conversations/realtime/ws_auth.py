"""Who is on a websocket: the bearer header or the session cookie, judged as REST judges them.

``WebsocketAuthMiddleware`` sets ``scope["user"]`` (``AnonymousUser`` when nothing valid was
sent) and ``scope["auth"]``, which says how the user was recognised, so the consumer can check
every few seconds that it still holds (a revoked token, a logged-out session). It refuses nothing
itself: the consumer accepts and closes an unauthenticated socket with 4401, so the client
learns why. A bearer token that fails is counted against the client's address like a REST one
(``api/throttle.py``); once the address is locked out, ``scope["auth"]["locked"]`` says so and the
consumer sends an ``error`` frame (``throttled``, with ``retryAfter``) and closes with 4429
instead.
When the database cannot be reached to say who it is, the socket is accepted and
closed with 1013 ("try again later"), not left to crash.

Origins (docs/realtime.md, "Authentication"):

- ``BrowserOriginValidator`` (around every websocket route) refuses a handshake whose
  ``Origin`` header is not one of ``ALLOWED_HOSTS`` (channels' ``AllowedHostsOriginValidator``)
  but, unlike it, lets a handshake without ``Origin`` through: only browsers send one, and
  scripts and agents on other machines must not need to invent it.
- A **session cookie** counts only on a same-origin handshake (the ``Origin`` host is the
  ``Host`` header, or one of ``CSRF_TRUSTED_ORIGINS``): otherwise any page a user visits could
  open a socket with the user's cookie. A cross-origin handshake with a session cookie is
  refused (HTTP 403). A bearer header is judged alone, whatever the origin: a browser page
  cannot set it.
"""

from __future__ import annotations

import asyncio
import logging
from importlib import import_module
from typing import Any
from urllib.parse import urlparse

from channels.security.websocket import OriginValidator, WebsocketDenier
from channels.sessions import CookieMiddleware, SessionMiddleware
from django.conf import settings
from django.contrib.auth import get_user
from django.contrib.auth.models import AnonymousUser
from django.utils import timezone

from ..api.auth import bearer_token, token_authenticate
from ..api.outages import CLOSE_TRY_AGAIN_LATER, OUTAGES, outage_noted
from ..api.throttle import scope_address, token_failure, token_lockout_text
from ..detached import socket_database
from ..models import ApiToken
from ..per_loop import PerLoop

logger = logging.getLogger(__name__)


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin1")
    return None


def same_origin(scope: dict[str, Any]) -> bool:
    """Whether the handshake's ``Origin`` is this server as the client addressed it (the
    ``Host`` header), or a trusted origin. No ``Origin`` at all: not a browser, so true."""
    origin = _header(scope, b"origin")
    if origin is None:
        return True
    parsed = urlparse(origin)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        return False
    host = _header(scope, b"host")
    if host is not None and parsed.netloc.lower() == host.strip().lower():
        return True
    return origin.rstrip("/") in {o.rstrip("/") for o in settings.CSRF_TRUSTED_ORIGINS}


class _OriginOrNone(OriginValidator):
    def valid_origin(self, parsed_origin: Any) -> bool:
        if parsed_origin is None:
            return True  # not a browser
        return super().valid_origin(parsed_origin)


def BrowserOriginValidator(app: Any) -> Any:  # noqa: N802 - named like channels' validators
    """channels' ``AllowedHostsOriginValidator``, except that a handshake without ``Origin``
    (not a browser) goes through; a browser's origin must still be one of ``ALLOWED_HOSTS``."""
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = ["localhost", "127.0.0.1", "[::1]"]
    return _OriginOrNone(app, allowed)


def _token_user(raw: str, address: str) -> tuple[Any, dict[str, Any]]:
    row = token_authenticate(raw)
    if row is None:
        lockout = token_failure(address)
        if lockout is None:
            return AnonymousUser(), {"method": None}
        locked = {"message": token_lockout_text(lockout), "retryAfter": lockout.retry_after}
        return AnonymousUser(), {"method": None, "locked": locked}
    return row.user, {"method": "token", "token_id": row.pk}


def _session_user(scope: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    user = get_user(_SessionRequest(scope))
    if not user.is_authenticated:
        return AnonymousUser(), {"method": None}
    return user, {"method": "session", "session_key": scope["session"].session_key}


class _SessionRequest:
    """What ``django.contrib.auth.get_user`` reads of a request: its session."""

    def __init__(self, scope: dict[str, Any]) -> None:
        self.session = scope["session"]


@socket_database
def _authenticate(scope: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    raw = bearer_token(scope)
    if raw is not None:
        return _token_user(raw, scope_address(scope))  # a header is judged alone, as on REST
    return _session_user(scope)


class _Authenticate:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        scope = dict(scope)
        if (
            bearer_token(scope) is None
            and scope.get("cookies", {}).get(settings.SESSION_COOKIE_NAME)
            and not same_origin(scope)
        ):
            return await WebsocketDenier()(scope, receive, send)
        try:
            scope["user"], scope["auth"] = await _authenticate(scope)
        except OUTAGES as exc:
            outage_noted(exc, "websocket")
            logger.warning("websocket handshake put off: %s", exc)
            return await _try_again_later(receive, send)
        return await self.app(scope, receive, send)


async def _try_again_later(receive: Any, send: Any) -> None:
    """Accept the handshake and close at once with 1013: the client connects again later."""
    message = await receive()
    if message.get("type") == "websocket.connect":
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": CLOSE_TRY_AGAIN_LATER})


def WebsocketAuthMiddleware(app: Any) -> Any:  # noqa: N802 - named like channels' stacks
    """Cookies and the session read, then the user recognised (see the module's docstring)."""
    return CookieMiddleware(SessionMiddleware(_Authenticate(app)))


def _session_valid(session_key: str, user_id: Any) -> bool:
    # The session read afresh, as a new request would: logged out, expired, the user
    # deactivated or the password changed all end it.
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user = get_user(_SessionRequest({"session": store}))
    return user.is_authenticated and user.pk == user_id


def valid_tokens(token_ids: set[Any]) -> set[Any]:
    """Of ``token_ids``, those still valid: not revoked, not expired, their user active. One
    query; nothing written (no ``last_used_at``)."""
    now = timezone.now()
    rows = ApiToken.objects.filter(pk__in=token_ids, revoked_at__isnull=True, user__is_active=True)
    rows = rows.exclude(expires_at__lte=now)
    return set(rows.values_list("pk", flat=True))


def still_valid(auth: dict[str, Any], user_id: Any) -> bool:
    """Whether what authenticated one socket still holds (see ``CredentialWatch``)."""
    method = auth.get("method")
    if method == "token":
        return auth["token_id"] in valid_tokens({auth["token_id"]})
    if method == "session":
        return _session_valid(auth["session_key"], user_id)
    return False


def _invalid(entries: list[tuple[Any, dict[str, Any], Any]]) -> list[Any]:
    """The sockets of ``entries`` (``(socket, auth, user id)``) whose credentials no longer
    hold: one query for every token, one session read per distinct session."""
    tokens = {auth["token_id"] for _, auth, _ in entries if auth.get("method") == "token"}
    good_tokens = valid_tokens(tokens) if tokens else set()
    sessions: dict[tuple[str, Any], bool] = {}
    invalid = []
    for socket, auth, user_id in entries:
        method = auth.get("method")
        if method == "token":
            ok = auth["token_id"] in good_tokens
        elif method == "session":
            key = (auth["session_key"], user_id)
            if key not in sessions:
                sessions[key] = _session_valid(*key)
            ok = sessions[key]
        else:
            ok = False
        if not ok:
            invalid.append(socket)
    return invalid


class CredentialWatch:
    """Every ``TOOLCORE_WS_AUTH_CHECK_SECONDS``, one check of the credentials of every open
    socket of this process (its event loop), instead of one query per socket: a revoked token,
    an expired one, a deactivated user or a logged-out session closes its sockets with 4401.

    A socket is ``add``-ed with a coroutine function to call when its credentials fail, and
    ``discard``-ed when it closes. The watch runs while it has sockets.
    """

    def __init__(self) -> None:
        self.sockets: dict[Any, tuple[dict[str, Any], Any, Any]] = {}
        self.task: asyncio.Task | None = None

    def add(self, socket: Any, auth: dict[str, Any], user_id: Any, on_invalid: Any) -> None:
        self.sockets[socket] = (auth, user_id, on_invalid)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())

    def discard(self, socket: Any) -> None:
        self.sockets.pop(socket, None)

    async def _run(self) -> None:
        while self.sockets:
            await asyncio.sleep(settings.TOOLCORE_WS_AUTH_CHECK_SECONDS)
            entries = [(s, auth, uid) for s, (auth, uid, _) in list(self.sockets.items())]
            if not entries:
                break
            try:
                invalid = await socket_database(_invalid)(entries)
            except Exception:  # noqa: BLE001 - the database is away: try again next round
                logger.warning("websocket credential check failed", exc_info=True)
                continue
            for socket in invalid:
                held = self.sockets.pop(socket, None)
                if held is not None:
                    await held[2]()


_watches: PerLoop[CredentialWatch] = PerLoop(CredentialWatch)


def credential_watch() -> CredentialWatch:
    """The watch of the running event loop (daphne has one; each test its own)."""
    return _watches.get()
