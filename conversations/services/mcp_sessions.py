"""MCP sessions (docs/mcp.md): opened by an MCP client's ``initialize``, seen on each of its
requests, ended by its ``DELETE`` or by retention.

A session is a row, not one process's memory: whichever daphne receives the client's next
request finds it here. One session is one conversation of the token's user: a new one titled
after the client, or one of the user's that the client named.
"""

from __future__ import annotations

import json
import secrets
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from projections.units import clean_json

from ..models import McpSession
from .conversations import conversation_create

# ``last_seen_at`` is written at most this often, so a busy session's requests stay reads.
SEEN_EVERY = timedelta(seconds=60)
TITLE_MAX_CHARACTERS = 200


def session_title(client_info: dict[str, Any]) -> str:
    """The title of a session's new conversation: the client's name and version
    (``claude-code 2.1.0``), or ``MCP client`` when it gave neither."""
    name = str(client_info.get("title") or client_info.get("name") or "").strip()
    version = str(client_info.get("version") or "").strip()
    title = " ".join(part for part in (name, version) if part) or "MCP client"
    return title[:TITLE_MAX_CHARACTERS]


def mcp_session_open(
    *,
    user: Any,
    conversation_id: UUID | str | None,
    client_info: dict[str, Any],
    capabilities: dict[str, Any],
    protocol_version: str,
) -> McpSession:
    """A new session of ``user`` with a fresh opaque id, in one transaction: on the
    conversation ``conversation_id`` (the caller checked that the user owns it), or on a new
    conversation titled after the client."""
    client_info = clean_json(client_info)  # type: ignore[assignment]
    capabilities = clean_json(capabilities)  # type: ignore[assignment]
    with transaction.atomic():
        if conversation_id is None:
            conversation = conversation_create(owner=user, title=session_title(client_info))
            conversation_id = conversation.pk
        return McpSession.objects.create(
            id=secrets.token_urlsafe(32),
            user=user,
            conversation_id=conversation_id,
            client_info=client_info,
            capabilities=capabilities,
            protocol_version=protocol_version,
            last_seen_at=timezone.now(),
        )


def mcp_session_seen(*, session: McpSession) -> None:
    """Record that the session was used now (at most once every ``SEEN_EVERY``)."""
    now = timezone.now()
    if now - session.last_seen_at > SEEN_EVERY:
        McpSession.objects.filter(pk=session.pk).update(last_seen_at=now)
        session.last_seen_at = now


# How many early cancels a session remembers: a client cancels its own recent requests.
CANCELLED_KEPT = 64


def _request_key(request_id: Any) -> str:
    """A JSON-RPC id as JSON text: ``1`` and ``"1"`` are different requests."""
    return json.dumps(request_id)


def mcp_request_cancel_note(*, session_id: str, request_id: Any) -> None:
    """Remember that the client cancelled ``request_id`` before its call existed (its
    ``notifications/cancelled`` overtook its ``tools/call`` on another connection)."""
    with transaction.atomic():
        session = McpSession.objects.select_for_update().filter(pk=session_id).first()
        if session is None:
            return
        key = _request_key(request_id)
        kept = [k for k in session.cancelled_requests or [] if k != key]
        session.cancelled_requests = [*kept, key][-CANCELLED_KEPT:]
        session.save(update_fields=["cancelled_requests"])


def mcp_request_cancelled(*, session_id: str, request_id: Any) -> bool:
    """Whether the client cancelled ``request_id`` before its call was made."""
    row = McpSession.objects.filter(pk=session_id).values_list("cancelled_requests", flat=True)
    return _request_key(request_id) in (row.first() or [])


def mcp_session_end(*, session_id: str) -> bool:
    """Forget the session (its ``DELETE``); its conversation and calls stay. False when it was
    gone already."""
    return bool(McpSession.objects.filter(pk=session_id).delete()[0])


def mcp_sessions_purge(*, older_than_days: int) -> int:
    """Delete the sessions not used for ``older_than_days`` days (retention: ``purge``)."""
    cutoff = timezone.now() - timedelta(days=older_than_days)
    return McpSession.objects.filter(last_seen_at__lt=cutoff).delete()[0]
