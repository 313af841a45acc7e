"""ASGI entry point: HTTP (Django, with static files) and websockets (Channels) on one server."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

from config.hook_thread import SharedHookThread  # noqa: E402
from config.startup import database_check  # noqa: E402

django_application = get_asgi_application()
# Once per process: a database that does not answer stops daphne here, not at the first request.
database_check()

application = ProtocolTypeRouter(
    {
        # Static files (admin, API docs) are served here so one daphne process needs nothing else.
        # Async views (the turn barrier) share one thread for Django's sync hooks.
        "http": ASGIStaticFilesHandler(SharedHookThread(django_application)),
    }
)
