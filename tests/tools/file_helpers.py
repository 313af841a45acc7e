"""A ``CallContext`` for the path tools, on real files under the test's DATA_DIR and workspaces."""

from __future__ import annotations

import uuid
from pathlib import Path

from django.conf import settings

from conversations.storage import conversation_dir
from tools.runtime.base import CallContext


async def _no_update(fields: dict) -> None:
    return None


def call_context(tool_name: str, arguments: dict, *, workspace: Path | None = None) -> CallContext:
    """A claimed call of ``tool_name`` in a conversation whose workspace is not created yet."""
    conversation_id = uuid.uuid4()
    call_id = uuid.uuid4()
    if workspace is None:
        workspace = Path(settings.TOOLCORE_WORKSPACE_ROOT) / "1" / f"ws-{conversation_id.hex[:8]}"
    return CallContext(
        call_id=call_id,
        conversation_id=conversation_id,
        owner_id=1,
        tool_name=tool_name,
        arguments=arguments,
        generation=1,
        token=uuid.uuid4(),
        worker="test",
        workspace=workspace,
        managed_root=conversation_dir(conversation_id),
        attempt_dir=conversation_dir(conversation_id) / "tool-calls" / str(call_id) / "g1",
        update=_no_update,
    )


def with_arguments(ctx: CallContext, tool_name: str, arguments: dict) -> CallContext:
    """Another call of the same conversation (same workspace and managed files)."""
    return CallContext(
        call_id=uuid.uuid4(),
        conversation_id=ctx.conversation_id,
        owner_id=ctx.owner_id,
        tool_name=tool_name,
        arguments=arguments,
        generation=1,
        token=uuid.uuid4(),
        worker="test",
        workspace=ctx.workspace,
        managed_root=ctx.managed_root,
        attempt_dir=ctx.attempt_dir,
        update=ctx.update,
    )
