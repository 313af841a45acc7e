"""Retention: deleting old ended conversations and files of attempts that never settled."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

from django.utils import timezone

from ..models import Conversation, ToolCall, Turn
from ..orphans import orphan_folders
from .conversations import conversation_delete


def conversations_purge(*, older_than_days: int) -> int:
    """Delete conversations with nothing open whose last change is older than the cutoff."""
    cutoff = timezone.now() - timedelta(days=older_than_days)
    open_ids = Turn.objects.filter(status=Turn.Status.OPEN).values("conversation_id")
    busy_ids = ToolCall.objects.values("conversation_id")
    old = (
        Conversation.objects.filter(updated_at__lt=cutoff)
        .exclude(pk__in=open_ids)
        .exclude(pk__in=busy_ids)
        .values_list("pk", flat=True)
    )
    count = 0
    for conversation_id in list(old):
        conversation_delete(conversation_id=conversation_id)
        count += 1
    return count


def orphans_purge() -> list[Path | str]:
    """Remove attempt folders no asset row points into and no unfinished call still owns, and
    folders of conversations that no longer exist (``conversations/orphans.py``), and the same
    of the bucket when assets are kept in object storage. Returns what was removed."""
    removed: list[Path | str] = []
    for orphan in orphan_folders():
        if orphan.store is None:
            shutil.rmtree(orphan.path, ignore_errors=True)
        else:  # the objects of an attempt, or of a deleted conversation, in object storage
            orphan.store.remove(str(orphan.path))
        removed.append(orphan.path if orphan.store is None else str(orphan))
    return removed
