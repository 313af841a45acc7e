"""Schemas of the async-run and launch endpoints (camelCase on the wire)."""

from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

from ninja import Schema
from pydantic import Field

from .schemas_common import In, Out, ProcessStatus

Stream = Literal["output", "stdout", "stderr"]


class AsyncRunOut(Out):
    """A background shell command, started by a `bash` call."""

    id: UUID
    conversationId: UUID
    toolCallId: UUID = Field(description="The `bash` call that started it.")
    command: str
    cwd: str
    status: ProcessStatus
    exitCode: int | None
    signal: str | None = Field(description='The signal that ended it, e.g. "SIGKILL".')
    pid: int | None
    startedAt: str
    finishedAt: str | None
    noticeSequence: int | None = Field(description="The sequence of its `async_bash_event`.")
    acknowledged: bool


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


class LogQuery(Schema):
    stream: Stream = "output"
    offset: Annotated[int, Field(ge=0)] | None = None
    limit: Annotated[int, Field(ge=1, le=500)] = 100
