"""Schemas of the launch endpoints and of the log pages of runs and launches (camelCase on the
wire); an async run itself is ``api/schemas/runs.py``'s ``AsyncRunOut``."""

from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

from ninja import Schema
from pydantic import Field

from .api.schemas.common import In, Out, ProcessStatus

Stream = Literal["output", "stdout", "stderr"]


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
