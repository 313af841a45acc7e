"""Schemas of what events and calls carry: durable events by their ``type``, message content
blocks, the model's content, the transcript's previews, and a call's supervision, interaction
and resolution (camelCase on the wire).

Every union here is tagged: content blocks by ``type``, interactions and resolutions by
``kind``, events by ``type`` (each type with its own ``payload``). A generator makes one class
per shape and picks it by the tag. Only what is free-form by nature stays an open object: a
tool call's ``arguments`` and an input resolution's ``value`` (docs/subsystems/api.md).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import Field

from .common import EventType, Out, Outcome

# --- content -----------------------------------------------------------------------------------


class TextBlockOut(Out):
    """A text block: of a message, or of what the model is shown."""

    type: Literal["text"]
    text: str


class ToolCallBlockOut(Out):
    """An assistant's request for a tool call."""

    type: Literal["tool_call"]
    id: str = Field(description="The provider's call id (`providerCallId` of the call).")
    name: str
    arguments: dict[str, Any] = Field(description="The tool's arguments: free-form JSON.")


ContentBlockOut = Annotated[TextBlockOut | ToolCallBlockOut, Field(discriminator="type")]


class PreviewOverflowOut(Out):
    hidden: int = Field(description="How many lines or items the preview leaves out.")
    noun: Literal["line", "item"]
    direction: Literal["head", "tail"] = Field(
        description="`head`: the preview shows the first ones; `tail`: the last ones."
    )


class UserProjectionOut(Out):
    """The transcript's view of a settled call: what its card previews."""

    argsPreview: list[str] = Field(description="At most 6 entries, secrets masked.")
    resultPreview: list[str] = Field(description="At most 6 entries, secrets masked.")
    previewOverflow: PreviewOverflowOut | None


# --- supervision, interaction, resolution ------------------------------------------------------


class SuggestedRuleOut(Out):
    toolName: str
    pattern: str = Field(description="A glob; the first suggestion matches exactly this call.")
    decision: Literal["allow"]


class ApprovalRequestOut(Out):
    reason: str = Field(description="Why approval is asked.")
    suggestedRules: list[SuggestedRuleOut] = Field(
        description="Rules an approval with `persist: true` may save (`rule` names one)."
    )


class ApprovalInteractionOut(Out):
    """The call waits for an approval (`awaiting_approval`)."""

    kind: Literal["approval"]
    request: ApprovalRequestOut


class QuestionOut(Out):
    id: str
    question: str
    options: list[str] | None = Field(None, description="Present when the question has any.")
    multiple: bool | None = Field(None, description="Present (true) when it takes several answers.")


class InputRequestOut(Out):
    questions: list[QuestionOut]


class InputInteractionOut(Out):
    """The call waits for answers (`awaiting_input`, an `ask_user` call)."""

    kind: Literal["input"]
    request: InputRequestOut


InteractionOut = Annotated[
    ApprovalInteractionOut | InputInteractionOut, Field(discriminator="kind")
]


class ApprovalResolutionOut(Out):
    kind: Literal["approval"]
    decision: Literal["allow", "deny"]
    persist: bool
    rule: int | str | None = Field(
        None, description="Present when the approval named a suggested rule: its index or pattern."
    )


class InputResolutionOut(Out):
    kind: Literal["input"]
    value: dict[str, Any] = Field(
        description="As the client sent it: `{answers: {questionId: answer}}`."
    )


ResolutionValueOut = Annotated[
    ApprovalResolutionOut | InputResolutionOut, Field(discriminator="kind")
]


class ResolutionOut(Out):
    """The recorded resolution."""

    toolCallId: UUID
    requestId: str
    resolution: ResolutionValueOut
    resolvedBy: str | None = Field(description="Username of the resolving user.")


class RuleOut(Out):
    """The permission rule that decided."""

    id: str = Field(description="The rule's number, as a string (rules are not UUIDs).")
    toolName: str
    pattern: str
    decision: Literal["allow", "ask", "deny"]
    scope: Literal["global", "conversation"]


class SupervisionOut(Out):
    """The permission check's record."""

    decision: Literal["allow", "ask", "deny", "failed"] = Field(
        description="`failed`: the call could not be checked (bad arguments, a refused path)."
    )
    reason: str
    rule: RuleOut | None
    field: str | None = Field(
        None, description="With `failed`: the argument at fault, when one is (else null)."
    )
    effective: Literal["allow"] | None = Field(
        None, description="Present for a `!command`, whose `ask` counts as `allow`."
    )
    approval: ResolutionOut | None = Field(
        None,
        description="Present once an `ask_user` call approved before it asked: that approval.",
    )


# --- events ------------------------------------------------------------------------------------


class MessagePayloadOut(Out):
    messageId: str
    content: list[ContentBlockOut]


class ToolCallResponsePayloadOut(Out):
    """A settled call, as the event log keeps it (never its complete result: that is an
    asset)."""

    toolCallId: UUID
    providerCallId: str
    toolName: str
    arguments: dict[str, Any] | None = Field(
        description="Bounded as a card's input (4 KiB of JSON); null when nothing fits."
    )
    origin: Literal["model", "user"]
    assistantSequence: int | None = Field(description="Its assistant message; null for a command.")
    contentIndex: int | None
    outcome: Outcome
    modelContent: list[TextBlockOut] = Field(description="What the model is shown.")
    userProjection: UserProjectionOut
    supervision: SupervisionOut | None
    interaction: InteractionOut | None
    resolution: ResolutionValueOut | None
    resolutionRequestId: str | None
    resolvedBy: str | None
    assetIds: list[UUID]
    attempts: int
    asyncRunId: UUID | None = Field(None, description="Present when the call became an async run.")
    includeInContext: bool | None = Field(None, description="Present for a `!command`.")


class OutputTailOut(Out):
    stdout: str
    stderr: str


class AsyncBashPayloadOut(Out):
    asyncRunId: UUID
    toolCallId: UUID
    command: str
    status: Literal["exited", "killed", "lost"]
    exitCode: int | None
    signal: str | None
    modelContent: list[TextBlockOut]
    tail: OutputTailOut = Field(description="The last 4,096 bytes of each stream.")
    assetIds: list[UUID]
    wakeWhenIdle: bool


class TurnEndedPayloadOut(Out):
    turnId: UUID
    reason: Literal["completed", "stopped", "command"]


class _EventOut(Out):
    """A durable event, exactly as stored and replayed."""

    sequence: int = Field(description="1, 2, 3 … per conversation, without gaps.")
    type: EventType
    turnId: UUID | None
    toolCallId: UUID | None
    payload: Any
    createdAt: str = Field(description="ISO 8601 UTC with milliseconds.")


class UserMessageEventOut(_EventOut):
    type: Literal["user_message"]
    payload: MessagePayloadOut


class AssistantMessageEventOut(_EventOut):
    type: Literal["assistant_message"]
    payload: MessagePayloadOut


class ToolCallResponseEventOut(_EventOut):
    type: Literal["tool_call_response"]
    payload: ToolCallResponsePayloadOut


class AsyncBashEventOut(_EventOut):
    """An async run's notice: the background command ended."""

    type: Literal["async_bash_event"]
    payload: AsyncBashPayloadOut


class TurnEndedEventOut(_EventOut):
    type: Literal["turn_ended"]
    payload: TurnEndedPayloadOut


EventOut = Annotated[
    UserMessageEventOut
    | AssistantMessageEventOut
    | ToolCallResponseEventOut
    | AsyncBashEventOut
    | TurnEndedEventOut,
    Field(discriminator="type"),
]
MessageEventOut = Annotated[
    UserMessageEventOut | AssistantMessageEventOut, Field(discriminator="type")
]
