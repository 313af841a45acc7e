"""ASGI entry point: HTTP (Django, with static files) and websockets (Channels) on one server."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

django.setup(set_prefix=False)

from config.access_log import access_log_install  # noqa: E402

# daphne's access log as log lines of the configured format (JSON with DEBUG off), not plain
# text on stdout: its command line builds its access logger after importing this module.
access_log_install()

from config.http import PooledASGIHandler  # noqa: E402
from config.startup import database_check  # noqa: E402

# Django's ASGI handler, serving synchronous views on a pool of threads (config/http.py).
django_application = PooledASGIHandler()
# Once per process: a database that does not answer stops daphne here, not at the first request.
database_check()
# The embedded default runs its tool workers in this process (TOOLCORE_WORKERS); imported once
# Django is set up, as the runtime needs the models.
from tools.runtime.embedded import embedded_workers_start  # noqa: E402

embedded_workers_start(settings.TOOLCORE_WORKERS)

from config.backlog import TransportBacklog  # noqa: E402
from config.routing import websocket_urlpatterns  # noqa: E402
from conversations.mcp.transport import McpApplication  # noqa: E402
from conversations.realtime.ws_auth import BrowserOriginValidator, WebsocketAuthMiddleware  # noqa: E402

MCP_PATHS = frozenset({"/mcp", "/mcp/"})


class HttpRouter:
    """``/mcp`` and ``/mcp/`` to the MCP endpoint (docs/mcp.md), everything else to Django."""

    def __init__(self, mcp, django_app) -> None:
        self.mcp = mcp
        self.django_app = django_app

    async def __call__(self, scope, receive, send):
        app = self.mcp if scope.get("path") in MCP_PATHS else self.django_app
        return await app(scope, receive, send)


application = ProtocolTypeRouter(
    {
        # Static files (admin, API docs) are served here so one daphne process needs nothing else;
        # the MCP endpoint (Streamable HTTP, docs/mcp.md) is served by the same process.
        "http": HttpRouter(McpApplication(), ASGIStaticFilesHandler(django_application)),
        # Websockets (docs/realtime.md): a browser's Origin must be one of ALLOWED_HOSTS; the
        # bearer header or the session cookie (same origin only) says who it is; the backlog
        # probe lets the consumers spare a socket that does not read.
        "websocket": BrowserOriginValidator(
            TransportBacklog(WebsocketAuthMiddleware(URLRouter(websocket_urlpatterns)))
        ),
    }
)
