"""Input and output schemas of the REST API (camelCase on the wire)."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from ninja import Schema
from pydantic import ConfigDict, Field, StrictBool, StrictInt

_ID = Annotated[str, Field(min_length=1, max_length=255)]


class In(Schema):
    model_config = ConfigDict(extra="forbid")


class ConversationIn(In):
    title: Annotated[str, Field(max_length=200)] | None = None
    workspace: Annotated[str, Field(min_length=1, max_length=1024)] | None = None


class ConversationOut(Schema):
    id: str
    title: str
    workspace: str
    lastSequence: int
    createdAt: str


class ConversationPage(Schema):
    items: list[ConversationOut]
    nextCursor: str | None


class TextBlock(In):
    type: Literal["text"]
    text: str


class ToolCallBlock(In):
    type: Literal["tool_call"]
    id: _ID
    name: Annotated[str, Field(min_length=1, max_length=256)]
    arguments: dict[str, Any]


Block = Annotated[TextBlock | ToolCallBlock, Field(discriminator="type")]


class MessageIn(In):
    messageId: _ID
    role: Literal["user", "assistant"]
    turnId: UUID | None = None
    content: Annotated[list[Block], Field(max_length=1000)]


class CommandIn(In):
    inputId: _ID
    command: Annotated[str, Field(min_length=1, max_length=65536)]
    includeInContext: StrictBool


class TurnEndIn(In):
    reason: Literal["completed", "stopped"] = "completed"


class QueueAckIn(In):
    upTo: Annotated[StrictInt, Field(ge=0)]


class ApprovalIn(In):
    requestId: _ID
    kind: Literal["approval"]
    decision: Literal["allow", "deny"]
    persist: StrictBool = False


class InputIn(In):
    requestId: _ID
    kind: Literal["input"]
    value: dict[str, Any]


ResolutionIn = Annotated[ApprovalIn | InputIn, Field(discriminator="kind")]


class ErrorDetail(Schema):
    code: str
    message: str
    field: str | None = None


class ErrorOut(Schema):
    error: ErrorDetail


ERRORS = {400: ErrorOut, 401: ErrorOut, 404: ErrorOut, 409: ErrorOut, 413: ErrorOut, 422: ErrorOut}
