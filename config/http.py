"""Django's ASGI handler, with each request's synchronous work on one thread of a fixed pool.

Django's own ASGI handler runs a synchronous view the way an async server must: every
synchronous step is a hop from the event loop to a thread and back. With the stock middleware
that is a dozen hops a request (``process_request`` and ``process_response`` of each
``MiddlewareMixin``, the ``request_started`` receivers, the view, ``response.close()``), and each
request gets a new thread of its own for them (``ThreadSensitiveContext``), started and joined
per request. Measured through daphne on PostgreSQL, a REST append cost 13 ms of CPU that way
against under 6 ms for the same request in-process: the hops, not the work.

So here a request served by a synchronous view (nearly all of them: the REST API, the admin,
the web pages) runs the whole of Django's synchronous handler — signals, middleware, view —
in one go on one of ``TOOLCORE_HTTP_THREADS`` long-lived threads, as a threaded WSGI server
would; only reading the body and sending the response stay on the event loop. The threads are
bounded, so a burst of requests queues instead of starting a thread (and taking a database
connection) each. Connections are given back at the end of each request on the thread that used
them (``request_finished``), as in any Django deployment.

A request served by an async view (the turn barrier, which may wait 60 s) keeps Django's async
path, with its synchronous middleware hooks on one thread shared by all such requests (see
``_AsyncViewHooks``) instead of one idle thread per waiter; its database work runs through
``conversations.detached``.

Streaming responses (asset downloads) are sent as they are read, one part at a time read on a
pool thread, and stop when the client goes away; Django's handler would read a synchronous
stream whole into memory before sending any of it.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext, iscoroutinefunction
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.base import BaseHandler
from django.urls import resolve, set_script_prefix

from conversations.api.outages import OUTAGES, unavailable_response

logger = logging.getLogger(__name__)

# The synchronous hooks of requests served by async views: one thread for all of them.
_async_view_hooks = ThreadPoolExecutor(max_workers=1, thread_name_prefix="toolcore-async-hooks")


def _served_by_async_view(scope: dict[str, Any]) -> bool:
    path = scope["path"].removeprefix(scope.get("root_path", ""))
    try:
        match = resolve(path)
    except Exception:  # noqa: BLE001 - a 404 or worse: Django answers it as usual
        return False
    return iscoroutinefunction(match.func)


class _SyncHandler(BaseHandler):
    """Django's handler in synchronous mode: the middleware chain without async adapters."""

    def __init__(self) -> None:
        super().__init__()
        self.load_middleware(is_async=False)


class PooledASGIHandler(ASGIHandler):
    """``django.core.asgi.get_asgi_application()``, serving synchronous views on a thread pool."""

    def __init__(self, threads: int | None = None) -> None:
        super().__init__()  # the async chain, for async views
        self._sync = _SyncHandler()
        self.threads = threads or settings.TOOLCORE_HTTP_THREADS
        self._pool = ThreadPoolExecutor(
            max_workers=self.threads, thread_name_prefix="toolcore-http"
        )

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        if _served_by_async_view(scope):
            # Django's own per-request context, entered inside this one, then does nothing: the
            # hooks of every waiter share one thread.
            async with ThreadSensitiveContext(executor=_async_view_hooks):
                await super().__call__(scope, receive, send)
            return
        await self._handle_sync(scope, receive, send)

    async def _handle_sync(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        loop = asyncio.get_running_loop()
        try:
            response = await loop.run_in_executor(self._pool, self._respond, scope, body_file)
            if not response.streaming:
                await self.send_response(response, send)
                return
            try:
                await self._send_stream(response, receive, send)
            finally:
                await loop.run_in_executor(self._pool, response.close)
        finally:
            body_file.close()

    async def _send_stream(self, response: Any, receive: Any, send: Any) -> None:
        """A streaming response, sent as it is read, until it ends or the client goes away.

        Django's own ``send_response`` would first read a synchronous iterator (an asset's file)
        whole into memory; here each part is read on a pool thread when it is to be sent."""
        sending = asyncio.ensure_future(
            self.send_response(response, send)
            if response.is_async
            else self._send_sync_stream(response, send)
        )
        gone = asyncio.ensure_future(self._disconnected(receive))
        try:
            await asyncio.wait({sending, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sending, gone):
                task.cancel()
            await asyncio.gather(sending, gone, return_exceptions=True)
        if sending.done() and not sending.cancelled() and sending.exception() is not None:
            raise sending.exception()

    @staticmethod
    async def _disconnected(receive: Any) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    async def _send_sync_stream(self, response: Any, send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": response.status_code,
                "headers": _headers(response),
            }
        )
        loop = asyncio.get_running_loop()
        parts = iter(response.streaming_content)
        while True:
            part = await loop.run_in_executor(self._pool, next, parts, _END)
            if part is _END:
                break
            for chunk, _ in self.chunk_bytes(part):
                if chunk:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body"})

    def _respond(self, scope: dict[str, Any], body_file: Any) -> Any:
        """Django's synchronous request cycle, on a pool thread: the response, closed (the
        connections this thread used go back) unless it streams."""
        set_script_prefix(get_script_prefix(scope))
        request = None
        try:
            signals.request_started.send(sender=self.__class__, scope=scope)
            request, response = self.create_request(scope, body_file)
            if request is not None:
                response = self._sync.get_response(request)
                response._handler_class = self.__class__
        except OUTAGES as exc:
            # Raised outside the middleware (a signal's receiver giving a dead connection back):
            # the same 503 as everywhere else, not daphne's bare 500.
            response = unavailable_response(request, exc)
        try:
            if not response.streaming:
                # Its content is in memory: close it here, on the thread that made it, so that
                # request_finished gives back this thread's database connections.
                response.close()
            else:
                # The stream is read part by part later (and closed then): this thread's work
                # is done, so its connections go back now.
                signals.request_finished.send(sender=self.__class__)
        except OUTAGES as exc:
            # The answer stands (whatever it did was committed or rolled back already); the
            # pool drops a connection it cannot take back.
            logger.warning("giving the database connections back failed: %s", exc)
        return response


_END = object()


def _headers(response: Any) -> list[tuple[bytes, bytes]]:
    """The response's headers and cookies as ASGI wants them (as Django's handler makes them)."""
    headers = []
    for name, value in response.items():
        if isinstance(name, str):
            name = name.encode("ascii")
        if isinstance(value, str):
            value = value.encode("latin1")
        headers.append((bytes(name), bytes(value)))
    for cookie in response.cookies.values():
        headers.append((b"Set-Cookie", cookie.output(header="").encode("ascii").strip()))
    return headers
