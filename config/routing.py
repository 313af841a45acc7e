"""Every websocket route (docs/realtime.md): the core's (``conversations/realtime/routing.py``) and the
workbench's, which is the runtime's (``tools/runtime/launches/consumer.py``)."""

from django.urls import path

from conversations.realtime.routing import websocket_urlpatterns as conversation_routes
from tools.runtime.launches.consumer import WorkbenchConsumer

websocket_urlpatterns = [
    *conversation_routes,
    path("ws/workbench/", WorkbenchConsumer.as_asgi()),
]
