"""Input and output schemas of the REST API (camelCase on the wire).

Output schemas document the answers for the OpenAPI page; the views send JSON they build
themselves (``json_response``), and tests validate real answers against the published schema.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from ninja import Schema
from pydantic import BeforeValidator, ConfigDict, Field, StrictBool, StrictInt, WithJsonSchema

_ID = Annotated[str, Field(min_length=1, max_length=255)]


def _integral(value: Any) -> Any:
    """``3.0`` is the integer 3, as JSON Schema's ``integer`` reads it; ``3.5``, ``"3"`` and
    ``true`` stay refused."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# A body integer is a JSON number without a fractional part (``3`` or ``3.0``), never a string
# or a boolean: what the OpenAPI type ``integer`` says. Written after the constraints, e.g.
# ``Annotated[StrictInt, Field(ge=0), INTEGRAL]``, so that they show in the schema.
INTEGRAL = BeforeValidator(_integral)


def _rule_choice(value: Any) -> Any:
    """A suggested rule named by its index (an integer ≥ 0, ``1.0`` too) or its pattern (a
    string of 1 to 1,024 characters); one error naming ``rule`` for anything else."""
    value = _integral(value)
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    if isinstance(value, str) and 0 < len(value) <= 1024:
        return value
    raise ValueError("rule is the index of a suggested rule (0, 1, …) or its pattern")


class In(Schema):
    model_config = ConfigDict(extra="forbid")


class Out(Schema):
    """An answer: exactly these keys are sent (``additionalProperties: false``)."""

    model_config = ConfigDict(extra="forbid")


class ConversationIn(In):
    title: Annotated[str, Field(max_length=200)] | None = None
    workspace: Annotated[str, Field(min_length=1, max_length=1024)] | None = None


class ConversationOut(Out):
    id: str
    title: str
    workspace: str
    lastSequence: int
    createdAt: str


class ConversationPage(Out):
    items: list[ConversationOut]
    nextCursor: str | None = Field(
        description="Pass as `cursor` for the next page; null at the end."
    )


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
    upTo: Annotated[StrictInt, Field(ge=0), INTEGRAL]


class ApprovalIn(In):
    requestId: _ID
    kind: Literal["approval"]
    decision: Literal["allow", "deny"]
    persist: StrictBool = False
    rule: Annotated[
        int | str | None,
        BeforeValidator(_rule_choice),
        WithJsonSchema(
            {
                "anyOf": [
                    {"type": "integer", "minimum": 0},
                    {"type": "string", "minLength": 1, "maxLength": 1024},
                    {"type": "null"},
                ]
            }
        ),
    ] = Field(
        None,
        description="With `persist: true`: which of the request's `suggestedRules` to save, "
        "by its index (0 is the first) or its `pattern`. Without it, the first.",
    )


class InputIn(In):
    requestId: _ID
    kind: Literal["input"]
    value: dict[str, Any]


ResolutionIn = Annotated[ApprovalIn | InputIn, Field(discriminator="kind")]


class ErrorDetail(Out):
    code: str = Field(description="Stable, machine-readable: `not_found`, `turn_open`, …")
    message: str = Field(description="For people; at most 1 KiB.")
    field: str | None = Field(
        None, description="The field refused, as a dotted path (`content.0.arguments`)."
    )


class ErrorOut(Out):
    error: ErrorDetail


# The errors a typical write can give; ``errors(...)`` names an operation's exact statuses.
ERRORS = {400: ErrorOut, 401: ErrorOut, 404: ErrorOut, 409: ErrorOut, 413: ErrorOut, 422: ErrorOut}


def errors(*statuses: int) -> dict[int, type[ErrorOut]]:
    """The error answers an operation can give, for its ``response=``. An operation that takes
    credentials (401) may also answer 429 ``throttled``: a bearer token that fails from an
    address locked out for failing too often (conversations/throttle.py)."""
    if 401 in statuses:
        statuses = (*statuses, 429)
    return dict.fromkeys(statuses, ErrorOut)


# --- answers ---------------------------------------------------------------------------------

EventType = Literal[
    "user_message", "assistant_message", "tool_call_response", "async_bash_event", "turn_ended"
]
CallState = Literal["supervising", "awaiting_approval", "ready", "running", "awaiting_input"]
Outcome = Literal["completed", "failed", "denied", "cancelled", "indeterminate"]


class EventOut(Out):
    """A durable event, exactly as stored and replayed."""

    sequence: int = Field(description="1, 2, 3 … per conversation, without gaps.")
    type: EventType
    turnId: str | None
    toolCallId: str | None
    payload: dict[str, Any]
    createdAt: str = Field(description="ISO 8601 UTC with milliseconds.")


class CallCreatedOut(Out):
    """A tool call as its message or command created it."""

    id: str
    providerCallId: str = Field(
        description='The `id` of the `tool_call` block; `""` for a command.'
    )
    contentIndex: int | None = Field(description="Index of its block; null for a command.")
    toolName: str
    state: CallState


class MessageOut(Out):
    event: EventOut
    turnId: str
    toolCalls: list[CallCreatedOut]


class SettledCallOut(Out):
    """A settled call: its outcome and its `tool_call_response` event."""

    id: str
    outcome: Outcome
    response: EventOut


class CommandOut(Out):
    turnId: str
    toolCall: CallCreatedOut | SettledCallOut


class EventsPageOut(Out):
    events: list[EventOut]
    lastSequence: int
    nextAfter: int | None = Field(
        description="Pass as `after` for the next page; null once the page reaches `lastSequence`."
    )


class ToolResultOut(Out):
    toolCallId: str
    providerCallId: str
    contentIndex: int | None
    toolName: str
    outcome: Outcome
    modelContent: list[dict[str, Any]] = Field(description="What the model is shown.")
    includeInContext: bool | None = None


class TurnSettledOut(Out):
    """The turn has no unfinished call."""

    settled: Literal[True]
    results: list[ToolResultOut] = Field(
        description="The latest assistant message's calls, in `contentIndex` order."
    )
    queue: list[EventOut] = Field(description="Async-run notices not acknowledged yet.")


class PendingCallOut(Out):
    toolCallId: str
    state: CallState


class TurnPendingOut(Out):
    """The turn still has unfinished calls when the wait ended."""

    settled: Literal[False]
    pending: list[PendingCallOut]


class QueueAckOut(Out):
    acknowledged: int = Field(description="Notices marked delivered by this request.")
    queue: list[EventOut] = Field(description="The notices still unacknowledged.")


class CancelResultOut(Out):
    toolCallId: str
    outcome: Outcome


class TurnCancelOut(Out):
    turnId: str
    results: list[CancelResultOut]


class TurnEndOut(Out):
    turnId: str
    status: Literal["ended"]


class ClaimOut(Out):
    worker: str
    generation: int
    acquiredAt: str
    heartbeatAt: str
    expiresAt: str


class UnfinishedCallOut(Out):
    """A call not settled yet."""

    id: str
    conversationId: str
    turnId: str
    state: CallState
    toolName: str
    providerCallId: str
    contentIndex: int | None
    origin: Literal["model", "user"]
    arguments: dict[str, Any]
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


class ResolutionOut(Out):
    """The recorded resolution."""

    toolCallId: str
    requestId: str
    resolution: dict[str, Any] = Field(
        description="`{kind, decision, persist, rule?}` or `{kind, value}`."
    )
    resolvedBy: str | None = Field(description="Username of the resolving user.")


class CallCancelOut(Out):
    outcome: Outcome
    alreadySettled: bool


class AssetOut(Out):
    id: str
    kind: str
    size: int
    sha256: str
    path: str
    truncated: bool


class CommandExitOut(Out):
    """How a command ended (a `bash` call's process, or the async run it became). The call's
    outcome stays `completed` whatever the exit: this says whether the command succeeded."""

    exitCode: int | None = Field(description="Null when a signal ended it.")
    signal: str | None = Field(description="The signal that killed it (`SIGKILL`), if one did.")
    timedOut: bool = Field(description="Killed because it ran past its `timeout`.")
    timeoutSeconds: float | None = Field(description="The timeout it ran past.")
    asyncRunId: str | None = Field(description="The async run whose end this is, if any.")
    succeeded: bool = Field(description="Exit code 0, no signal, no timeout.")
    summary: str = Field(
        description="In words, as the pages show it: `Exit 3`, `Killed by SIGKILL`, "
        "`Timed out after 120 s`."
    )


class CallDetailsOut(Out):
    id: str
    state: CallState | None = Field(description="Null once settled.")
    outcome: Outcome | None = Field(description="Null while unfinished.")
    modelContent: list[dict[str, Any]] | None
    userProjection: dict[str, Any] | None
    toolUpdate: dict[str, Any] | None = Field(
        description="The folded `tool.updated` state, with `rev`."
    )
    assets: list[AssetOut]
    exit: CommandExitOut | None = Field(
        description="How its command ended; null while it runs, for a command gone to the "
        "background until its run ends, and for a call that runs no command."
    )


class LinesPageOut(Out):
    lines: list[str]
    offset: int
    limit: int
    totalLines: int
    nextOffset: int | None = Field(description="The first line not returned; null at the end.")
    status: str | None
    path: str | None = Field(description="The file's path, when the page does not hold it all.")
    truncated: bool
