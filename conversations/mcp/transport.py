"""``/mcp/``: the MCP endpoint as an ASGI application around the SDK (docs/mcp.md).

In order, for every request:

1. the ``Host`` must be one of ``ALLOWED_HOSTS`` (400) and a browser's ``Origin`` this server
   or a trusted origin (403): DNS rebinding cannot reach a local server;
2. a bearer token of the API (``ApiToken``, checked by ``api/auth.py`` ``token_authenticate``):
   none or a bad one is 401 with ``WWW-Authenticate: Bearer`` (RFC 6750), an address locked out
   for failed tokens 429, as on REST;
3. ``Mcp-Protocol-Version``: a handshake version or none. A 2026-07-28 (sessionless) request is
   refused with ``-32022`` naming the versions served, which tells the SDK's ``auto`` clients to
   fall back to ``initialize``;
4. by method: ``POST`` carries one JSON-RPC message (a body of at most ``TOOLCORE_MAX_BODY``),
   ``DELETE`` ends the session (204), ``GET`` is 405: the server sends nothing unasked;
5. ``initialize`` opens a session (``services/mcp_sessions.py``), which the SDK's answer carries
   as ``Mcp-Session-Id``; every other message needs the id of a session of the same user
   (missing: 400; unknown, ended or another user's: 404);
6. a client's response (an elicitation's answer) and its notifications are handled here from
   database state (``answers.py``) and answered 202; requests go to the SDK, with the request's
   ``McpRequest`` in ``stream.current`` for the handlers.

Bad input is a 4xx with a JSON body, never a 500; the database away is 503 with ``Retry-After``.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import parse_qs, urlsplit

from django.conf import settings
from django.http.request import split_domain_port, validate_host
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
    InitializeRequestParams,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    jsonrpc_message_adapter,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION
from pydantic import ValidationError

from .. import metrics, selectors
from ..api.auth import bearer_token, token_authenticate
from ..api.outages import OUTAGES, outage_noted, unavailable_message
from ..api.throttle import scope_address, token_failure, token_lockout_text
from ..bodies import strict_loads
from ..errors import NotFound, ValidationFailed
from ..models import McpSession
from ..services.mcp_sessions import mcp_session_end, mcp_session_open, mcp_session_seen
from .answers import elicitation_answered, log_answer, request_cancelled
from .calls import on_database
from .server import session_manager
from .stream import SESSION_HEADER, McpRequest, ResponseStream, answer, current, rpc_error

logger = logging.getLogger(__name__)

CONVERSATION_HEADER = b"x-toolcore-conversation"
CONVERSATION_QUERY = "conversation"
PROTOCOL_HEADER = b"mcp-protocol-version"
REALM = 'Bearer realm="toolcore"'
ALLOW = (b"allow", b"POST, DELETE")


class Refusal(Exception):
    """A request answered with an error before the SDK sees it."""

    def __init__(
        self,
        status: int,
        body: dict[str, Any] | None,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = headers or []


class _Gone(Exception):
    """The client went away before its request was read: nothing to answer."""


def _refused(status: int, code: int, message: str, request_id: Any = None, **kw: Any) -> Refusal:
    return Refusal(status, rpc_error(code, message, request_id, kw.get("data")), kw.get("headers"))


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin1")
    return None


LOCAL_HOSTS = [".localhost", "127.0.0.1", "[::1]"]  # as Django's get_host under DEBUG


def _allowed_hosts() -> list[str]:
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = list(LOCAL_HOSTS)
    return allowed


def _origin_hosts() -> list[str]:
    """The hosts a browser's ``Origin`` may name: the server's own (``ALLOWED_HOSTS`` without
    its wildcard) and the local ones, whatever ``ALLOWED_HOSTS`` is. ``make run`` allows every
    ``Host`` (``*``): a page of any site that rebinds its name to 127.0.0.1 still cannot reach
    ``/mcp/`` through the reader's browser."""
    return [host for host in settings.ALLOWED_HOSTS if host != "*"] + LOCAL_HOSTS


def _host_checked(scope: dict[str, Any]) -> str:
    """The ``Host`` header, when ``ALLOWED_HOSTS`` lists it; a browser's ``Origin`` must be a
    host of ``_origin_hosts`` or a trusted origin (the MCP specification asks servers to check
    it)."""
    host = (_header(scope, b"host") or "").strip()
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, _allowed_hosts()):
        logger.warning("MCP request refused: Host %r is not in ALLOWED_HOSTS", host[:200])
        raise _refused(
            400, INVALID_REQUEST, "The Host header names no host this server answers to."
        )
    origin = _header(scope, b"origin")
    if origin is not None:
        netloc = urlsplit(origin).netloc
        origin_domain, _ = split_domain_port(netloc)
        trusted = {o.rstrip("/") for o in settings.CSRF_TRUSTED_ORIGINS}
        if not (
            (origin_domain and validate_host(origin_domain, _origin_hosts()))
            or origin.rstrip("/") in trusted
        ):
            raise _refused(403, INVALID_REQUEST, "The Origin header names no allowed origin.")
    return host


def _base_url(scope: dict[str, Any], host: str) -> str:
    """How the client reached this server: the links of the answers point there (the scheme
    is the proxy's with daphne's ``--proxy-headers``)."""
    return f"{scope.get('scheme') or 'http'}://{host}"


def _user_of(raw: str, address: str | None) -> tuple[Any, Any]:
    """The token's user, or None and the lockout the failure led to (None if none)."""
    row = token_authenticate(raw)
    if row is None:
        return None, token_failure(address)
    return row.user, None


async def _authenticated(scope: dict[str, Any]) -> Any:
    raw = bearer_token(scope)
    if not raw:  # no credentials at all: not a failed check (RFC 6750 §3.1: no error code)
        raise Refusal(
            401,
            {"error": "unauthorized", "error_description": "Send Authorization: Bearer <token>."},
            [(b"www-authenticate", REALM.encode())],
        )
    user, lockout = await on_database(_user_of)(raw, scope_address(scope))
    if lockout is not None:
        raise Refusal(
            429,
            {"error": "throttled", "error_description": token_lockout_text(lockout)},
            [(b"retry-after", str(lockout.retry_after).encode())],
        )
    if user is None:
        description = "The token is unknown, revoked or expired, or its user is inactive."
        challenge = f'{REALM}, error="invalid_token", error_description="{description}"'
        raise Refusal(
            401,
            {"error": "invalid_token", "error_description": description},
            [(b"www-authenticate", challenge.encode())],
        )
    return user


def _version_checked(scope: dict[str, Any]) -> None:
    version = _header(scope, PROTOCOL_HEADER)
    if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
        raise _refused(
            400,
            UNSUPPORTED_PROTOCOL_VERSION,
            f"Toolcore serves the MCP versions of the initialize handshake, not {version[:40]!r}: "
            "initialize a session.",
            data={"supported": list(HANDSHAKE_PROTOCOL_VERSIONS), "requested": version[:40]},
        )


async def _body(scope: dict[str, Any], receive: Any) -> bytes:
    limit = settings.TOOLCORE_MAX_BODY
    too_large = _refused(413, INVALID_REQUEST, f"The body is larger than {limit:,} bytes.")
    declared = _header(scope, b"content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise too_large
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Gone()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _message(body: bytes) -> tuple[Any, bytes]:
    """The JSON-RPC message of a body, and the body as the SDK reads it (its text cleaned)."""
    try:
        raw = strict_loads(body)
    except ValidationFailed as exc:
        raise _refused(400, PARSE_ERROR, exc.message) from None
    except ValueError:
        raise _refused(400, PARSE_ERROR, "Parse error: the body is not JSON.") from None
    request_id = raw.get("id") if isinstance(raw, dict) else None
    if not isinstance(request_id, str | int) or isinstance(request_id, bool):
        request_id = None
    if isinstance(raw, list):
        raise _refused(400, INVALID_REQUEST, "One JSON-RPC message a request: batches are refused.")
    try:
        message = jsonrpc_message_adapter.validate_python(raw, by_name=False)
    except ValidationError:
        raise _refused(400, INVALID_REQUEST, "Not a JSON-RPC 2.0 message.", request_id) from None
    return message, json.dumps(raw, ensure_ascii=False, separators=(",", ":")).encode()


def _replayed(body: bytes, receive: Any) -> Any:
    """``receive`` with the body read already given once more, for the SDK."""
    given = False

    async def replay() -> dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _conversation_named(scope: dict[str, Any]) -> str | None:
    """The conversation the client names for its session: ``X-Toolcore-Conversation``, else
    ``?conversation=``; None for a new one."""
    named = _header(scope, CONVERSATION_HEADER)
    if named is None:
        query = parse_qs(scope.get("query_string", b"").decode("latin1"))
        named = (query.get(CONVERSATION_QUERY) or [None])[0]
    return named.strip() if named and named.strip() else None


def _session_open(
    user: Any, named: str | None, init: InitializeRequestParams, version: str
) -> McpSession:
    conversation_id = selectors.conversation_for(user, named).pk if named else None
    return mcp_session_open(
        user=user,
        conversation_id=conversation_id,
        client_info=init.client_info.model_dump(by_alias=True, mode="json", exclude_none=True),
        capabilities=init.capabilities.model_dump(by_alias=True, mode="json", exclude_none=True),
        protocol_version=version,
    )


def _session_found(user: Any, session_id: str) -> McpSession:
    session = selectors.mcp_session_for(user, session_id)
    mcp_session_seen(session=session)
    return session


class McpApplication:
    """The ASGI application of ``/mcp`` and ``/mcp/`` (``config/asgi.py`` routes them here)."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        started = False

        async def tracked(message: dict[str, Any]) -> None:
            """Every answer of ``/mcp/`` goes out here, the SDK's included: counted in
            ``toolcore_http_responses_total`` as Django's are (its middleware never sees it)."""
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                metrics.http_answer_counted(message["status"])
            await send(message)

        try:
            await self._serve(scope, receive, tracked)
        except _Gone:
            return
        except Refusal as refusal:
            await answer(tracked, refusal.status, refusal.body, refusal.headers)
        except OUTAGES as exc:
            logger.error("MCP request unavailable: %s", exc)
            outage_noted(exc, "mcp")
            if not started:
                body = rpc_error(INTERNAL_ERROR, unavailable_message(exc))
                await answer(tracked, 503, body, [(b"retry-after", b"1")])
        except Exception:
            logger.exception("MCP request failed")
            if not started:
                await answer(tracked, 500, rpc_error(INTERNAL_ERROR, "Internal error."))

    async def _serve(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        host = _host_checked(scope)
        user = await _authenticated(scope)
        _version_checked(scope)
        method = scope["method"]
        if method == "DELETE":
            session = await self._session(scope, user, None)
            await on_database(mcp_session_end)(session_id=session.pk)
            await answer(send, 204)
            return
        if method != "POST":
            raise _refused(
                405, INVALID_REQUEST, "Method Not Allowed: POST a message.", headers=[ALLOW]
            )
        message, body = _message(await _body(scope, receive))
        base_url = _base_url(scope, host)
        if isinstance(message, JSONRPCRequest) and message.method == "initialize":
            await self._initialize(scope, receive, send, message, body, user, base_url)
            return
        request_id = message.id if isinstance(message, JSONRPCRequest) else None
        session = await self._session(scope, user, request_id)
        if isinstance(message, JSONRPCResponse | JSONRPCError):
            result = message.result if isinstance(message, JSONRPCResponse) else None
            error = message.error.message if isinstance(message, JSONRPCError) else None
            outcome = await on_database(elicitation_answered)(
                session=session, user=user, request_id=message.id, result=result, error=error
            )
            log_answer("answer", outcome, session)
            await answer(send, 202)
        elif isinstance(message, JSONRPCNotification):
            if message.method == "notifications/cancelled":
                outcome = await on_database(request_cancelled)(
                    session=session, params=message.params
                )
                log_answer("cancel", outcome, session)
            await answer(send, 202)
        else:
            await self._to_sdk(scope, receive, send, body, session, user, base_url)

    async def _session(self, scope: dict[str, Any], user: Any, request_id: Any) -> McpSession:
        session_id = _header(scope, SESSION_HEADER)
        if not session_id:
            raise _refused(
                400,
                INVALID_REQUEST,
                "Bad Request: missing Mcp-Session-Id header; initialize a session first.",
                request_id,
            )
        try:
            return await on_database(_session_found)(user, session_id[:64])
        except NotFound:
            raise _refused(404, INVALID_REQUEST, "Session not found.", request_id) from None

    async def _initialize(
        self,
        scope: dict[str, Any],
        receive: Any,
        send: Any,
        message: JSONRPCRequest,
        body: bytes,
        user: Any,
        base_url: str,
    ) -> None:
        try:
            init = InitializeRequestParams.model_validate(message.params or {}, by_name=False)
        except ValidationError:
            raise _refused(
                400, INVALID_PARAMS, "Invalid initialize parameters.", message.id
            ) from None
        version = (
            init.protocol_version
            if init.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
            else LATEST_HANDSHAKE_VERSION
        )
        named = _conversation_named(scope)
        try:
            session = await on_database(_session_open)(user, named, init, version)
        except NotFound:
            raise _refused(
                400,
                INVALID_PARAMS,
                f"Conversation {named[:64]!r} not found: the conversation a session continues "
                "(X-Toolcore-Conversation or ?conversation=) must be one of the token user's.",
                message.id,
            ) from None
        status = await self._to_sdk(scope, receive, send, body, session, user, base_url)
        if status is None or status >= 400:  # nothing established: no session to keep
            await on_database(mcp_session_end)(session_id=session.pk)

    async def _to_sdk(
        self,
        scope: dict[str, Any],
        receive: Any,
        send: Any,
        body: bytes,
        session: McpSession,
        user: Any,
        base_url: str,
    ) -> int | None:
        """The SDK answers the request, ``Mcp-Session-Id`` added to its answer; the status it
        answered with."""
        stream = ResponseStream(send, [(SESSION_HEADER, session.pk.encode())])
        token = current.set(McpRequest(session, user, base_url, stream))
        try:
            manager = await session_manager()
            await manager.handle_request(scope, _replayed(body, receive), stream.send)
        finally:
            current.reset(token)
        return stream.status
