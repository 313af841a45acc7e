"""Where tools work: each owner's workspace root and a conversation's workspace in it.

Beside the catalog and the permission port (which resolves path rules against the workspace),
below the durable core, which stores a conversation's workspace as a path relative to its
owner's root.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings


def owner_workspace_root(owner_id: int | str) -> Path:
    """``TOOLCORE_WORKSPACE_ROOT/<owner id>``: everything of one owner's conversations."""
    return Path(settings.TOOLCORE_WORKSPACE_ROOT) / str(owner_id)


def conversation_workspace(conversation: Any) -> Path:
    """The conversation's workspace directory (its ``workspace`` below its owner's root)."""
    return owner_workspace_root(conversation.owner_id) / conversation.workspace
