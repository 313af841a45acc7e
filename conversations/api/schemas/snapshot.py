"""Schemas of the snapshot, history and live endpoints (camelCase on the wire)."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import Field

from .cards import ToolStateOut
from .common import CallState, In, Out
from .conversations import ClaimOut, CommandExitOut, ConversationOut
from .events import (
    AsyncBashEventOut,
    InteractionOut,
    MessageEventOut,
    ResolutionValueOut,
    SupervisionOut,
)
from .runs import AsyncRunOut


class OpenTurnOut(Out):
    """The open turn."""

    id: UUID
    ordinal: int = Field(description="1, 2, 3 … per conversation.")
    origin: Literal["user", "command", "mcp"] = Field(
        description="`user`: opened by a user message; `command`: by a `!command`; `mcp`: by "
        "an MCP client's tool call (docs/mcp.md)."
    )
    createdAt: str


class BoundedCallOut(Out):
    """An unfinished call with its arguments bounded (at most 4 KiB of JSON, edit bodies and
    patches dropped); `GET /tool-calls/{id}` answers them whole."""

    id: UUID
    conversationId: UUID
    turnId: UUID
    state: CallState
    toolName: str
    providerCallId: str
    contentIndex: int | None
    origin: Literal["model", "user"]
    arguments: dict[str, Any] | None = Field(
        description="The bounded arguments (free-form JSON); null when nothing fits "
        "(`argumentsOmitted`)."
    )
    argumentsOmitted: bool = Field(
        False, description="Present (true) only when the bounded arguments are left out."
    )
    interaction: InteractionOut | None = Field(
        description="While awaiting: the approval asked, or the questions to answer."
    )
    supervision: SupervisionOut | None
    resolution: ResolutionValueOut | None
    claim: ClaimOut | None
    attempt: int
    generation: int
    createdAt: str
    updatedAt: str


class OmittedOut(Out):
    """How many items each list left out to stay within its budget."""

    calls: int | None = None
    queue: int | None = None
    asyncRuns: int | None = None


class SnapshotOut(Out):
    conversation: ConversationOut
    lastSequence: int = Field(
        description="The last event this state reflects: replay from it with `after`."
    )
    openTurn: OpenTurnOut | None
    calls: list[BoundedCallOut] = Field(description="The unfinished calls, oldest first.")
    tools: list[ToolStateOut] = Field(
        description="Cards of the unfinished calls and the latest turn's calls, newest first, "
        "at most 100."
    )
    queue: list[AsyncBashEventOut] = Field(description="Async-run notices not acknowledged yet.")
    asyncRuns: list[AsyncRunOut] = Field(description="The conversation's running async runs.")
    omitted: OmittedOut | None = Field(
        None, description="Present only when a list was cut to its budget."
    )


class HistoryMessageOut(Out):
    type: Literal["message"]
    event: MessageEventOut = Field(description="A `user_message` or `assistant_message` event.")


class HistoryToolOut(ToolStateOut):
    type: Literal["tool"]
    exit: CommandExitOut | None = Field(
        None,
        description="How the call's command ended, beside its state (present only once it "
        "ended); also in `GET /tool-calls/{id}/details`.",
    )


class HistoryPageOut(Out):
    items: list[Annotated[HistoryMessageOut | HistoryToolOut, Field(discriminator="type")]] = Field(
        description="Newest first."
    )
    nextCursor: str | None = Field(
        description="Pass as `before` for the older page; null at the beginning."
    )


class LiveIn(In):
    turnId: UUID
    kind: Literal["text", "arguments"]
    delta: Annotated[str, Field(min_length=1)] = Field(
        description="The next piece: at most 16,384 bytes of JSON."
    )
    providerCallId: Annotated[str, Field(min_length=1, max_length=255)] | None = Field(
        None,
        description='With `kind: "arguments"` (required there): the `id` its `tool_call` block '
        "will have.",
    )


class LiveOut(Out):
    published: Literal[True]
