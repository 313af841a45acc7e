"""The MCP sessions of a worker process: one client session per server it uses, held on an
asyncio event loop in a background thread of the process, shared by every worker in it.

Why a thread of its own: a session (the SDK's ``Client``) lives in one task from its connect to
its close (anyio task groups), beyond any one call, while the workers run their calls as tasks
of their own loops (several workers may share the web process). Each session's task connects,
lists the server's tools and stores them, then waits until told to close; a call from a worker
is handed to this loop (``McpSessions.call``), and cancelling the worker's task cancels the
call here, which makes the SDK send the server ``notifications/cancelled``.

A session whose connection ended (a stdio server that died, an HTTP server gone) is dropped;
the next call connects again, which starts a stdio server anew. A server whose configuration
changed gets a new session; the old one closes once its calls are over.

``notifications/tools/list_changed`` (and, on a 2026-07-28 connection, the
``subscriptions/listen`` stream the session opens for it when the server offers it) makes the
session list the tools again and store them.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from django.db import connections
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .connection import CONNECT_SECONDS, error_text, mcp_connect, tools_list
from .server_config import ServerConfig
from .services import mcp_tools_failed, mcp_tools_store

logger = logging.getLogger(__name__)

# How long closing every session may take when the process stops.
CLOSE_SECONDS = 8.0
# A call's own timeout is the SDK's, which tells the server to stop (notifications/cancelled);
# this much more bounds the whole call, should the server never answer that either.
GRACE_SECONDS = 5.0
# A list-changes stream that ended is opened again this long after.
RELISTEN_SECONDS = 1.0


class ServerGone(Exception):
    """The connection to the server ended during the call (a stdio server that died)."""


class CallTimedOut(Exception):
    """The server did not answer the call within its timeout (it was told to stop)."""


class ConnectFailed(Exception):
    """The server could not be started or reached; nothing was sent to it."""


async def _in_thread(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Database work off the sessions' loop, the connection given back."""

    def job() -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            connections.close_all()

    return await asyncio.to_thread(job)


@dataclass(eq=False)
class _Session:
    config: ServerConfig
    connected: asyncio.Future[Client]
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    refresh_wanted: asyncio.Event = field(default_factory=asyncio.Event)
    calls: int = 0
    task: asyncio.Task[None] | None = None

    @property
    def key(self) -> str:
        return self.config.fingerprint

    @property
    def ended(self) -> bool:
        """Whether its connection ended (the server died or hung up) while it sat idle.

        The SDK says so only to a request (``CONNECTION_CLOSED``), which for a stdio server
        that died between two calls would fail the next call instead of starting the server
        again: so its dispatcher's flag is read (``mcp`` is pinned to 2.3.x in pyproject)."""
        if not self.connected.done() or self.connected.cancelled():
            return False
        if self.connected.exception() is not None:
            return True
        dispatcher = getattr(self.connected.result().session, "_dispatcher", None)
        return bool(getattr(dispatcher, "_closed", False))

    def close(self) -> None:
        self.closing.set()


class McpSessions:
    """The process's sessions, by server id (``mcp_sessions()``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sessions: dict[int, _Session] = {}

    # --- from any thread ------------------------------------------------------------------

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="toolcore-mcp-sessions", daemon=True
                )
                thread.start()
                self._loop = loop
            return self._loop

    def submit(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coro`` on the sessions' loop; a concurrent future."""
        return asyncio.run_coroutine_threadsafe(coro, self._ensure_loop())

    async def call(
        self, config: ServerConfig, tool: str, arguments: dict[str, Any], *, timeout: float
    ) -> types.CallToolResult:
        """Call ``tool`` on the server (connecting first when needed), from any event loop.
        ``CallTimedOut``, ``ServerGone``, ``ConnectFailed``, or the server's ``MCPError``;
        cancelling the caller cancels the call on the server."""
        future = self.submit(self._call(config, tool, arguments, timeout))
        return await asyncio.wrap_future(future)

    def close_all(self, timeout: float = CLOSE_SECONDS) -> None:
        """Close every session (stdio servers stopped), waiting at most ``timeout``."""
        loop = self._loop
        if loop is None or loop.is_closed() or not loop.is_running():
            return
        future = asyncio.run_coroutine_threadsafe(self._close_all(), loop)
        with contextlib.suppress(Exception):
            future.result(timeout)

    # --- on the sessions' loop --------------------------------------------------------------

    async def _close_all(self) -> None:
        sessions = list(self._sessions.values())
        self._sessions.clear()
        for session in sessions:
            session.close()
        await asyncio.gather(*(s.task for s in sessions if s.task), return_exceptions=True)

    async def _session(self, config: ServerConfig) -> _Session:
        """The live session of the server with this configuration, connecting if needed."""
        session = self._sessions.get(config.id)
        if session is not None and (
            session.key != config.fingerprint or session.closing.is_set() or session.ended
        ):
            self._sessions.pop(config.id, None)
            if session.calls == 0:
                session.close()
            session = None
        if session is None:
            session = _Session(config, asyncio.get_running_loop().create_future())
            # A connect that failed is told to the calls waiting; none may wait.
            session.connected.add_done_callback(lambda f: f.cancelled() or f.exception())
            self._sessions[config.id] = session
            session.task = asyncio.create_task(self._hold(session), name=f"mcp {config.name}")
        return session

    def _drop(self, session: _Session) -> None:
        if self._sessions.get(session.config.id) is session:
            self._sessions.pop(session.config.id, None)
        if session.calls == 0:
            session.close()

    async def _call(
        self, config: ServerConfig, tool: str, arguments: dict[str, Any], timeout: float
    ) -> types.CallToolResult:
        session = await self._session(config)
        session.calls += 1
        try:
            try:
                client = await asyncio.shield(session.connected)
            except Exception as exc:
                raise ConnectFailed(error_text(exc)) from None
            try:
                async with asyncio.timeout(timeout + GRACE_SECONDS):
                    return await client.call_tool(tool, arguments, read_timeout_seconds=timeout)
            except MCPError as exc:
                if exc.error.code == REQUEST_TIMEOUT:
                    raise CallTimedOut from None
                if exc.error.code == CONNECTION_CLOSED:
                    self._drop(session)
                    raise ServerGone from None
                raise
            except TimeoutError:
                raise CallTimedOut from None
        finally:
            session.calls -= 1
            if session.calls == 0 and self._sessions.get(config.id) is not session:
                session.close()

    async def _hold(self, session: _Session) -> None:
        """The session's life: connect, list and store the tools, follow their changes, wait
        until told to close."""
        config = session.config

        async def on_message(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                session.refresh_wanted.set()
            elif isinstance(message, Exception):
                logger.info(
                    "MCP transport: %s", error_text(message), extra={"mcp_server": config.name}
                )

        try:
            async with mcp_connect(config, message_handler=on_message) as client:
                session.refresh_wanted.set()  # the first listing
                helpers = [asyncio.create_task(self._refresh_when_asked(session, client))]
                if _offers_list_changed(client):
                    # Listening before the first call: a change that call makes is heard.
                    listening = asyncio.Event()
                    helpers.append(asyncio.create_task(_listen(session, client, listening)))
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(CONNECT_SECONDS):
                            await listening.wait()
                session.connected.set_result(client)
                logger.info("MCP session open", extra={"mcp_server": config.name})
                try:
                    await session.closing.wait()
                finally:
                    for helper in helpers:
                        helper.cancel()
                    await asyncio.gather(*helpers, return_exceptions=True)
        except BaseException as exc:  # noqa: BLE001 - told to the waiting calls
            if not session.connected.done():
                session.connected.set_exception(
                    exc if isinstance(exc, Exception) else ConnectFailed(type(exc).__name__)
                )
            if not isinstance(exc, Exception):
                raise
            logger.warning(
                "MCP session ended: %s", error_text(exc), extra={"mcp_server": config.name}
            )
        finally:
            self._drop(session)
            logger.info("MCP session closed", extra={"mcp_server": config.name})

    async def _refresh_when_asked(self, session: _Session, client: Client) -> None:
        """List the tools and store them each time a change was announced (and once first)."""
        while True:
            await session.refresh_wanted.wait()
            session.refresh_wanted.clear()
            try:
                tools = await tools_list(client)
            except MCPError as exc:
                if exc.error.code == CONNECTION_CLOSED:
                    self._drop(session)
                    return
                await _in_thread(
                    mcp_tools_failed,
                    server_id=session.config.id,
                    error=f"Listing its tools failed: {error_text(exc)}",
                )
                continue
            except Exception as exc:  # noqa: BLE001 - the next change tries again
                logger.warning(
                    "MCP tools not listed: %s",
                    error_text(exc),
                    extra={"mcp_server": session.config.name},
                )
                continue
            await _in_thread(mcp_tools_store, server_id=session.config.id, tools=tools)


def _offers_list_changed(client: Client) -> bool:
    tools = client.server_capabilities.tools
    return (
        client.protocol_version in MODERN_PROTOCOL_VERSIONS
        and tools is not None
        and bool(tools.list_changed)
    )


async def _listen(session: _Session, client: Client, listening: asyncio.Event) -> None:
    """On a 2026-07-28 connection a server sends its list changes only on a
    ``subscriptions/listen`` stream: hold one open (each event also reaches ``on_message``);
    ``listening`` is set once the server acknowledged it, or it failed. A stream that ends
    after it was acknowledged (an HTTP stream's read timeout) is opened again, and the tools
    listed again: the protocol replays nothing."""
    while True:
        acknowledged = False
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                acknowledged = True
                listening.set()
                async for _event in subscription:
                    session.refresh_wanted.set()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - changes are then seen at the next connect
            listening.set()
            if not acknowledged or session.ended:
                logger.info(
                    "MCP list changes not followed: %s",
                    error_text(exc),
                    extra={"mcp_server": session.config.name},
                )
                return
        listening.set()
        session.refresh_wanted.set()
        await asyncio.sleep(RELISTEN_SECONDS)


_SESSIONS = McpSessions()


def mcp_sessions() -> McpSessions:
    """The sessions of this process."""
    return _SESSIONS


atexit.register(_SESSIONS.close_all)
