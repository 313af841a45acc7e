"""POST /conversations/{cid}/live and ``live_publish`` (docs/subsystems/api.md, "Live"):
published to the conversation's group at once, never stored, every refusal naming its field."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from conversations.errors import NotFound, TurnNotOpen, ValidationFailed
from conversations.models import ConversationEvent, ToolActivity, ToolCall
from conversations.services.cancel import turn_end
from conversations.services.publish import conversation_group
from conversations.snapshots import live_publish
from tests.realtime.helpers import received

from .api_helpers import API, assert_error
from .helpers import new_conversation, open_turn

IN_MEMORY = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


def _listen(conversation) -> tuple[Any, str]:
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(conversation_group(conversation.pk), channel)
    return layer, channel


def _stored(conversation) -> tuple[int, int, int, int]:
    return (
        ConversationEvent.objects.filter(conversation_id=conversation.pk).count(),
        ToolCall.objects.filter(conversation_id=conversation.pk).count(),
        ToolActivity.objects.filter(conversation_id=conversation.pk).count(),
        type(conversation).objects.get(pk=conversation.pk).last_sequence,
    )


@pytest.mark.django_db
def test_live_text_reaches_the_group_and_nothing_is_stored(api, user, settings):
    settings.CHANNEL_LAYERS = IN_MEMORY
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    before = _stored(conversation)
    layer, channel = _listen(conversation)
    url = f"{API}/conversations/{conversation.pk}/live"
    response = api.post_json(url, {"turnId": turn_id, "kind": "text", "delta": "Hello, wörld"})
    assert response.status_code == 202
    assert response.json() == {"published": True}
    arguments = {"turnId": turn_id, "kind": "arguments", "delta": '{"pa', "providerCallId": "c1"}
    assert api.post_json(url, arguments).status_code == 202
    assert received(layer, channel) == [
        {
            "type": "conversation.live",
            "conversationId": str(conversation.pk),
            "turnId": turn_id,
            "kind": "text",
            "delta": "Hello, wörld",
        },
        {
            "type": "conversation.live",
            "conversationId": str(conversation.pk),
            "turnId": turn_id,
            "kind": "arguments",
            "delta": '{"pa',
            "providerCallId": "c1",
        },
    ]
    assert _stored(conversation) == before


@pytest.mark.django_db
def test_live_refusals_name_the_field(api, user, settings):
    settings.CHANNEL_LAYERS = IN_MEMORY
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    layer, channel = _listen(conversation)
    url = f"{API}/conversations/{conversation.pk}/live"
    text = {"turnId": turn_id, "kind": "text", "delta": "x"}
    cases = [
        ({**text, "delta": ""}, "delta"),
        ({**text, "delta": '"' * 8193}, "delta"),  # 16,386 bytes of JSON
        ({**text, "delta": 5}, "delta"),
        ({**text, "kind": "thinking"}, "kind"),
        ({**text, "turnId": "not-a-uuid"}, "turnId"),
        ({**text, "providerCallId": "c1"}, "providerCallId"),
        ({**text, "kind": "arguments"}, "providerCallId"),
        ({**text, "kind": "arguments", "providerCallId": ""}, "providerCallId"),
        ({**text, "extra": 1}, "extra"),
        ({"kind": "text", "delta": "x"}, "turnId"),
    ]
    for body, field in cases:
        assert_error(api.post_json(url, body), 422, "validation_error", field=field)
    # Exactly the budget is accepted: 16,384 bytes of JSON.
    assert api.post_json(url, {**text, "delta": "é" * 8192}).status_code == 202
    assert api.post_json(url, {**text, "delta": "\n" * 8192}).status_code == 202
    assert len(received(layer, channel)) == 2


@pytest.mark.django_db
def test_live_needs_the_open_turn(api, user):
    conversation = new_conversation(user)
    url = f"{API}/conversations/{conversation.pk}/live"
    body = {"turnId": str(uuid.uuid4()), "kind": "text", "delta": "x"}
    assert_error(api.post_json(url, body), 409, "turn_not_open", field="turnId")
    turn_id = open_turn(conversation)
    assert_error(api.post_json(url, body), 409, "turn_not_open", field="turnId")
    assert api.post_json(url, {**body, "turnId": turn_id}).status_code == 202
    turn_end(conversation_id=conversation.pk, turn_id=turn_id)
    assert_error(api.post_json(url, {**body, "turnId": turn_id}), 409, "turn_not_open")


@pytest.mark.django_db
def test_another_owners_conversation_is_not_found_like_a_missing_one(api, other_api, user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    body = {"turnId": turn_id, "kind": "text", "delta": "x"}
    answers = [
        assert_error(other_api.post_json(f"{API}/conversations/{cid}/live", body), 404, "not_found")
        for cid in (conversation.pk, uuid.uuid4(), "nope")
    ]
    assert answers[0] == answers[1] == answers[2]


@pytest.mark.django_db
def test_the_function_the_websocket_calls_checks_the_same(user, other_user, settings):
    settings.CHANNEL_LAYERS = IN_MEMORY
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    layer, channel = _listen(conversation)
    with pytest.raises(ValidationFailed) as refused:
        live_publish(user, conversation.pk, turn_id="x", kind="text", delta="d")
    assert refused.value.field == "turnId"
    with pytest.raises(ValidationFailed) as refused:
        live_publish(user, conversation.pk, turn_id=turn_id, kind="text", delta=None)  # type: ignore[arg-type]
    assert refused.value.field == "delta"
    with pytest.raises(NotFound):
        live_publish(other_user, conversation.pk, turn_id=turn_id, kind="text", delta="d")
    with pytest.raises(TurnNotOpen):
        live_publish(user, conversation.pk, turn_id=uuid.uuid4(), kind="text", delta="d")
    # Text entering the server is cleaned: a lone surrogate and U+0000 become U+FFFD.
    live_publish(
        user, conversation.pk, turn_id=uuid.UUID(turn_id), kind="text", delta="a\ud800\x00"
    )
    (message,) = received(layer, channel)
    assert message["delta"] == "a\ufffd\ufffd" and message["turnId"] == turn_id
