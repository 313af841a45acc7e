"""Bodies and answers of the launch endpoints (camelCase on the wire)."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from pydantic import Field

from conversations.api.schemas.common import In, Out, ProcessStatus


class LaunchIn(In):
    name: Annotated[str, Field(min_length=1, max_length=200)]
    command: Annotated[str, Field(min_length=1, max_length=65536)]
    cwd: Annotated[str, Field(max_length=1024)] = Field(
        "", description="A directory below your workspace root (default: the root itself)."
    )


class LaunchOut(Out):
    """A workbench process, owned by you and not by a conversation."""

    id: UUID
    name: str
    command: str
    cwd: str
    status: ProcessStatus
    exitCode: int | None
    signal: str | None
    pid: int | None = Field(description="Null until a worker started it.")
    startedAt: str
    finishedAt: str | None


class LaunchPage(Out):
    items: list[LaunchOut]
    nextCursor: str | None
