"""A settled call's response is read in one place (``selectors.call_response``): by the API, the
admin, the integrity check and the services alike."""

from __future__ import annotations

import pytest
from django.db.models import Exists, OuterRef

from conversations.models import ConversationEvent, ToolCall
from conversations.selectors import call_response, call_response_payload, call_responses

from .admin_helpers import calls
from .helpers import new_conversation, settle

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_calls(user):
    """Two host calls of one message, the first settled ``failed``, the second still ready."""
    conversation = new_conversation(user)
    settled, unfinished = calls(conversation, ("notes", {"q": "a"}), ("notes", {"q": "b"}))
    settle(settled, "failed")
    return settled, unfinished


def test_call_response_is_the_one_response_of_a_settled_call(two_calls):
    settled, unfinished = two_calls
    (event,) = call_response(settled)
    assert event.type == ConversationEvent.Type.TOOL_CALL_RESPONSE
    assert str(event.tool_call_id) == settled and event.payload["outcome"] == "failed"
    assert not call_response(unfinished).exists()


def test_call_response_payload_is_none_until_the_call_settles(two_calls):
    settled, unfinished = two_calls
    assert call_response_payload(settled)["toolName"] == "notes"
    assert call_response_payload(unfinished) is None


def test_call_responses_are_those_of_the_calls_that_settled(two_calls):
    settled, unfinished = two_calls
    answered = call_responses([settled, unfinished]).values_list("tool_call_id", flat=True)
    assert [str(call_id) for call_id in answered] == [settled]
    assert not call_responses([]).exists()


def test_call_response_takes_an_outer_reference(two_calls):
    """As a subquery: which events are a call's response, which rows have one."""
    settled, unfinished = two_calls
    answered = ConversationEvent.objects.filter(Exists(call_response(OuterRef("tool_call_id"))))
    assert [str(e.tool_call_id) for e in answered] == [settled]
    assert list(ToolCall.objects.filter(~Exists(call_response(OuterRef("pk"))))) == [
        ToolCall.objects.get(pk=unfinished)
    ]
