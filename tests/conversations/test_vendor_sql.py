"""The per-database SQL modules against their declared interface (``conversations/sql``).

Both backends are checked whichever database the suite runs on: the signatures are read from
the modules, not run. The rows are then read from the configured database by name and type,
so a ``SELECT`` list out of step with its row type fails on the database that has it.
"""

from __future__ import annotations

import inspect
import json
from datetime import datetime
from types import ModuleType
from uuid import UUID

import pytest
from django.utils import timezone

from conversations.models import ConversationEvent
from conversations.services.cancel import call_cancel
from conversations.sql import common, postgresql, sqlite, vendor_sql
from conversations.sql.interface import (
    ClaimedRow,
    InsertedEvent,
    ReplayPage,
    ReplayRow,
    VendorSQL,
)

from .helpers import assistant_calls, new_conversation, open_turn

BACKENDS = [postgresql, sqlite]


def _members() -> dict[str, inspect.Signature]:
    """The protocol's functions, as a module offers them (without ``self``)."""
    members = {}
    for name, value in vars(VendorSQL).items():
        if inspect.isfunction(value) and not name.startswith("_"):
            signature = inspect.signature(value)
            members[name] = signature.replace(parameters=list(signature.parameters.values())[1:])
    return members


def _public_functions(module: ModuleType) -> set[str]:
    """The public functions and classes ``module`` defines (not the ones it imports)."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isfunction(value) or inspect.isclass(value))
        and value.__module__ == module.__name__
    }


def _parameters(signature: inspect.Signature) -> list[tuple]:
    return [(p.name, p.kind, p.default, p.annotation) for p in signature.parameters.values()]


def test_the_protocol_declares_what_the_flow_calls():
    assert set(_members()) == {
        "event_insert",
        "settlement_write",
        "replay_rows",
        "claim_ready",
        "conversations_pin",
        "claim_renew",
        "repeatable_read",
        "notify",
        "now",
        "clock",
    }
    undocumented = [name for name in _members() if not inspect.getdoc(getattr(VendorSQL, name))]
    assert not undocumented


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_a_backend_offers_every_member_with_the_same_parameters(backend):
    """Names, kinds, defaults and annotations of every parameter, in order."""
    for name, declared in _members().items():
        offered = getattr(backend, name, None)
        assert inspect.isfunction(offered), f"{backend.__name__} lacks {name}"
        assert _parameters(inspect.signature(offered)) == _parameters(declared), name


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_a_backend_offers_nothing_public_the_protocol_lacks(backend):
    """Helpers start with ``_``; what both share lives in ``common.py``, not a backend."""
    assert _public_functions(backend) - set(_members()) == set()


def test_the_settlement_read_selects_a_column_for_each_field_of_its_row():
    assert tuple(common.SETTLING_COLUMNS) == common.SettlingRow._fields


# --- the rows, read from the configured database ----------------------------------------------


@pytest.mark.django_db
def test_claim_ready_rows_carry_their_names_and_types(user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    assistant_calls(conversation, turn_id, ("notes", {"i": 1}))
    (row,) = vendor_sql().claim_ready(
        tool_names=["notes"], worker="w1", limit=5, owner_id=user.pk, lease_seconds=60
    )
    assert type(row) is ClaimedRow
    assert isinstance(row.call_id, UUID) and isinstance(row.token, UUID)
    assert row.generation == 1
    assert isinstance(row.expires_at, datetime) and row.expires_at > timezone.now()
    assert (row.conversation_id, str(row.turn_id)) == (conversation.pk, turn_id)
    assert (row.tool_name, json.loads(row.arguments)) == ("notes", {"i": 1})
    assert (row.owner_id, row.workspace) == (user.pk, conversation.workspace)


@pytest.mark.django_db
def test_replay_rows_carry_their_names_and_types(user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("notes", {"i": 1})).call_ids
    call_cancel(call_id=call_id)  # a response: an event with a call id
    conversation.refresh_from_db()
    page = vendor_sql().replay_rows(
        conversation_id=conversation.pk, owner_id=user.pk, after=0, limit=100
    )
    assert type(page) is ReplayPage and page.last_sequence == conversation.last_sequence
    stored = ConversationEvent.objects.filter(conversation=conversation).order_by("sequence")
    assert len(page.events) == len(stored) == 3
    for row, event in zip(page.events, stored, strict=True):
        # The cursor's own tuples, in ReplayRow's order (interface.py says why).
        assert type(row) is tuple and len(row) == len(ReplayRow.__args__)
        sequence, type_, its_turn, its_call, payload, created_at = row
        assert (sequence, type_) == (event.sequence, event.type)
        assert (its_turn and UUID(its_turn)) == event.turn_id
        assert (its_call and UUID(its_call)) == event.tool_call_id
        assert json.loads(payload) == event.payload
        assert created_at == event.created_at.isoformat(timespec="milliseconds")[:-6] + "Z"
    elsewhere = {"conversation_id": conversation.pk, "after": 0, "limit": 100}
    assert vendor_sql().replay_rows(owner_id=user.pk + 1, **elsewhere) is None  # not the owner


@pytest.mark.django_db
def test_event_insert_names_the_event_it_appended(user):
    conversation = new_conversation(user)
    inserted = vendor_sql().event_insert(
        conversation_id=conversation.pk,
        type=ConversationEvent.Type.USER_MESSAGE,
        payload_text="{}",
        turn_id=None,
        tool_call_id=None,
        message_id=None,
        now=timezone.now(),
    )
    assert type(inserted) is InsertedEvent
    event = ConversationEvent.objects.get(pk=inserted.event_id)
    assert (event.conversation_id, event.sequence) == (conversation.pk, inserted.sequence)
