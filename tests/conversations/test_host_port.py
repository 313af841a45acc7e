"""The host tool port through the real HTTP API: claim, progress updates through the per-turn
tracker (whose memory lives in the activity row), settlement, fencing and owner scoping
(docs/subsystems/host_tools.md)."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import threading
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connections
from django.test import Client
from django.utils import timezone

from conversations.api.auth import token_create, token_revoke
from conversations.models import (
    Asset,
    Conversation,
    ConversationEvent,
    ExecutionClaim,
    ToolActivity,
    ToolCall,
)
from conversations.services.recovery import recover_call
from conversations.storage import absolute_from_data, attempt_dir, write_exclusive
from projections.tool_output import bound_tool_output

from ..conftest import ApiClient, client_for
from ..factories import UserFactory
from .api_helpers import API, ISO_MS, assert_error
from .helpers import expire_claim, state_of
from .host_helpers import (
    HOST_TOOL,
    Listener,
    claim,
    claim_one,
    png,
    ready_host_calls,
    settle,
    snapshot,
    update,
)


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


# --- the whole path ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_host_claims_reports_progress_and_settles_a_call(user, api, caplog):
    conversation, turn_id, (call_id,) = ready_host_calls(user)
    listener = Listener(conversation.pk)

    with caplog.at_level(logging.INFO, logger="tools.runtime.host.services"):
        held = claim_one(api, call_id)
    assert held["toolName"] == HOST_TOOL and held["arguments"] == {"query": "q0"}
    assert held["generation"] == 1 and ISO_MS.match(held["expiresAt"])
    row = ExecutionClaim.objects.get(call_id=call_id)
    assert (str(row.token), row.worker, row.generation) == (held["token"], "host-1", 1)
    assert state_of(call_id) == "running"
    (line,) = [r for r in caplog.records if r.getMessage() == "call claimed by host"]
    assert (line.worker, str(line.tool_call_id), str(line.claim_token)) == (
        "host-1",
        call_id,
        held["token"],
    )
    claimed = listener.tool_updates(call_id)
    assert [u["status"] for u in claimed] == ["in_progress"]

    listener = Listener(conversation.pk)
    first = update(
        api,
        call_id,
        held,
        {"status": "in_progress", "title": "Looking up notes", "output": "one\n"},
    )
    assert first.status_code == 200, first.content
    body = first.json()
    assert body["toolCallId"] == call_id and ISO_MS.match(body["expiresAt"])
    rev_after_first = body["rev"]
    second = update(api, call_id, held, {"output": "one\ntwo\n"})
    assert second.json()["rev"] == rev_after_first + 1
    third = update(
        api,
        call_id,
        held,
        {"outputDelta": "three\n", "locations": [{"path": "notes.md", "line": 3}]},
    )
    assert third.json()["rev"] == rev_after_first + 2

    published = listener.tool_updates(call_id)
    assert [u["rev"] for u in published] == [
        rev_after_first,
        rev_after_first + 1,
        rev_after_first + 2,
    ]
    assert published[0] == {
        "toolCallId": call_id,
        "turnId": turn_id,
        "status": "in_progress",
        "title": "Looking up notes",
        "outputDelta": "one\n",
        "rev": rev_after_first,
    }
    assert published[1]["outputDelta"] == "two\n" and "output" not in published[1]
    assert published[2]["outputDelta"] == "three\n"
    activity = ToolActivity.objects.get(tool_call_id=call_id)
    assert activity.payload_json["output"] == {"text": "one\ntwo\nthree\n"}
    assert activity.state_json["title"] == "Looking up notes"
    assert activity.state_json["locations"] == [{"path": "notes.md", "line": 3}]
    assert activity.rev == rev_after_first + 2

    listener = Listener(conversation.pk)
    settled = settle(
        api,
        call_id,
        held,
        [{"type": "text", "text": "Found 3 notes."}, {"type": "text", "text": "All in notes.md."}],
        details={"hits": 3, "source": ["notes.md"]},
    )
    assert settled.status_code == 200, settled.content
    answer = settled.json()
    assert (answer["id"], answer["outcome"]) == (call_id, "completed")
    event = answer["response"]
    assert event["type"] == "tool_call_response" and event["toolCallId"] == call_id
    payload = event["payload"]
    assert payload["modelContent"] == [{"type": "text", "text": "Found 3 notes.\nAll in notes.md."}]
    assert len(payload["assetIds"]) == 1
    result = json.loads(api.get(f"{API}/assets/{payload['assetIds'][0]}").getvalue())
    assert result == {
        "content": [
            {"type": "text", "text": "Found 3 notes."},
            {"type": "text", "text": "All in notes.md."},
        ],
        "details": {"hits": 3, "source": ["notes.md"]},
    }
    assert not ToolCall.objects.filter(pk=call_id).exists()
    assert not ExecutionClaim.objects.filter(call_id=call_id).exists()
    stored = ConversationEvent.objects.get(tool_call_id=call_id)
    last = Conversation.objects.get(pk=conversation.pk).last_sequence
    assert stored.sequence == event["sequence"] == last

    final = listener.drain()
    kinds = [m["type"] for m in final]
    assert kinds == ["conversation.event", "tool.updated", "tool_call.changed"]
    done = final[1]["update"]
    assert done["status"] == "completed" and done["rev"] == rev_after_first + 3
    assert done["output"] == {"text": "Found 3 notes.\nAll in notes.md."}
    activity = ToolActivity.objects.get(tool_call_id=call_id)
    assert activity.is_final and activity.state_json["status"] == "completed"
    assert "finishedAt" in activity.state_json

    # The barrier sees the settled call; the call reads settled.
    results = api.get(f"{API}/conversations/{conversation.pk}/turns/{turn_id}/results").json()
    assert results["settled"] is True
    assert [r["toolCallId"] for r in results["results"]] == [call_id]
    assert api.get(f"{API}/tool-calls/{call_id}").json()["outcome"] == "completed"


@pytest.mark.django_db
def test_each_update_renews_the_lease(user, api):
    _, _, (call_id,) = ready_host_calls(user)
    held = claim_one(api, call_id)
    soon = timezone.now() + timedelta(seconds=2)
    ExecutionClaim.objects.filter(call_id=call_id).update(expires_at=soon, heartbeat_at=soon)
    before = timezone.now()
    answer = update(api, call_id, held, {"status": "in_progress"})
    assert answer.status_code == 200
    row = ExecutionClaim.objects.get(call_id=call_id)
    lease = timedelta(seconds=settings.TOOLCORE_CLAIM_LEASE)
    assert row.expires_at >= before + lease and row.heartbeat_at >= before
    assert answer.json()["expiresAt"] == row.expires_at.strftime("%Y-%m-%dT%H:%M:%S.") + (
        f"{row.expires_at.microsecond // 1000:03d}Z"
    )
    # An update that changes nothing still renews, and answers the same rev.
    rev = answer.json()["rev"]
    again = update(api, call_id, held, {"status": "in_progress"})
    assert again.json()["rev"] == rev
    assert ExecutionClaim.objects.get(call_id=call_id).expires_at >= row.expires_at


@pytest.mark.django_db
def test_claims_take_at_most_max_oldest_first_and_nothing_else(user, api):
    _, _, call_ids = ready_host_calls(user, count=3)
    search = ready_host_calls(user, tool="web_search")[2][0]
    image = ready_host_calls(user, tool="image_gen")[2][0]
    one = claim(api).json()["claims"]
    assert [c["toolCallId"] for c in one] == [call_ids[0]]  # max defaults to 1
    two = claim(api, max=5).json()["claims"]
    assert [c["toolCallId"] for c in two] == call_ids[1:]
    assert claim(api, max=5).json() == {"claims": []}  # nothing ready
    assert state_of(search) == "ready" and state_of(image) == "ready"  # tools not named
    both = claim(api, tools=["web_search", "image_gen"], max=2.0).json()["claims"]
    assert {c["toolName"] for c in both} == {"web_search", "image_gen"}


# --- owner scoping ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_token_claims_its_own_users_calls_and_the_host_scope_every_owners(user, api):
    mine = ready_host_calls(user)[2][0]
    stranger = UserFactory()
    theirs = ready_host_calls(stranger)[2][0]
    stranger_api = ApiClient(token_create(user=stranger)[1])

    # A plain token: only its user's calls; another owner's call is 404 on every host route.
    held = claim_one(api, mine)
    assert claim(api).json() == {"claims": []}
    fake = {"token": held["token"], "generation": 1}
    assert_error(update(api, theirs, fake, {"status": "in_progress"}), 404, "not_found")
    assert_error(settle(api, theirs, fake, []), 404, "not_found")
    assert_error(update(stranger_api, mine, held, {"status": "in_progress"}), 404, "not_found")
    assert_error(settle(stranger_api, mine, held, []), 404, "not_found")
    assert state_of(mine) == "running" and state_of(theirs) == "ready"

    # A session reaches only its own user's calls, even when that user has a host token.
    host_user = UserFactory()
    client_for(host_user, name="host", scopes=["host"])
    browser = Client()
    browser.force_login(host_user)
    answer = claim(browser, worker="browser")
    assert answer.status_code == 200 and answer.json() == {"claims": []}

    # A token with the host scope: every owner's calls, and it may update and settle them.
    host = client_for(host_user, name="host", scopes=["host"])
    taken = claim_one(host, theirs)
    assert update(host, theirs, taken, {"outputDelta": "x"}).status_code == 200
    assert settle(host, theirs, taken, [{"type": "text", "text": "ok"}]).status_code == 200
    # The owner still reads it; the host's user has no conversation of its own.
    assert stranger_api.get(f"{API}/tool-calls/{theirs}").json()["outcome"] == "completed"


# --- the tracker's memory lives in the row -------------------------------------------------------


def _in_another_thread(function):
    """Run ``function`` in a thread of its own, with its own database connection: as another
    web process would (nothing of this process's memory reaches it but the database)."""
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = function()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    return outcome["value"]


@pytest.mark.django_db(transaction=True)
def test_the_whole_output_becomes_deltas_across_processes(user, api):
    conversation, _, (call_id,) = ready_host_calls(user)
    held = claim_one(api, call_id)
    listener = Listener(conversation.pk)

    assert update(api, call_id, held, {"output": "alpha\n"}).status_code == 200
    row = ToolActivity.objects.get(tool_call_id=call_id)
    assert (row.raw_length, row.raw_sha1) == (6, _sha1("alpha\n"))

    # The next update reaches "another process": a new client (of the same API token: a claim
    # belongs to the token that took it) and a new connection, so the tracker's memory can
    # only come from the row.
    token = ApiClient(api.defaults["HTTP_AUTHORIZATION"].removeprefix("Bearer "))
    answer = _in_another_thread(lambda: update(token, call_id, held, {"output": "alpha\nbeta\n"}))
    assert answer.status_code == 200, answer.content
    row.refresh_from_db()
    assert (row.raw_length, row.raw_sha1) == (11, _sha1("alpha\nbeta\n"))
    assert row.payload_json["output"] == {"text": "alpha\nbeta\n"}

    # Not an extension of what was sent: the whole output replaces it.
    assert update(api, call_id, held, {"output": "ALPHA\n"}).status_code == 200
    row.refresh_from_db()
    assert (row.raw_length, row.raw_sha1) == (6, _sha1("ALPHA\n"))
    assert row.payload_json["output"] == {"text": "ALPHA\n"}

    # The same text again: nothing new, nothing published, the rev stays.
    rev = row.rev
    assert update(api, call_id, held, {"output": "ALPHA\n"}).json()["rev"] == rev

    outputs = [
        {k: u[k] for k in ("output", "outputDelta") if k in u}
        for u in listener.tool_updates(call_id)
    ]
    assert outputs == [
        {"outputDelta": "alpha\n"},
        {"outputDelta": "beta\n"},
        {"output": {"text": "ALPHA\n"}},
    ]


@pytest.mark.django_db
def test_growing_outputs_fold_to_the_bounded_whole(user, api):
    """Prefixes of a 60 KiB output (with non-ASCII) sent one after the other, and deltas after
    them: the card holds exactly the bound of the whole text."""
    _, _, (call_id,) = ready_host_calls(user)
    held = claim_one(api, call_id)
    whole = "".join(f"line {i}: {'é' * (i % 7)} ✓\n" for i in range(4000))
    cuts = [0, 10, 5000, 5001, 30000, 30000, len(whole) - 100, len(whole)]
    for end in cuts[1:]:
        assert update(api, call_id, held, {"output": whole[:end]}).status_code == 200
    tail = "".join(f"more {i}\n" for i in range(50))
    for start in range(0, len(tail), 97):
        assert (
            update(api, call_id, held, {"outputDelta": tail[start : start + 97]}).status_code == 200
        )
    row = ToolActivity.objects.get(tool_call_id=call_id)
    assert row.payload_json["output"] == bound_tool_output(whole + tail)
    assert row.raw_length == len(whole + tail)
    # A stored digest cannot be extended by a delta: the memory says "unknown", and the next
    # whole output replaces (correct, merely not a delta).
    assert row.raw_sha1 == ""
    assert update(api, call_id, held, {"output": whole + tail + "end\n"}).status_code == 200
    row.refresh_from_db()
    assert row.payload_json["output"] == bound_tool_output(whole + tail + "end\n")
    assert row.raw_sha1 == _sha1(whole + tail + "end\n")


# --- fencing: a claim that does not hold changes nothing ---------------------------------------


@pytest.mark.django_db
def test_a_token_or_generation_the_port_never_gave_is_404_and_changes_nothing(user, api):
    """A claim the port never gave (a made-up token, the right token with another generation)
    is answered as a missing call: 404 and nothing changes (tests/security/
    test_host_port_probing.py holds the whole matrix)."""
    conversation, _, (call_id,) = ready_host_calls(user)
    held = claim_one(api, call_id)
    assert update(api, call_id, held, {"output": "kept\n"}).status_code == 200
    before = snapshot(conversation)
    wrong_token = {**held, "token": "00000000-0000-4000-8000-000000000000"}
    wrong_generation = {**held, "generation": 2}
    for stale in (wrong_token, wrong_generation):
        assert_error(update(api, call_id, stale, {"output": "kept\nlost\n"}), 404, "not_found")
        refused = settle(api, call_id, stale, [{"type": "text", "text": "late"}], details={"x": 1})
        assert_error(refused, 404, "not_found")
        assert snapshot(conversation) == before
    # The holder still holds it.
    assert settle(api, call_id, held, [{"type": "text", "text": "on time"}]).status_code == 200


@pytest.mark.django_db
def test_a_claim_recovered_after_expiry_refuses_the_late_host(user, api):
    conversation, _, (call_id,) = ready_host_calls(user)
    held = claim_one(api, call_id)
    action = recover_call(call_id=expire_claim(call_id))
    assert action is not None and "indeterminate" in action.action  # never replayed
    before = snapshot(conversation)
    assert_error(update(api, call_id, held, {"status": "in_progress"}), 409, "stale_claim")
    late = settle(api, call_id, held, [{"type": "text", "text": "late"}])
    assert_error(late, 409, "stale_claim")
    assert snapshot(conversation) == before
    assert api.get(f"{API}/tool-calls/{call_id}").json()["outcome"] == "indeterminate"


@pytest.mark.django_db
def test_a_second_settlement_leaves_the_winners_files_and_assets(user, api):
    conversation, _, (call_id,) = ready_host_calls(user)
    held = claim_one(api, call_id)
    image = {"type": "image", "mediaType": "image/png", "data": base64.b64encode(png()).decode()}
    assert settle(api, call_id, held, [image]).status_code == 200
    before = snapshot(conversation)
    other = {**image, "data": base64.b64encode(png(seed=9)).decode()}
    assert_error(settle(api, call_id, held, [other], outcome="failed"), 409, "stale_claim")
    assert snapshot(conversation) == before


@pytest.mark.django_db
def test_files_of_an_earlier_try_with_other_bytes_refuse_the_settlement(user, api):
    """A holder that wrote an image and died before settling, then settles with other bytes:
    the file is never replaced, so the settlement is refused and the call stays running."""
    conversation, _, (call_id,) = ready_host_calls(user)
    held = claim_one(api, call_id)
    first = png(seed=1)
    path = attempt_dir(conversation.pk, call_id, 1) / "images" / "1.png"
    write_exclusive(path, first)
    before = snapshot(conversation)
    image = {
        "type": "image",
        "mediaType": "image/png",
        "data": base64.b64encode(png(seed=2)).decode(),
    }
    assert_error(settle(api, call_id, held, [image]), 409, "stale_claim")
    assert snapshot(conversation) == before and path.read_bytes() == first
    # The same bytes again are accepted (a retried settlement).
    same = {**image, "data": base64.b64encode(first).decode()}
    answer = settle(api, call_id, held, [same])
    assert answer.status_code == 200, answer.content
    asset_ids = answer.json()["response"]["payload"]["assetIds"]
    (image_asset,) = Asset.objects.filter(pk__in=asset_ids, kind="image")
    assert absolute_from_data(image_asset.path) == path.resolve()


@pytest.mark.django_db
def test_every_host_route_needs_live_credentials(user, api):
    conversation, _, (call_id,) = ready_host_calls(user)
    held = claim_one(api, call_id)
    before = snapshot(conversation)
    row, secret = token_create(user=user, name="revoked", scopes=["host"])
    token_revoke(token_id=row.pk)
    for client in (Client(), ApiClient(secret), Client(HTTP_AUTHORIZATION="Bearer ")):
        for response in (
            claim(client),
            update(client, call_id, held, {"outputDelta": "x"}),
            settle(client, call_id, held, [{"type": "text", "text": "x"}]),
        ):
            assert_error(response, 401, "unauthorized")
            assert response["WWW-Authenticate"] == "Bearer"
    assert snapshot(conversation) == before


@pytest.mark.django_db
def test_an_expired_claim_not_yet_recovered_still_holds_and_is_renewed(user, api):
    """Holding is by token and generation, not by the clock: until recovery takes the call,
    the holder's next update renews its lease."""
    _, _, (call_id,) = ready_host_calls(user)
    held = claim_one(api, call_id)
    expire_claim(call_id)
    assert update(api, call_id, held, {"outputDelta": "still here\n"}).status_code == 200
    assert ExecutionClaim.objects.get(call_id=call_id).expires_at > timezone.now()
    assert recover_call(call_id=call_id) is None  # the lease is live again: left alone
    assert state_of(call_id) == "running"
