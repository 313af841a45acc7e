"""Input and output schemas of the REST API (camelCase on the wire).

Output schemas document the answers for the OpenAPI page; the views send JSON they build
themselves (``json_response``), and tests validate real answers against the published schema.
What events and calls carry is in ``events.py``, a tool card in ``cards.py``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    StrictBool,
    StrictInt,
    Tag,
    WithJsonSchema,
)

from .cards import ToolStateOut
from .common import INTEGRAL, CallState, In, Out, Outcome, as_integral
from .events import (
    AsyncBashEventOut,
    EventOut,
    InteractionOut,
    MessageEventOut,
    ResolutionValueOut,
    SupervisionOut,
    TextBlockOut,
    ToolCallResponseEventOut,
    UserProjectionOut,
)

_ID = Annotated[str, Field(min_length=1, max_length=255)]


def _rule_choice(value: Any) -> Any:
    """A suggested rule named by its index (an integer ≥ 0, ``1.0`` too) or its pattern (a
    string of 1 to 1,024 characters); one error naming ``rule`` for anything else."""
    value = as_integral(value)
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    if isinstance(value, str) and 0 < len(value) <= 1024:
        return value
    raise ValueError("rule is the index of a suggested rule (0, 1, …) or its pattern")


class ConversationIn(In):
    title: Annotated[str, Field(max_length=200)] | None = None
    workspace: Annotated[str, Field(min_length=1, max_length=1024)] | None = None


class ConversationOut(Out):
    id: UUID
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


class _ResolutionBody(In):
    """What a resolution body (``ResolutionIn``) becomes for the service."""

    def to_resolution(self) -> dict[str, Any]:
        """The resolution ``call_resolve`` records for this body: all of it but ``requestId``
        (the same for the REST route and the socket's ``resolve`` frame)."""
        return self.model_dump(exclude={"requestId"})


class ApprovalIn(_ResolutionBody):
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

    def to_resolution(self) -> dict[str, Any]:
        resolution = super().to_resolution()
        if self.rule is None:
            del resolution["rule"]  # recorded only when the client named one
        return resolution


class InputIn(_ResolutionBody):
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
    address locked out for failing too often (conversations/api/throttle.py)."""
    if 401 in statuses:
        statuses = (*statuses, 429)
    return dict.fromkeys(statuses, ErrorOut)


# The error answers each kind of operation can give. Every operation needs credentials (401);
# a write may be refused for CSRF (403, session only), a body may be malformed (400), too big
# (413) or invalid (422).
READ_ERRORS = (401, 404)
WRITE_ERRORS = (400, 401, 403, 404, 413, 422)


# --- answers ---------------------------------------------------------------------------------


class CallCreatedOut(Out):
    """A tool call as its message or command created it."""

    id: UUID
    providerCallId: str = Field(
        description='The `id` of the `tool_call` block; `""` for a command.'
    )
    contentIndex: int | None = Field(description="Index of its block; null for a command.")
    toolName: str
    state: CallState


class MessageOut(Out):
    event: MessageEventOut
    turnId: UUID
    toolCalls: list[CallCreatedOut]


class SettledCallOut(Out):
    """A settled call: its outcome and its `tool_call_response` event."""

    id: UUID
    outcome: Outcome
    response: ToolCallResponseEventOut


class CommandOut(Out):
    turnId: UUID
    toolCall: CallCreatedOut | SettledCallOut


class EventsPageOut(Out):
    events: list[EventOut]
    lastSequence: int
    nextAfter: int | None = Field(
        description="Pass as `after` for the next page; null once the page reaches `lastSequence`."
    )


class ToolResultOut(Out):
    toolCallId: UUID
    providerCallId: str
    contentIndex: int | None
    toolName: str
    outcome: Outcome
    modelContent: list[TextBlockOut] = Field(description="What the model is shown.")
    includeInContext: bool | None = None


def _settled_const(value: bool) -> Any:
    """``settled`` as the JSON constant alone: a generator reads ``type: boolean`` before
    ``const`` and would make it a plain boolean, which tells the two answers apart no more."""
    return WithJsonSchema({"const": value, "description": "Tells the two answers apart."})


class TurnSettledOut(Out):
    """The turn has no unfinished call."""

    settled: Annotated[Literal[True], _settled_const(True)]
    results: list[ToolResultOut] = Field(
        description="The latest assistant message's calls, in `contentIndex` order."
    )
    queue: list[AsyncBashEventOut] = Field(description="Async-run notices not acknowledged yet.")


class PendingCallOut(Out):
    toolCallId: UUID
    state: CallState


class TurnPendingOut(Out):
    """The turn still has unfinished calls when the wait ended."""

    settled: Annotated[Literal[False], _settled_const(False)]
    pending: list[PendingCallOut]


def _settled_tag(value: Any) -> str:
    settled = value.get("settled") if isinstance(value, dict) else getattr(value, "settled", None)
    return "settled" if settled is True else "pending"


# The barrier's answer: exactly one of the two shapes (``oneOf``), told apart by ``settled``.
# No Discriminator Object: OpenAPI defines one for string values only, and ``settled`` is a
# boolean (docs/decisions.md).
TurnResultsOut = Annotated[
    Annotated[TurnSettledOut, Tag("settled")] | Annotated[TurnPendingOut, Tag("pending")],
    Discriminator(_settled_tag),
]


class QueueAckOut(Out):
    acknowledged: int = Field(description="Notices marked delivered by this request.")
    queue: list[AsyncBashEventOut] = Field(description="The notices still unacknowledged.")


class CancelResultOut(Out):
    toolCallId: UUID
    outcome: Outcome


class TurnCancelOut(Out):
    turnId: UUID
    results: list[CancelResultOut]


class TurnEndOut(Out):
    turnId: UUID
    status: Literal["ended"]


class ClaimOut(Out):
    worker: str
    generation: int
    acquiredAt: str
    heartbeatAt: str
    expiresAt: str


class UnfinishedCallOut(Out):
    """A call not settled yet."""

    id: UUID
    conversationId: UUID
    turnId: UUID
    state: CallState
    toolName: str
    providerCallId: str
    contentIndex: int | None
    origin: Literal["model", "user"]
    arguments: dict[str, Any] = Field(description="The tool's arguments, whole: free-form JSON.")
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


class CallCancelOut(Out):
    outcome: Outcome
    alreadySettled: bool


class AssetOut(Out):
    id: UUID
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
    asyncRunId: UUID | None = Field(description="The async run whose end this is, if any.")
    succeeded: bool = Field(description="Exit code 0, no signal, no timeout.")
    summary: str = Field(
        description="In words, as the pages show it: `Exit 3`, `Killed by SIGKILL`, "
        "`Timed out after 120 s`."
    )


class CallDetailsOut(Out):
    id: UUID
    state: CallState | None = Field(description="Null once settled.")
    outcome: Outcome | None = Field(description="Null while unfinished.")
    modelContent: list[TextBlockOut] | None
    userProjection: UserProjectionOut | None
    toolUpdate: ToolStateOut | None = Field(
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
