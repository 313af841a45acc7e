"""Creating and deleting conversations."""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID, uuid4

from django.db import transaction

from projections.units import clean_text

from ..errors import NotFound
from ..models import Conversation, ToolCall
from ..storage import asset_store, remove_conversation_files, resolve_workspace
from .cancel import call_cancel
from .participants import delete_participants
from .runners import READY, announce

logger = logging.getLogger(__name__)


def conversation_create(
    *, owner: Any, title: str = "", workspace: str | None = None
) -> Conversation:
    """A new conversation; its workspace (default: its id) is created on first use and must
    resolve inside the owner's workspace root (422 otherwise)."""
    conversation_id = uuid4()
    workspace = clean_text(workspace) if workspace else str(conversation_id)
    resolve_workspace(owner.pk, workspace)
    return Conversation.objects.create(
        id=conversation_id, owner=owner, title=clean_text(title or ""), workspace=workspace
    )


def conversation_delete(*, conversation_id: UUID | str) -> None:
    """Cancel what is open (Cancel rules) and kill its background runs, then delete the
    conversation, its events and files."""
    if not Conversation.objects.filter(pk=conversation_id).exists():
        raise NotFound("Conversation not found.")
    for call_id in ToolCall.objects.filter(conversation_id=conversation_id).values_list(
        "id", flat=True
    ):
        call_cancel(call_id=call_id)
    # Its background runs go too: their watchers kill their process groups (the runtime's
    # delete participants).
    for participant in delete_participants():
        participant(conversation_id)
    with transaction.atomic():
        # Lock the row first: a transaction still inserting a row that points at it (a run's
        # watcher recording its output, a settlement) finishes before the rows to delete are
        # collected, and a later one waits for the delete (and then finds nothing to point at),
        # instead of the delete failing its foreign-key check at commit on PostgreSQL.
        list(Conversation.objects.select_for_update().filter(pk=conversation_id).values("pk"))
        Conversation.objects.filter(pk=conversation_id).delete()
        transaction.on_commit(lambda: _files_remove(conversation_id))


def _files_remove(conversation_id: UUID | str) -> None:
    """A deleted conversation's files: its folder in ``DATA_DIR``, and its objects when assets
    are kept in object storage (a store that cannot be reached now leaves them to
    ``purge_orphans``: they belong to no conversation)."""
    remove_conversation_files(conversation_id)
    store = asset_store()
    if store.name != "local":
        try:
            store.remove_conversation(conversation_id)
        except OSError as exc:
            logger.warning("the objects of deleted conversation %s stay: %s", conversation_id, exc)


def conversations_host_release(*, host: str) -> int:
    """Give up the conversations pinned to ``host``, a host gone with their workspaces
    (recovery, ``tools/runtime/presence.py``): each unpinned, ``lost_host`` naming it, so its
    next call settles failed saying so (``Taken.lost_host``) and the ones after run on any host.
    The workers are woken for the calls that waited for the host. How many were released."""
    with transaction.atomic():
        waiting = (
            ToolCall.objects.filter(state=ToolCall.State.READY, conversation__host=host)
            .values_list("tool_name", flat=True)
            .distinct()
        )
        for tool_name in set(waiting):
            announce(READY, tool_name)
        return Conversation.objects.filter(host=host).update(host="", lost_host=host)
