"""Bodies and answers of the host tool port (camelCase on the wire; docs/subsystems/host_tools.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import Field, StrictInt

from conversations.api.schemas.common import INTEGRAL, HostOutcome, In, Out

from .services import CLAIMS_DEFAULT, CLAIMS_MAX, WORKER_MAX_CHARS

_GENERATION = Annotated[StrictInt, Field(ge=1, description="The claim's generation."), INTEGRAL]
_TOKEN = Field(description="The claim's token, as `POST /host/claims` answered it.")


class HostClaimsIn(In):
    tools: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=256)]],
        Field(min_length=1, max_length=64),
    ] = Field(description="Names of the host tools this host runs (not core catalog tools).")
    worker: Annotated[str, Field(min_length=1, max_length=WORKER_MAX_CHARS)] = Field(
        description="Who holds the claims: shown on the calls and in the admin."
    )
    max: Annotated[StrictInt, Field(ge=1, le=CLAIMS_MAX), INTEGRAL] = Field(
        CLAIMS_DEFAULT, description=f"At most this many calls (1…{CLAIMS_MAX})."
    )


class HostClaimOut(Out):
    toolCallId: UUID
    toolName: str
    arguments: dict[str, Any] = Field(description="The call's arguments, complete: free-form JSON.")
    token: UUID = Field(description="Send it with every update and the settlement.")
    generation: int
    expiresAt: str = Field(description="When the lease runs out unless an update renews it.")


class HostClaimsOut(Out):
    claims: list[HostClaimOut] = Field(description="Empty when nothing is ready.")


class HostUpdateIn(In):
    token: UUID = _TOKEN
    generation: _GENERATION
    update: dict[str, Any] = Field(
        description="`tool.updated` fields: `status` (`pending` or `in_progress`), `title`, "
        "`kind`, `input`, `locations`, `lineChanges`, and either `output` (a string: the whole "
        "output so far) or `outputDelta` (new text)."
    )


class HostUpdateOut(Out):
    toolCallId: UUID
    rev: int = Field(description="The activity's revision after this update.")
    expiresAt: str = Field(description="The renewed lease's end.")


class HostTextBlock(In):
    type: Literal["text"]
    text: str


class HostImageBlock(In):
    type: Literal["image"]
    data: Annotated[str, Field(min_length=1)] = Field(
        description="The image's bytes, standard base64 with padding."
    )
    mediaType: Literal["image/png", "image/jpeg", "image/gif", "image/webp"]


HostBlock = Annotated[HostTextBlock | HostImageBlock, Field(discriminator="type")]


class HostSettleIn(In):
    token: UUID = _TOKEN
    generation: _GENERATION
    outcome: HostOutcome
    content: Annotated[list[HostBlock], Field(max_length=100)] = Field(
        description="Text blocks (the text the model and the transcript are shown) and image "
        "blocks (stored as `image` assets, never inline)."
    )
    details: Any = Field(
        None, description="Any JSON, kept with the content in the result's `result.json`."
    )
