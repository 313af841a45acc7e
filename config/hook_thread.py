"""One shared thread for the sync hooks of the requests that async views serve.

Django's ASGI handler gives every request a thread of its own for thread-sensitive sync code —
the ``MiddlewareMixin`` hooks (security, sessions, CSRF, ...) and the ``request_started`` /
``request_finished`` receivers — and keeps it until the response is sent. A sync view runs on
that thread, so there it earns its keep. An async view does not use it: while the turn barrier
waits (up to 60 s) the thread only sits there, one per waiter. So a request that resolves to an
async view runs those hooks on one thread shared by all such requests instead. The hooks are
short, never wait for another request, and what they leave on the thread (a database
connection, when a session is saved) is closed by ``request_finished`` as usual.

Everything thread-sensitive in such a request lands on the shared thread, so an async view
does its database work with ``conversations.detached`` (never a plain ``sync_to_async``), and a
sync operation on the same path as an async one (django-ninja then serves the whole path with an
async view) would be serialised there too: keep waiting endpoints on paths of their own.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext, iscoroutinefunction
from django.urls import resolve

_hooks = ThreadPoolExecutor(max_workers=1, thread_name_prefix="toolcore-async-hooks")


def _served_by_async_view(scope: dict[str, Any]) -> bool:
    path = scope["path"].removeprefix(scope.get("root_path", ""))
    try:
        match = resolve(path)
    except Exception:  # noqa: BLE001 - a 404 or worse: Django answers it as usual
        return False
    return iscoroutinefunction(match.func)


class SharedHookThread:
    """ASGI middleware: async views' requests share one thread for thread-sensitive work."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and _served_by_async_view(scope):
            # Django's own per-request context, entered inside this one, then does nothing.
            async with ThreadSensitiveContext(executor=_hooks):
                await self.application(scope, receive, send)
        else:
            await self.application(scope, receive, send)
