"""What every schema of the REST API shares: the bases of bodies and answers, the integer rule,
the vocabularies of states and outcomes, and how ids are typed in the document.

Ids are UUIDs, sent as canonical lowercase strings: the document types them ``string`` with
``format: uuid`` everywhere, in bodies, answers and paths alike, so a generated client has one
type for an id (docs/subsystems/api.md, "The OpenAPI document").
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import BeforeValidator, ConfigDict, WithJsonSchema

from projections.vocabulary import CALL_STATES, HOST_OUTCOMES, OUTCOMES
from tools.models import ProcessStatus as ProcessStatusChoices

from ...models import EVENT_TYPES


def as_integral(value: Any) -> Any:
    """``3.0`` is the integer 3, as JSON Schema's ``integer`` reads it; ``3.5``, ``"3"`` and
    ``true`` stay refused."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# A body integer is a JSON number without a fractional part (``3`` or ``3.0``), never a string
# or a boolean: what the OpenAPI type ``integer`` says. Written after the constraints, e.g.
# ``Annotated[StrictInt, Field(ge=0), INTEGRAL]``, so that they show in the schema.
INTEGRAL = BeforeValidator(as_integral)

# An id in a path. Documented as a UUID, read as any string: a malformed id answers 404 like a
# missing one (never 422), so nobody learns more from a bad id than from an unknown one.
PathId = Annotated[str, WithJsonSchema({"type": "string", "format": "uuid"})]


class In(Schema):
    model_config = ConfigDict(extra="forbid")


class Out(Schema):
    """An answer: exactly these keys are sent (``additionalProperties: false``).

    The views build their answers themselves (``json_response``); these classes describe them
    for the document, and tests validate real answers against it."""

    model_config = ConfigDict(extra="forbid")


# The vocabularies, each derived from its one tuple (``projections/vocabulary.py``, the models'
# choices): ``Literal[("a", "b")]`` is ``Literal["a", "b"]``.
EventType = Literal[EVENT_TYPES]
CallState = Literal[CALL_STATES]
Outcome = Literal[OUTCOMES]
HostOutcome = Literal[HOST_OUTCOMES]
ProcessStatus = Literal[tuple(ProcessStatusChoices.values)]
