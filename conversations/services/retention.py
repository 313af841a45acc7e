"""Retention: deleting old ended conversations and files of attempts that never settled."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path
from uuid import UUID

from django.utils import timezone

from ..models import Asset, Conversation, ToolCall, Turn
from ..storage import data_dir
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


def _uuid(name: str) -> UUID | None:
    try:
        return UUID(name)
    except ValueError:
        return None


def orphans_purge() -> list[Path]:
    """Remove attempt folders no asset row points into and no unfinished call still owns, and
    folders of conversations that no longer exist. Returns what was removed."""
    root = data_dir() / "conversations"
    if not root.is_dir():
        return []
    removed: list[Path] = []
    for folder in sorted(root.iterdir()):
        conversation_id = _uuid(folder.name)
        if conversation_id is None:
            continue
        if not Conversation.objects.filter(pk=conversation_id).exists():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
            continue
        for attempt in sorted(folder.glob("tool-calls/*/g*")):
            call_id, generation = _uuid(attempt.parent.name), attempt.name[1:]
            if call_id is None or not generation.isdigit():
                continue
            if ToolCall.objects.filter(pk=call_id, generation=int(generation)).exists():
                continue  # the current attempt of an unfinished call: still being written
            prefix = str(attempt.relative_to(data_dir())) + "/"
            if Asset.objects.filter(tool_call_id=call_id, path__startswith=prefix).exists():
                continue
            shutil.rmtree(attempt, ignore_errors=True)
            removed.append(attempt)
    return removed
