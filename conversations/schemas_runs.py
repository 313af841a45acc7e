"""The async run on the wire (camelCase): the async-run endpoints answer it, and a snapshot lists
the conversation's running ones."""

from __future__ import annotations

from uuid import UUID

from pydantic import Field

from .schemas_common import Out, ProcessStatus


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
