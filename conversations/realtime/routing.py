"""The core's websocket routes (docs/realtime.md); ``config/routing.py`` adds the runtime's."""

from django.urls import path

from .conversation import ConversationConsumer

websocket_urlpatterns = [
    path("ws/conversations/", ConversationConsumer.as_asgi()),
]
