"""Schemas of a tool card: a call's folded ``tool.updated`` state, as snapshots, history pages
and a call's details answer it (camelCase on the wire)."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import Field, WithJsonSchema

from projections.vocabulary import TOOL_KINDS, TOOL_STATUSES

from .common import Out
from .events import InteractionOut

# Any JSON value (a bounded tool input), typed for the document. Every branch is complete (an
# array says what its items are, here anything), so a generator can build each of them.
_ANY_JSON = WithJsonSchema(
    {
        "description": "Any JSON value.",
        "anyOf": [
            {"type": "object", "additionalProperties": True},
            {"type": "array", "items": {}},
            {"type": "string"},
            {"type": "number"},
            {"type": "boolean"},
            {"type": "null"},
        ],
    }
)
ToolStatus = Literal[TOOL_STATUSES]
ToolKind = Literal[TOOL_KINDS]


class BoundedOutputOut(Out):
    """A tool's output within 16 KiB of JSON: `{text}`, or when cut `{text, omittedBytes,
    tail}` (the head, how many bytes between were left out, the tail)."""

    text: str
    omittedBytes: int | None = Field(None, description="Present (above 0) when cut.")
    tail: str | None = Field(None, description="Present when cut.")


class LocationOut(Out):
    path: str
    line: int | None = Field(None, description="Present when the tool named one (from 1).")


class LineChangesOut(Out):
    added: int
    removed: int


class PayloadOmittedOut(Out):
    bytes: int = Field(description="The size of the payload left out (JSON bytes).")


class ToolStateOut(Out):
    """A call's folded `tool.updated` state: what its card shows. Only the fields received so
    far are present."""

    toolCallId: UUID
    turnId: UUID
    rev: int = Field(description="+1 per published update of the call.")
    toolName: str | None = None
    title: str | None = None
    kind: ToolKind | None = None
    status: ToolStatus | None = None
    input: Annotated[Any, _ANY_JSON] = None
    inputOmitted: bool | None = None
    output: BoundedOutputOut | None = None
    locations: list[LocationOut] | None = None
    lineChanges: LineChangesOut | None = None
    startedAt: str | None = None
    finishedAt: str | None = None
    interaction: InteractionOut | None = Field(
        None, description="While the call awaits an approval or answers."
    )
    payloadOmitted: PayloadOmittedOut | None = Field(
        None,
        description="The card is older than the page's payload budget reaches: its `input` "
        'and `output` were left out (not "no output"); read them with '
        "`GET /tool-calls/{id}/details`.",
    )
