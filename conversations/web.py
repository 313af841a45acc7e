"""The web pages: the user's conversations, a conversation's transcript, the workbench.

Thin views (docs/web.md): they check who is asking and hand the page what it needs to start;
the page's script then reads the REST API with the session (and the CSRF header for writes) and
follows the websockets. Nothing here writes.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie

from . import selectors
from .errors import NotFound, ValidationFailed
from .grants import may_run_commands

CONVERSATIONS_PER_PAGE = 50
API_BASE = "/api/v1"


def _page_config(request: HttpRequest, **extra: Any) -> dict[str, Any]:
    """What every page's script starts from (read with ``json_script``)."""
    return {
        "api": API_BASE,
        "username": request.user.get_username(),
        "canRunCommands": may_run_commands(request.user),
        **extra,
    }


@login_required
def conversation_list(request: HttpRequest) -> HttpResponse:
    """``/``: the user's conversations, newest first, with what waits on the user."""
    try:
        page = selectors.conversations_overview(
            request.user, cursor=request.GET.get("cursor") or None, limit=CONVERSATIONS_PER_PAGE
        )
    except ValidationFailed as exc:
        raise Http404("No such page.") from exc
    return render(request, "web/conversations.html", {"page": page})


@login_required
@ensure_csrf_cookie
def conversation_page(request: HttpRequest, conversation_id: Any) -> HttpResponse:
    """``/c/<id>/``: the transcript; another owner's conversation is a 404 like a missing one."""
    try:
        conversation = selectors.conversation_for(request.user, conversation_id)
    except NotFound as exc:
        raise Http404("Conversation not found.") from exc
    config = _page_config(
        request,
        conversationId=str(conversation.pk),
        title=conversation.title,
        socket="/ws/conversations/",
    )
    return render(
        request, "web/conversation.html", {"conversation": conversation, "config": config}
    )


@login_required
@ensure_csrf_cookie
def workbench_page(request: HttpRequest) -> HttpResponse:
    """``/workbench/``: the user's launches, started, stopped and followed live."""
    config = _page_config(request, socket="/ws/workbench/")
    return render(request, "web/workbench.html", {"config": config})
