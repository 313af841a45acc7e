"""schemathesis against ``/api/v1/openapi.json``, in-process through Django's WSGI application.

Every operation of the schema is one test: schemathesis generates valid and invalid requests
(its examples, coverage and fuzzing phases) and runs all of its checks on each answer, plus one
of ours: an error is the JSON error body of the API docs, never a 500. Half of the requests aim
at real objects of the fuzzing user (a conversation with an open turn, a call awaiting approval,
a settled call with its asset, an async run, a launch), so they reach past the 404 of an
unknown id into validation, the state machine and the services.

Bounded for CI: ``TOOLCORE_FUZZ_EXAMPLES`` examples per operation (default 6), derandomized so
every run sends the same requests. Full size (docs/security.md)::

    TOOLCORE_FUZZ_EXAMPLES=500 pytest tests/security/test_api_fuzz.py
"""

from __future__ import annotations

import itertools
import json

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    positive_data_acceptance,
    response_schema_conformance,
)

from conversations.api.auth import token_create
from conversations.models import Conversation
from tests.conversations.api_helpers import PATH_OBJECTS, build_world, grant_run_commands
from tools.runtime.async_runs import services as async_run_services

from .errors import error_of
from .fuzzing import FUZZ

WAIT_MAX_SECONDS = 0.2  # the turn barrier may wait 60 s: real turns are asked with less
# A kill of the world's run waits up to 8 s for a watcher (there is none here: its host is
# elsewhere) before answering it still running; every example that reached it waited so.
KILL_WAIT_SECONDS = 0.2

# Unknown query parameters are ignored, as across HTTP (a proxy's or a cache-buster's); unknown
# body fields are refused (422), and the fuzzer checks that.
CONFIG = SchemathesisConfig.from_dict({"generation": {"allow-extra-parameters": False}})
schema = schemathesis.openapi.from_wsgi(
    "/api/v1/openapi.json", get_wsgi_application(), config=CONFIG
)


# Rules the OpenAPI schema cannot state, which a schema-valid request may therefore break: a 422
# naming one of these fields is the documented answer (docs/subsystems/api.md), not a request
# wrongly refused. Everything else schema-valid must be accepted (2xx) or refused for a reason
# other than validation (401, 403, 404, 409).
SEMANTIC_FIELDS = {
    "cursor": "an opaque cursor this server issued",
    "before": "an opaque cursor this server issued",
    "providerCallId": "required with kind arguments, refused with kind text",
    "delta": "at most 16,384 bytes of JSON after cleaning",
    "workspace": "a folder inside the owner's workspace root",
    "cwd": "a folder inside the owner's workspace root",
    "rule": "an index or a pattern of the call's suggestedRules",
    "value": "answers to the call's own questions",
    "update": "fields of tool.updated",
    "tools": "no core catalog tool",
    "content": "blocks of a tool call's result, or a message's caps",
}
_aimed = itertools.count()
_worlds: dict[int, tuple[dict[str, str], str]] = {}


@pytest.fixture(autouse=True)
def _short_kill_wait(monkeypatch):
    monkeypatch.setattr(async_run_services, "KILL_WAIT_SECONDS", KILL_WAIT_SECONDS)


@pytest.fixture(autouse=True)
def _fresh_worlds():
    _worlds.clear()  # each operation's test starts on an empty database
    yield
    _worlds.clear()


def _world(user) -> tuple[dict[str, str], str]:
    """The user's objects and token, made once per operation (hypothesis calls the test once
    per example) and again when an example deleted the conversation."""
    known = _worlds.get(user.pk)
    if known is not None and Conversation.objects.filter(pk=known[0]["cid"]).exists():
        return known
    if known is None:
        grant_run_commands(user)
    _, secret = token_create(user=user, name="fuzz")
    _worlds[user.pk] = build_world(user).ids(), secret
    return _worlds[user.pk]


def _semantic_refusal(response) -> bool:
    if response.status_code != 422:
        return False
    field = json.loads(response.content)["error"].get("field") or ""
    head = field.split(".")[0]
    return head in SEMANTIC_FIELDS


def positive_data_accepted_unless_semantic(ctx, response, case):
    """schemathesis' ``positive_data_acceptance``, but for the rules of ``SEMANTIC_FIELDS``."""
    if _semantic_refusal(response):
        return None
    return positive_data_acceptance(ctx, response, case)


def response_schema_conformance_but_bytes(ctx, response, case):
    """schemathesis' ``response_schema_conformance``, except for an asset's bytes: the schema
    says "binary" (``application/octet-stream``, and ``*/*`` for the asset's own media type),
    which it would read as JSON when the asset's own media type is ``application/json``."""
    if case.operation.label == "GET /api/v1/assets/{asset_id}" and response.status_code < 300:
        return None
    return response_schema_conformance(ctx, response, case)


def error_body_of_the_docs(ctx, response, case):
    """Every 4xx and 5xx answer is ``{"error": {"code", "message", "field"?}}`` as JSON."""
    if response.status_code >= 400:
        headers = {name.lower(): values for name, values in response.headers.items()}
        error_of(response.status_code, headers.get("content-type", [""])[0], response.content)
    return None


def _aim(case, ids: dict[str, str]) -> None:
    """Every other request names the user's real objects in its path, and asks the turn barrier
    to wait briefly at most."""
    turn = next(_aimed)
    for name in case.path_parameters or {}:
        assert name in PATH_OBJECTS, f"path parameter {name!r}: add it to PATH_OBJECTS"
        if turn % 2:
            choices = PATH_OBJECTS[name]
            case.path_parameters[name] = ids[choices[turn // 2 % len(choices)]]
    wait = (case.query or {}).get("wait")
    if isinstance(wait, bool | None):
        return
    try:
        seconds = float(wait)
    except (TypeError, ValueError):
        return
    if WAIT_MAX_SECONDS < seconds <= 60:  # beyond 60 it is refused (422) without waiting
        case.query["wait"] = WAIT_MAX_SECONDS if isinstance(wait, int | float) else "0.2"


@pytest.mark.django_db(transaction=True)
@schema.parametrize()
@FUZZ
def test_every_operation_survives_the_fuzzer(case, user):
    ids, secret = _world(user)
    _aim(case, ids)
    case.call_and_validate(
        headers={"Authorization": f"Bearer {secret}"},
        excluded_checks=[positive_data_acceptance, response_schema_conformance],
        additional_checks=[
            positive_data_accepted_unless_semantic,
            response_schema_conformance_but_bytes,
            error_body_of_the_docs,
        ],
    )
