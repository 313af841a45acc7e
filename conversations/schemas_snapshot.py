"""Schemas of the snapshot, history and live endpoints (camelCase on the wire)."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import Field, WithJsonSchema

from .schemas import (
    CallState,
    ClaimOut,
    CommandExitOut,
    ConversationOut,
    EventOut,
    In,
    Out,
)
from .schemas_runs import AsyncRunOut

# Any JSON value (a bounded tool input), typed for the document.
_ANY_JSON = WithJsonSchema(
    {
        "description": "Any JSON value.",
        "anyOf": [
            {"type": "object"},
            {"type": "array"},
            {"type": "string"},
            {"type": "number"},
            {"type": "boolean"},
            {"type": "null"},
        ],
    }
)
ToolStatus = Literal[
    "pending",
    "awaiting_approval",
    "in_progress",
    "awaiting_input",
    "completed",
    "failed",
    "declined",
    "cancelled",
    "indeterminate",
]


class OpenTurnOut(Out):
    """The open turn."""

    id: str
    ordinal: int = Field(description="1, 2, 3 … per conversation.")
    origin: Literal["user", "command"] = Field(
        description="`user`: opened by a user message; `command`: by a `!command`."
    )
    createdAt: str


class BoundedCallOut(Out):
    """An unfinished call with its arguments bounded (at most 4 KiB of JSON, edit bodies and
    patches dropped); `GET /tool-calls/{id}` answers them whole."""

    id: str
    conversationId: str
    turnId: str
    state: CallState
    toolName: str
    providerCallId: str
    contentIndex: int | None
    origin: Literal["model", "user"]
    arguments: dict[str, Any] | None = Field(
        description="The bounded arguments; null when nothing fits (`argumentsOmitted`)."
    )
    argumentsOmitted: bool = Field(
        False, description="Present (true) only when the bounded arguments are left out."
    )
    interaction: dict[str, Any] | None = Field(
        description="While awaiting: `{kind, request}`, the approval or questions to answer."
    )
    supervision: dict[str, Any] | None
    resolution: dict[str, Any] | None
    claim: ClaimOut | None
    attempt: int
    generation: int
    createdAt: str
    updatedAt: str


class PayloadOmittedOut(Out):
    bytes: int = Field(description="The size of the payload left out (JSON bytes).")


class ToolStateOut(Out):
    """A call's folded `tool.updated` state: what its card shows. Only the fields received so
    far are present."""

    toolCallId: str
    turnId: str
    rev: int = Field(description="+1 per published update of the call.")
    toolName: str | None = None
    title: str | None = None
    kind: str | None = None
    status: ToolStatus | None = None
    input: Annotated[Any, _ANY_JSON] = None
    inputOmitted: bool | None = None
    output: dict[str, Any] | None = Field(
        None, description="A bounded output: `{text}` or `{text, omittedBytes, tail}`."
    )
    locations: list[dict[str, Any]] | None = None
    lineChanges: dict[str, Any] | None = None
    startedAt: str | None = None
    finishedAt: str | None = None
    interaction: dict[str, Any] | None = None
    payloadOmitted: PayloadOmittedOut | None = Field(
        None,
        description="The card is older than the page's payload budget reaches: its `input` "
        'and `output` were left out (not "no output"); read them with '
        "`GET /tool-calls/{id}/details`.",
    )


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
    queue: list[EventOut] = Field(description="Async-run notices not acknowledged yet.")
    asyncRuns: list[AsyncRunOut] = Field(description="The conversation's running async runs.")
    omitted: OmittedOut | None = Field(
        None, description="Present only when a list was cut to its budget."
    )


class HistoryMessageOut(Out):
    type: Literal["message"]
    event: EventOut = Field(description="A `user_message` or `assistant_message` event.")


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
