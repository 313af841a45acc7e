"""Bounded call arguments on the wire: ``tool_call.changed`` and a snapshot's ``calls`` carry at
most 4 KiB of arguments; ``GET /tool-calls/{id}`` keeps them whole (docs/subsystems/publishing.md)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from conversations.models import ToolCall
from conversations.services import publish
from conversations.services._in_transaction import call_create
from conversations.services.events import conversation_lock
from conversations.services.publish import conversation_group
from conversations.services.supervision import call_supervise
from conversations.shapes import call_wire
from conversations.snapshots import snapshot_read
from projections.json_cost import json_size
from projections.tool_input import INPUT_MAX_BYTES
from tests.realtime.helpers import received

from .api_helpers import API, compact_size
from .helpers import new_conversation, open_turn

IN_MEMORY = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
MIB = 1024 * 1024


def _create(conversation, turn_id: str, tool_name: str, arguments: dict[str, Any]) -> uuid.UUID:
    """A call created by the service (a message could not carry 1 MiB of arguments: its event
    is held to 512 KiB; a host or an import could), then supervised as a message's would be."""
    call_id = uuid.uuid4()
    with publish.atomic():
        conversation_lock(conversation.pk)
        call_create(
            call_id=call_id,
            conversation_id=conversation.pk,
            turn_id=turn_id,
            tool_name=tool_name,
            arguments=arguments,
            origin="model",
        )
    call_supervise(call_id=call_id)
    return call_id


@pytest.mark.django_db
def test_a_call_with_1_mib_of_arguments_publishes_frames_of_a_few_kib(
    api, user, settings, django_capture_on_commit_callbacks
):
    settings.CHANNEL_LAYERS = IN_MEMORY
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(conversation_group(conversation.pk), channel)
    arguments = {"command": "echo " + "x" * MIB, "timeout": 30}
    with django_capture_on_commit_callbacks(execute=True):
        call_id = _create(conversation, turn_id, "bash", arguments)
    changed = [m for m in received(layer, channel) if m["type"] == "tool_call.changed"]
    assert [m["call"]["state"] for m in changed] == ["supervising", "awaiting_approval"]
    for message in changed:
        assert compact_size(message) < 8 * 1024, compact_size(message)
        call = message["call"]
        assert json_size(call["arguments"]) <= INPUT_MAX_BYTES
        assert call["arguments"]["timeout"] == 30
        assert call["arguments"]["command"].startswith("echo xxx")
        assert call["arguments"]["command"].endswith("…")
        assert "argumentsOmitted" not in call
    # The whole arguments on demand.
    whole = json.loads(api.get(f"{API}/tool-calls/{call_id}").content)
    assert whole["arguments"] == arguments
    # And in a snapshot: bounded too.
    (listed,) = snapshot_read(user, conversation.pk)["calls"]
    assert listed["arguments"] == changed[-1]["call"]["arguments"]


@pytest.mark.django_db
def test_arguments_that_cannot_be_bounded_are_omitted_and_said_so(user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    # 64 keys of 100 characters: keys are never cut, so nothing fits 4 KiB.
    arguments = {f"{n:03d}" + "k" * 100: n for n in range(64)}
    call_id = _create(conversation, turn_id, "notes", arguments)
    call = ToolCall.objects.get(pk=call_id)
    wire = call_wire(call, bounded=True)
    assert wire["arguments"] is None and wire["argumentsOmitted"] is True
    assert call_wire(call)["arguments"] == arguments and "argumentsOmitted" not in call_wire(call)
    (listed,) = snapshot_read(user, conversation.pk)["calls"]
    assert listed["arguments"] is None and listed["argumentsOmitted"] is True


@pytest.mark.django_db
def test_edit_bodies_do_not_cross_the_wire(user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    arguments = {"path": "a.txt", "old_string": "secret old", "new_string": "secret new"}
    call_id = _create(conversation, turn_id, "edit", arguments)
    wire = call_wire(ToolCall.objects.get(pk=call_id), bounded=True)
    assert wire["arguments"] == {"path": "a.txt"}
    assert set(wire) - {"argumentsOmitted"} == set(call_wire(ToolCall.objects.get(pk=call_id)))
