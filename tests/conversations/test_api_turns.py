"""Turns over the API: cancel, end, the queue and the turn barrier
(docs/subsystems/turn_barrier.md)."""

from __future__ import annotations

import time

import pytest

from conversations.models import (
    ConversationEvent,
    ToolCall,
    Turn,
)
from conversations.services.claims import claim_acquire

from .api_helpers import API, assert_error, events_of, grant_run_commands, settle_host
from .helpers import assistant_calls, new_conversation, open_turn, outcome_of

# --- 3. turns ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_turn_cancel_settles_open_calls_and_leaves_the_turn_open(api, user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    ready, bash, running = assistant_calls(
        conversation, turn_id, ("notes", {}), ("bash", {"command": "ls"}), ("notes", {"n": 2})
    ).call_ids
    claim_acquire(call_id=running, worker="w")
    url = f"{API}/conversations/{conversation.pk}/turns/{turn_id}/cancel"
    response = api.post_json(url)
    assert response.status_code == 200
    body = response.json()
    assert body["turnId"] == turn_id
    assert sorted((r["toolCallId"], r["outcome"]) for r in body["results"]) == sorted(
        [(str(ready), "cancelled"), (str(bash), "cancelled"), (str(running), "indeterminate")]
    )
    assert not ToolCall.objects.filter(turn_id=turn_id).exists()
    assert Turn.objects.get(pk=turn_id).status == "open"
    assert not ConversationEvent.objects.filter(type="turn_ended").exists()
    # Still open: the model may go on, a new user message may not.
    message = {"messageId": "u9", "role": "user", "content": []}
    assert_error(
        api.post_json(f"{API}/conversations/{conversation.pk}/messages", message), 409, "turn_open"
    )
    more = {"messageId": "a9", "role": "assistant", "turnId": turn_id, "content": []}
    assert api.post_json(f"{API}/conversations/{conversation.pk}/messages", more).status_code == 201
    # Nothing open: an empty result.
    assert api.post_json(url).json() == {"turnId": turn_id, "results": []}


@pytest.mark.django_db
def test_turn_end_settles_then_appends_exactly_one_turn_ended(api, user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    ready, bash = assistant_calls(
        conversation, turn_id, ("notes", {}), ("bash", {"command": "ls"})
    ).call_ids
    url = f"{API}/conversations/{conversation.pk}/turns/{turn_id}/end"
    response = api.post_json(url, {"reason": "stopped"})
    assert response.status_code == 200
    assert response.json() == {"turnId": turn_id, "status": "ended"}
    types = [t for _, t in events_of(conversation)]
    assert types == [
        "user_message",
        "assistant_message",
        "tool_call_response",
        "tool_call_response",
        "turn_ended",
    ]
    assert outcome_of(ready) == "cancelled" and outcome_of(bash) == "cancelled"
    ended = ConversationEvent.objects.get(conversation=conversation, type="turn_ended")
    assert ended.payload == {"turnId": turn_id, "reason": "stopped"}
    assert Turn.objects.get(pk=turn_id).status == "ended"
    last = events_of(conversation)
    for body in ({}, {"reason": "completed"}, None):
        again = api.post_json(url, body)
        assert again.status_code == 200
        assert again.json() == {"turnId": turn_id, "status": "ended"}
    assert events_of(conversation) == last
    # A new turn may open now; its end defaults to reason completed.
    new_turn = open_turn(conversation)
    end = api.post_json(f"{API}/conversations/{conversation.pk}/turns/{new_turn}/end")
    assert end.status_code == 200
    latest = ConversationEvent.objects.filter(type="turn_ended").order_by("-sequence").first()
    assert latest.payload == {"turnId": new_turn, "reason": "completed"}


@pytest.mark.django_db
def test_queue_ack_is_idempotent_on_an_empty_queue(api, user):
    conversation = new_conversation(user)
    open_turn(conversation)
    url = f"{API}/conversations/{conversation.pk}/queue/ack"
    first = api.post_json(url, {"upTo": 1})
    assert first.status_code == 200
    assert first.json()["queue"] == []
    assert api.post_json(url, {"upTo": 1}).json() == first.json()


# --- 3. the turn barrier -------------------------------------------------------------------------


def _results(api, conversation, turn_id, wait: float = 0):
    response = api.get(f"{API}/conversations/{conversation.pk}/turns/{turn_id}/results?wait={wait}")
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"] == "application/json"
    return response.json()


@pytest.mark.django_db(transaction=True)
def test_turn_barrier_through_the_api(api, user):
    grant_run_commands(user)
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    assert _results(api, conversation, turn_id) == {"settled": True, "results": [], "queue": []}

    posted = assistant_calls(
        conversation,
        turn_id,
        ("notes", {"n": 1}),
        ("read", {"path": 5}),
        ("notes", {"n": 3}),
        ("bash", {"command": "ls"}),
        text="Working on it.",
    )
    first_notes, bad_read, second_notes, bash = (str(i) for i in posted.call_ids)
    started = time.monotonic()
    pending = _results(api, conversation, turn_id, wait=0)
    assert time.monotonic() - started < 10  # at once; the bound only catches a hang
    assert pending["settled"] is False
    assert set(pending) == {"settled", "pending"}
    assert sorted((p["toolCallId"], p["state"]) for p in pending["pending"]) == sorted(
        [(first_notes, "ready"), (second_notes, "ready"), (bash, "awaiting_approval")]
    )

    started = time.monotonic()
    waited = _results(api, conversation, turn_id, wait=0.5)
    assert waited["settled"] is False
    assert time.monotonic() - started >= 0.45

    # Settle out of order; approve and run the bash call.
    settle_host(second_notes, text="three")
    approve = {"requestId": "r", "kind": "approval", "decision": "allow"}
    assert api.post_json(f"{API}/tool-calls/{bash}/resolution", approve).status_code == 200
    settle_host(bash, text="listing")
    assert [p["toolCallId"] for p in _results(api, conversation, turn_id)["pending"]] == [
        first_notes
    ]
    settle_host(first_notes, text="one")

    started = time.monotonic()
    done = _results(api, conversation, turn_id, wait=30)
    # Settled already: it answers at once, not at its wait (30 s); 15 s is room for a loaded
    # machine, not a measure of speed.
    assert time.monotonic() - started < 15
    assert done["settled"] is True and done["queue"] == []
    assert set(done) == {"settled", "results", "queue"}
    assert [r["contentIndex"] for r in done["results"]] == [1, 2, 3, 4]
    assert [r["toolCallId"] for r in done["results"]] == [first_notes, bad_read, second_notes, bash]
    assert [r["outcome"] for r in done["results"]] == [
        "completed",
        "failed",
        "completed",
        "completed",
    ]
    for result, block in zip(done["results"], posted.body["toolCalls"], strict=True):
        assert set(result) == {
            "toolCallId",
            "providerCallId",
            "contentIndex",
            "toolName",
            "outcome",
            "modelContent",
        }
        assert result["providerCallId"] == block["providerCallId"]
        assert result["toolName"] == block["toolName"]
        assert isinstance(result["modelContent"], list) and result["modelContent"]

    # Only the latest assistant message's calls count.
    (later,) = assistant_calls(conversation, turn_id, ("notes", {"n": 9})).call_ids
    assert _results(api, conversation, turn_id)["settled"] is False
    settle_host(later, text="nine")
    latest = _results(api, conversation, turn_id)
    assert [r["toolCallId"] for r in latest["results"]] == [str(later)]
    assert latest["results"][0]["contentIndex"] == 0


@pytest.mark.django_db(transaction=True)  # the barrier reads in its own threads
@pytest.mark.parametrize("how", ["call cancel", "turn cancel", "turn end", "denied"])
@pytest.mark.parametrize("include", [True, False])
def test_a_command_turn_ends_with_its_call_and_its_results_hold_it(api, user, how, include):
    """Whatever settles a command's call, its turn ends (``reason: command``), the response
    says ``includeInContext`` and the turn's results hold the call with it."""
    from tools.models import PermissionRule

    grant_run_commands(user)
    conversation = new_conversation(user)
    if how == "denied":
        PermissionRule.objects.create(tool_name="bash", pattern="rm *", decision="deny")
    body = {"inputId": "in-1", "command": "rm -rf build", "includeInContext": include}
    posted = api.post_json(f"{API}/conversations/{conversation.pk}/commands", body).json()
    turn_id, call_id = posted["turnId"], posted["toolCall"]["id"]
    base = f"{API}/conversations/{conversation.pk}/turns/{turn_id}"
    if how == "call cancel":
        assert api.post_json(f"{API}/tool-calls/{call_id}/cancel").status_code == 200
    elif how == "turn cancel":
        assert api.post_json(f"{base}/cancel").json()["results"] == [
            {"toolCallId": call_id, "outcome": "cancelled"}
        ]
    elif how == "turn end":
        ended = api.post_json(f"{base}/end", {"reason": "stopped"})
        assert ended.json() == {"turnId": turn_id, "status": "ended"}
    outcome = "denied" if how == "denied" else "cancelled"
    assert [t for _, t in events_of(conversation)] == ["tool_call_response", "turn_ended"]
    ended_event = ConversationEvent.objects.get(conversation=conversation, type="turn_ended")
    assert ended_event.payload == {"turnId": turn_id, "reason": "command"}
    response = ConversationEvent.objects.get(tool_call_id=call_id).payload
    assert (response["outcome"], response["includeInContext"]) == (outcome, include)
    results = _results(api, conversation, turn_id)
    assert results["settled"] is True
    (entry,) = results["results"]
    assert (entry["toolCallId"], entry["outcome"], entry["includeInContext"]) == (
        call_id,
        outcome,
        include,
    )
    assert entry["providerCallId"] == "" and entry["contentIndex"] is None
    # The conversation is free for the next turn.
    user_turn = {"messageId": "u-next", "role": "user", "content": [{"type": "text", "text": "hi"}]}
    assert (
        api.post_json(f"{API}/conversations/{conversation.pk}/messages", user_turn).status_code
        == 201
    )


@pytest.mark.django_db(transaction=True)
def test_a_model_call_result_has_no_include_in_context(api, user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("notes", {})).call_ids
    settle_host(call_id, text="done")
    (entry,) = _results(api, conversation, turn_id)["results"]
    assert "includeInContext" not in entry
    assert "includeInContext" not in ConversationEvent.objects.get(tool_call_id=call_id).payload
