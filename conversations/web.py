"""The web pages: the user's conversations, a conversation's transcript, the workbench, the
page a locked-out login gets, and the site's icon.

Thin views (docs/web.md): they check who is asking and hand the page what it needs to start;
the page's script then reads the REST API with the session (and the CSRF header for writes) and
follows the websockets. Nothing here writes.
"""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.staticfiles import finders
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_safe

from tools.catalog import MCP_TOOL_NAME

from . import selectors
from .api.throttle import Lockout, client_address, cooloff, login_unlock_at
from .errors import NotFound, ValidationFailed
from .grants import may_run_commands

CONVERSATIONS_PER_PAGE = 50
API_BASE = "/api/v1"
FAVICON = "toolcore/favicon.ico"
FAVICON_CACHE_SECONDS = 86_400


def _page_config(request: HttpRequest, **extra: Any) -> dict[str, Any]:
    """What every page's script starts from (read with ``json_script``)."""
    return {
        "api": API_BASE,
        "username": request.user.get_username(),
        "canRunCommands": may_run_commands(request.user),
        # How the cards tell an MCP server's tool (tools/catalog.py: one pattern for both).
        "mcpToolName": MCP_TOOL_NAME.pattern,
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
    # How to add this server to an MCP client (docs/mcp.md): its own address, as the browser
    # reached it.
    mcp_url = request.build_absolute_uri("/mcp/")
    return render(request, "web/conversations.html", {"page": page, "mcp_url": mcp_url})


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


@require_safe
def favicon(request: HttpRequest) -> HttpResponse:
    """``/favicon.ico``: the site's icon (16, 32 and 48 px), for what asks the root for it:
    the admin's and the API docs' pages, a browser showing a JSON answer. The pages and the
    admin also link ``toolcore/favicon.svg``."""
    path = finders.find(FAVICON)
    with open(path, "rb") as icon:  # 3 KiB
        response = HttpResponse(icon.read(), content_type="image/x-icon")
    response["Cache-Control"] = f"public, max-age={FAVICON_CACHE_SECONDS}"
    return response


def login_locked_out(
    request: HttpRequest, original_response: Any = None, credentials: Any = None
) -> HttpResponse:
    """What django-axes answers a login from a locked-out address (``AXES_LOCKOUT_CALLABLE``),
    on the pages' and the admin's login alike: 429, a page saying why and when to try again,
    and ``Retry-After``."""
    until = login_unlock_at(request, credentials)
    address = client_address(request)
    lockout = Lockout(address or "", until or timezone.now() + cooloff())
    context = {
        "address": address,
        "until": lockout.until,
        "minutes": math.ceil(lockout.retry_after / 60),
        "failures": settings.TOOLCORE_LOCKOUT_FAILURES,
        "window": settings.TOOLCORE_LOCKOUT_MINUTES,
        "login_url": request.path,
    }
    response = render(request, "registration/locked_out.html", context, status=429)
    response["Retry-After"] = str(lockout.retry_after)
    return response
