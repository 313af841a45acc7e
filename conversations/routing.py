"""Websocket routes (docs/realtime.md)."""

from django.urls import path

from .consumers import ConversationConsumer, WorkbenchConsumer

websocket_urlpatterns = [
    path("ws/conversations/", ConversationConsumer.as_asgi()),
    path("ws/workbench/", WorkbenchConsumer.as_asgi()),
]
