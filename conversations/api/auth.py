"""Authentication: ``Authorization: Bearer <token>`` (an ``ApiToken``) or a Django session.

Only the SHA-256 digest of a token is stored. ``last_used_at`` is written at most once a
minute per token so that reads do not turn into writes.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user
from django.db import close_old_connections, connections
from django.http import HttpRequest
from django.middleware.csrf import CsrfViewMiddleware
from django.utils import timezone
from ninja.errors import AuthenticationError
from ninja.security.base import AuthBase

from ..detached import detached
from ..errors import CsrfFailed, Throttled
from ..models import ApiToken
from .throttle import client_address, token_failure, token_lockout_text

TOKEN_PREFIX = "tc_"
LAST_USED_EVERY = timedelta(seconds=60)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_create(
    *, user: Any, name: str = "", scopes: list[str] | None = None, expires_at=None
) -> tuple[ApiToken, str]:
    """A new token for ``user``: the row and the secret, which is never stored."""
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken.objects.create(
        user=user,
        name=name,
        digest=token_digest(secret),
        scopes=sorted(set(scopes or [])),
        expires_at=expires_at,
    )
    return row, secret


def token_revoke(*, token_id: int) -> bool:
    return bool(
        ApiToken.objects.filter(pk=token_id, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
    )


def token_authenticate(raw: str) -> ApiToken | None:
    """The live token for ``raw`` (not revoked, not expired, active user), else None."""
    if not raw:
        return None
    now = timezone.now()
    found = list(
        ApiToken.objects.select_related("user").filter(digest=token_digest(raw)).order_by()[:1]
    )
    row = found[0] if found else None
    if row is None or row.revoked_at is not None or not row.user.is_active:
        return None
    if row.expires_at is not None and row.expires_at <= now:
        return None
    if row.last_used_at is None or now - row.last_used_at > LAST_USED_EVERY:
        ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
    return row


def bearer_of(request: HttpRequest) -> str | None:
    """The bearer token sent, ``""`` when the ``Authorization`` header holds none (another
    scheme, no token), None when no such header is sent.

    A request that sends credentials is judged by them alone: an invalid header is refused
    even when a session cookie comes along, on every route alike.
    """
    header = request.headers.get("Authorization", "").strip()
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return ""
    return token.strip()


def bearer_token(scope: dict[str, Any]) -> str | None:
    """The bearer token of an ASGI scope (a websocket handshake, an MCP request), ``""`` for an
    ``Authorization`` header without one, None without the header (as ``bearer_of`` reads a
    request)."""
    raw = next((v for k, v in scope.get("headers", []) if k == b"authorization"), b"")
    header = raw.decode("latin1").strip()
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def token_refused(request: HttpRequest) -> None:
    """A bearer token that failed: counted against the client's address (``throttle.py``);
    ``Throttled`` (429) when the address is locked out, else the caller answers 401."""
    lockout = token_failure(client_address(request))
    if lockout is not None:
        raise Throttled(token_lockout_text(lockout), retry_after=lockout.retry_after)


class BearerAuth(AuthBase):
    """``Authorization: Bearer <token>``. (ninja's HttpBearer logs the header in DEBUG.)"""

    openapi_type = "http"
    openapi_scheme = "bearer"

    def __call__(self, request: HttpRequest) -> Any:
        token = bearer_of(request)
        if token is None:
            return None  # no credentials sent: the session may answer
        row = token_authenticate(token)
        if row is None:
            token_refused(request)
            raise AuthenticationError()  # not the session's turn: the header was refused
        request.api_token = row  # type: ignore[attr-defined]
        request.user = row.user
        return row.user


class _CsrfCheck(CsrfViewMiddleware):
    """Django's CSRF check answering its reason, instead of rendering and logging a 403 page:
    the API answers with its own JSON body and logs the refusal once."""

    def _reject(self, request: HttpRequest, reason: str) -> Any:
        return reason


def _csrf_failure(request: HttpRequest) -> str | None:
    """Why the request fails Django's CSRF check, or None when it passes."""
    if request.method in ("GET", "HEAD", "OPTIONS", "TRACE"):
        return None
    check = _CsrfCheck(lambda req: None)
    check.process_request(request)
    return check.process_view(request, lambda req: None, (), {})


def _csrf_require(request: HttpRequest) -> None:
    """``CsrfFailed`` (403 ``csrf_failed``) when a session's unsafe request fails the check."""
    reason = _csrf_failure(request)
    if reason is not None:
        raise CsrfFailed(
            f"CSRF check failed: the CSRF token is missing or wrong ({reason.rstrip('.')}). "
            "Send the csrftoken cookie's value in the X-CSRFToken header, or use a bearer "
            "token."
        )


class SessionAuth(AuthBase):
    """A logged-in browser session; unsafe methods need the CSRF token (``403 csrf_failed``)."""

    openapi_type = "apiKey"
    openapi_in = "cookie"
    openapi_name = "sessionid"

    def __call__(self, request: HttpRequest) -> Any:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return None
        _csrf_require(request)
        return user


def _authenticate_detached(request: HttpRequest) -> Any:
    """Token or session auth in a pool thread that gives its database connection back."""
    try:
        raw = bearer_of(request)
        if raw is not None:
            row = token_authenticate(raw)
            if row is None:
                token_refused(request)
                return None
            request.api_token = row  # type: ignore[attr-defined]
            return row.user
        user = get_user(request)
        if not user.is_authenticated:
            return None
        _csrf_require(request)  # as SessionAuth: a session's POST needs its CSRF token
        return user
    finally:
        close_old_connections()
        connections.close_all()


class AsyncAuth(AuthBase):
    """For async views that wait: authenticates without pinning a thread or a connection, by a
    bearer token or a session (with its CSRF token on unsafe methods), as the two above do."""

    openapi_type = "http"
    openapi_scheme = "bearer"

    async def __call__(self, request: HttpRequest) -> Any:
        user = await detached(_authenticate_detached)(request)
        if user is not None:
            request.user = user
        return user
