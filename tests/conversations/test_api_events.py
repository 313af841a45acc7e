"""/conversations/{cid}/events: replay pages (docs/subsystems/api.md, "Events replay pages")."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import transaction

from conversations.services.events import event_append
from conversations.services.messages import message_post
from projections.frames import REPLAY_BUDGET_BYTES, REPLAY_MAX_EVENTS

from .api_helpers import API, ISO_MS, assert_error, compact_size
from .helpers import new_conversation, open_turn

# --- 3. events ---------------------------------------------------------------------------------


def _assistant_text(conversation, turn_id, message_id: str, text: str) -> None:
    message_post(
        conversation_id=conversation.pk,
        message_id=message_id,
        role="assistant",
        turn_id=turn_id,
        content=[{"type": "text", "text": text}],
    )


def _pages(api, conversation, *, limit: int | None = None) -> list[dict[str, Any]]:
    pages, after = [], 0
    while True:
        query = f"after={after}" + (f"&limit={limit}" if limit else "")
        response = api.get(f"{API}/conversations/{conversation.pk}/events?{query}")
        assert response.status_code == 200, response.content[:300]
        assert response["Content-Type"] == "application/json"
        page = json.loads(response.content)
        assert set(page) == {"events", "lastSequence", "nextAfter"}
        pages.append(page)
        if page["nextAfter"] is None:
            return pages
        assert page["nextAfter"] == page["events"][-1]["sequence"]
        after = page["nextAfter"]
        assert len(pages) < 200


def _check_pages(pages: list[dict[str, Any]], last: int, *, limit: int = REPLAY_MAX_EVENTS) -> None:
    sequences = [e["sequence"] for p in pages for e in p["events"]]
    assert sequences == list(range(1, last + 1))
    for page in pages:
        assert page["lastSequence"] == last
        assert 1 <= len(page["events"]) <= min(limit, REPLAY_MAX_EVENTS)
        size = sum(compact_size(e) for e in page["events"])
        if len(page["events"]) > 1:
            assert size <= REPLAY_BUDGET_BYTES, size
        reaches_head = page["events"][-1]["sequence"] == last
        assert (page["nextAfter"] is None) == reaches_head
        for event in page["events"]:
            assert set(event) == {
                "sequence",
                "type",
                "turnId",
                "toolCallId",
                "payload",
                "createdAt",
            }
            assert ISO_MS.match(event["createdAt"])


@pytest.mark.django_db
def test_events_pages_are_ascending_and_stop_at_100_events(api, user):
    conversation = new_conversation(user)
    empty = api.get(f"{API}/conversations/{conversation.pk}/events").json()
    assert empty == {"events": [], "lastSequence": 0, "nextAfter": None}
    turn_id = open_turn(conversation)
    for i in range(104):
        _assistant_text(conversation, turn_id, f"m{i}", f"text {i}")
    pages = _pages(api, conversation)
    assert [len(p["events"]) for p in pages] == [100, 5]
    _check_pages(pages, 105)
    small = _pages(api, conversation, limit=7)
    assert len(small) == 15
    _check_pages(small, 105, limit=7)
    first = small[0]["events"]
    assert first[0]["type"] == "user_message"
    assert first[1]["payload"] == {
        "messageId": "m0",
        "content": [{"type": "text", "text": "text 0"}],
    }
    at_head = api.get(f"{API}/conversations/{conversation.pk}/events?after=105").json()
    assert at_head == {"events": [], "lastSequence": 105, "nextAfter": None}
    response = api.get(f"{API}/conversations/{conversation.pk}/events?after=106")
    assert_error(response, 409, "cursor_ahead")


@pytest.mark.django_db
def test_events_pages_stay_within_512_kib(api, user):
    """Events of ~150 KiB (multi-byte text) cut pages by bytes; a lone event over the budget
    (posting refuses such a message now; one stored before that rule) still goes in, alone."""
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    chunk = 'é€😀 " \\ \n\u2028x' * 7000  # ~150 KiB of UTF-8 with characters JSON escapes
    for i in range(7):
        _assistant_text(conversation, turn_id, f"big{i}", f"{i}:" + chunk)
    with transaction.atomic():
        huge = [{"type": "text", "text": "H" * (REPLAY_BUDGET_BYTES + 1000)}]
        event_append(
            conversation_id=conversation.pk,
            type="assistant_message",
            payload={"messageId": "huge", "content": huge},
            turn_id=turn_id,
            message_id="huge",
        )
    for i in range(3):
        _assistant_text(conversation, turn_id, f"tail{i}", "small")
    pages = _pages(api, conversation)
    _check_pages(pages, 12)
    sizes = [sum(compact_size(e) for e in p["events"]) for p in pages]
    assert all(
        s <= REPLAY_BUDGET_BYTES for s, p in zip(sizes, pages, strict=True) if len(p["events"]) > 1
    )
    # Greedy: a page stops only because the next event would not fit.
    flat = [e for p in pages for e in p["events"]]
    for page, size in zip(pages[:-1], sizes[:-1], strict=True):
        following = flat[page["events"][-1]["sequence"]]
        assert size + compact_size(following) > REPLAY_BUDGET_BYTES
    huge = [p for p in pages if any(e["payload"].get("messageId") == "huge" for e in p["events"])]
    assert len(huge) == 1 and len(huge[0]["events"]) == 1
    assert sizes[pages.index(huge[0])] > REPLAY_BUDGET_BYTES
    # The first page after the user message holds 3 big events at most (3 × 150 KiB fits).
    assert max(len(p["events"]) for p in pages) <= 4
    # Starting right at the huge event: it alone, with the cursor just past it.
    huge_seq = huge[0]["events"][0]["sequence"]
    page = api.get(f"{API}/conversations/{conversation.pk}/events?after={huge_seq - 1}").json()
    assert [e["sequence"] for e in page["events"]] == [huge_seq]
    assert page["nextAfter"] == huge_seq
    # The text comes back exactly as posted.
    assert flat[1]["payload"]["content"][0]["text"] == "0:" + chunk
