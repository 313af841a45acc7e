"""Websocket routes (docs/realtime.md)."""

from django.urls import path

from .conversation import ConversationConsumer
from .workbench import WorkbenchConsumer

websocket_urlpatterns = [
    path("ws/conversations/", ConversationConsumer.as_asgi()),
    path("ws/workbench/", WorkbenchConsumer.as_asgi()),
]
