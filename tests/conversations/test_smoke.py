import pytest

from conversations.models import ConversationEvent, ToolActivity, ToolCall
from conversations.services.claims import claim_acquire
from conversations.services.settlement import ClaimGuard, call_settle

from .helpers import assistant_calls, new_conversation, open_turn

pytestmark = pytest.mark.django_db


def test_host_call_flow(user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    posted = assistant_calls(
        conversation, turn_id, ("notes", {"q": "x"}), ("bash", {"command": "ls"})
    )
    host_id, bash_id = posted.call_ids
    assert ToolCall.objects.get(pk=host_id).state == "ready"
    assert ToolCall.objects.get(pk=bash_id).state == "awaiting_approval"
    claim = claim_acquire(call_id=host_id, worker="w1")
    event = call_settle(
        call_id=host_id,
        outcome="completed",
        guard=ClaimGuard(claim.token, claim.generation),
        result={"content": [{"type": "text", "text": "hi"}]},
        text="hi",
    )
    assert event.sequence == 3
    assert event.payload["modelContent"] == [{"type": "text", "text": "hi"}]
    assert not ToolCall.objects.filter(pk=host_id).exists()
    assert ToolActivity.objects.get(tool_call_id=host_id).state_json["status"] == "completed"
    assert ConversationEvent.objects.filter(conversation=conversation).count() == 3
