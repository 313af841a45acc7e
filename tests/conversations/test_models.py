"""The models' choices are the shared vocabularies (projections/vocabulary.py), each written
once, and read exactly as the class statements they replaced did (same members, values and
labels: no migration)."""

from __future__ import annotations

import pickle

from conversations.models import ASSET_KINDS, EVENT_TYPES, Asset, ConversationEvent, ToolCall
from projections.vocabulary import CALL_STATES


def test_a_calls_states_are_the_vocabulary_in_order():
    assert tuple(ToolCall.State.values) == CALL_STATES
    assert ToolCall.State.AWAITING_APPROVAL == "awaiting_approval"
    assert ToolCall.State.AWAITING_APPROVAL.label == "Awaiting Approval"
    assert ToolCall._meta.get_field("state").choices == [
        (state, state.replace("_", " ").title()) for state in CALL_STATES
    ]


def test_event_types_and_asset_kinds_are_their_tuples():
    assert tuple(ConversationEvent.Type.values) == EVENT_TYPES
    assert ConversationEvent.Type.TOOL_CALL_RESPONSE == "tool_call_response"
    assert tuple(Asset.Kind.values) == ASSET_KINDS
    assert Asset.Kind.OVERFLOW_RECOVERY.label == "Overflow Recovery"


def test_a_derived_choice_is_found_where_it_lives():
    """Named for its place (``ToolCall.State``), so it pickles and reads as before."""
    assert repr(ToolCall.State.READY) == "ToolCall.State.READY"
    assert pickle.loads(pickle.dumps(ToolCall.State.READY)) is ToolCall.State.READY
