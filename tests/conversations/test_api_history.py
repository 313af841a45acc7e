"""GET /conversations/{cid}/history and ``history_page`` (docs/subsystems/api.md, "History"):
conversation order, keyset pages that lose and repeat nothing, frame budgets, payloads of older
cards never read, and pages that cost the same in a conversation of 100 calls or 10,000."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations.fields import dumps
from conversations.models import Conversation, ConversationEvent, ToolActivity, Turn
from conversations.services.cancel import call_cancel, turn_end
from conversations.services.messages import command_post
from conversations.snapshots import _cursor_encode, history_page
from projections.frames import FRAME_BUDGET_BYTES, PAYLOAD_BUDGET_BYTES
from projections.tool_output import bound_tool_output
from tools.models import PermissionRule

from .admin_helpers import settle_command
from .api_helpers import (
    API,
    PAYLOAD_KEYS,
    assert_error,
    build_world,
    compact_size,
    grant_run_commands,
    payload_bytes,
    settle_host,
)
from .helpers import assistant_calls, new_conversation, open_turn


def _page(api, conversation, **query: Any) -> dict[str, Any]:
    params = "&".join(f"{k}={v}" for k, v in query.items() if v is not None)
    response = api.get(f"{API}/conversations/{conversation.pk}/history?{params}")
    assert response.status_code == 200, response.content[:300]
    assert len(response.content) <= FRAME_BUDGET_BYTES
    body = json.loads(response.content)
    assert set(body) == {"items", "nextCursor"}
    return body


def _walk(api, conversation, limit: int | None = None) -> list[dict[str, Any]]:
    pages, before = [], None
    while True:
        page = _page(api, conversation, before=before, limit=limit)
        pages.append(page)
        assert page["items"], "a page always holds an item"
        before = page["nextCursor"]
        if before is None:
            return pages
        assert len(pages) < 500


def _key(item: dict[str, Any]) -> str:
    if item["type"] == "message":
        return f"m{item['event']['sequence']}"
    return f"t:{item['toolCallId']}"


# --- order ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_messages_and_cards_interleave_in_conversation_order(api, user):
    conversation = new_conversation(user)
    cid = conversation.pk
    turn_id = open_turn(conversation)  # 1 user_message
    c1, c2 = assistant_calls(  # 2 assistant_message
        conversation, turn_id, ("notes", {"n": 1}), ("notes", {"n": 2}), text="two calls"
    ).call_ids
    settle_host(c1, text="one")  # 3 response
    settle_host(c2, text="two")  # 4 response
    assistant_calls(conversation, turn_id, text="both done")  # 5 assistant_message
    turn_end(conversation_id=cid, turn_id=turn_id)  # 6 turn_ended
    grant_run_commands(user)
    command = command_post(conversation_id=cid, user=user, input_id="i1", command="ls -la")
    (c3,) = command.call_ids
    call_cancel(call_id=c3)  # 7 response, 8 turn_ended
    turn_id = open_turn(conversation)  # 9 user_message
    (c4,) = assistant_calls(conversation, turn_id, ("bash", {"command": "make"})).call_ids  # 10

    items = _page(api, conversation)["items"]
    assert [_key(i) for i in items] == [
        f"t:{c4}",
        "m10",
        "m9",
        f"t:{c3}",  # where its turn began: after the last event before it
        "m5",
        f"t:{c2}",
        f"t:{c1}",  # a message's cards follow it, in content order
        "m2",
        "m1",
    ]
    by_key = {_key(i): i for i in items}
    assert by_key["m2"]["event"]["type"] == "assistant_message"
    assert by_key["m1"]["event"]["payload"]["content"] == [{"type": "text", "text": "hello"}]
    assert set(by_key["m1"]) == {"type", "event"}
    assert by_key[f"t:{c1}"]["output"] == {"text": "one"}
    assert by_key[f"t:{c3}"]["status"] == "cancelled" and by_key[f"t:{c3}"]["title"] == "ls -la"
    assert by_key[f"t:{c4}"]["status"] == "awaiting_approval"
    assert by_key[f"t:{c4}"]["input"] == {"command": "make"} and by_key[f"t:{c4}"]["rev"] == 2


@pytest.mark.django_db
@pytest.mark.parametrize("limit", [1, 2, 3, 7, 100])
def test_walking_the_pages_yields_everything_once_in_order(api, user, limit):
    conversation = new_conversation(user)
    expected: list[str] = []
    for round_ in range(4):
        turn_id = open_turn(conversation)
        expected.append(f"u{round_}")
        for m in range(3):
            ids = assistant_calls(
                conversation, turn_id, *[("notes", {"m": m, "n": n}) for n in range(m)], text="x"
            ).call_ids
            expected += [f"a{round_}.{m}"] + [f"t:{i}" for i in ids]
            for call_id in ids:
                settle_host(call_id, text=f"out {call_id}")
        turn_end(conversation_id=conversation.pk, turn_id=turn_id)
    pages = _walk(api, conversation, limit)
    items = [item for page in pages for item in page["items"]]
    assert all(len(page["items"]) <= limit for page in pages)
    keys = [_key(i) for i in items]
    assert len(keys) == len(set(keys)) == len(expected)
    shown = [k if k.startswith("t:") else None for k in keys]
    assert shown == [k if k.startswith("t:") else None for k in reversed(expected)]
    sequences = [i["event"]["sequence"] for i in items if i["type"] == "message"]
    assert sequences == sorted(sequences, reverse=True)
    assert [i["event"]["type"] for i in items if i["type"] == "message"][-1] == "user_message"


@pytest.mark.django_db
def test_only_messages_and_cards_are_items(api, user):
    world = build_world(user)
    turn_end(conversation_id=world.conversation.pk, turn_id=world.turn_id)
    types = {i["event"]["type"] for i in _page(api, world.conversation)["items"] if "event" in i}
    assert types == {"user_message", "assistant_message"}
    assert ConversationEvent.objects.filter(
        conversation_id=world.conversation.pk, type__in=["tool_call_response", "turn_ended"]
    ).exists()


@pytest.mark.django_db
def test_an_empty_conversation_has_an_empty_page(api, user):
    assert _page(api, new_conversation(user)) == {"items": [], "nextCursor": None}


# --- limits, cursors, owners ---------------------------------------------------------------------


@pytest.mark.django_db
def test_limit_outside_1_to_100_is_refused_never_clamped(api, user):
    world = build_world(user)
    url = f"{API}/conversations/{world.conversation.pk}/history"
    for bad in ("0", "101", "-1", "abc", "3.5", "1e3"):
        assert_error(api.get(f"{url}?limit={bad}"), 422, "validation_error", field="limit")
    assert len(_page(api, world.conversation, limit=100)["items"]) == 4
    assert len(_page(api, world.conversation, limit=1)["items"]) == 1
    with pytest.raises(Exception, match="limit"):
        history_page(user, world.conversation.pk, before=None, limit=101)


@pytest.mark.django_db
def test_a_cursor_this_server_did_not_issue_is_refused(api, user):
    world = build_world(user)
    url = f"{API}/conversations/{world.conversation.pk}/history"
    forged = [
        "garbage!",
        "aDE6",  # "h1:"
        base64.urlsafe_b64encode(b"h1:1").decode(),
        base64.urlsafe_b64encode(b"h1:-1:2").decode(),
        base64.urlsafe_b64encode(b"h2:1:2").decode(),
        base64.urlsafe_b64encode(b"h1:99999999999999999999:1").decode(),
        base64.urlsafe_b64encode("h1:١:1".encode()).decode(),
        "%FF%FE",
    ]
    for cursor in forged:
        assert_error(api.get(f"{url}?before={cursor}"), 422, "validation_error", field="before")
    # An empty `before` is the first page.
    assert _page(api, world.conversation, before="") == _page(api, world.conversation)


@pytest.mark.django_db
def test_another_owners_history_is_not_found_like_a_missing_one(other_api, user):
    world = build_world(user)
    answers = [
        assert_error(other_api.get(f"{API}/conversations/{cid}/history"), 404, "not_found")
        for cid in (world.conversation.pk, uuid.uuid4(), "nope")
    ]
    assert answers[0] == answers[1] == answers[2]


# --- budgets -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_pages_of_cards_with_16_kib_outputs_stay_within_the_budgets(api, user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    for _ in range(3):
        ids = assistant_calls(
            conversation, turn_id, *[("notes", {"n": n, "q": "é" * 900}) for n in range(14)]
        ).call_ids
        for call_id in ids:
            settle_host(call_id, text="ü€\t" * 8000)
    pages = _walk(api, conversation, 100)
    items = [i for page in pages for i in page["items"]]
    assert len(items) == 1 + 3 + 42
    for page in pages:
        assert compact_size(page) <= FRAME_BUDGET_BYTES
        cards = [i for i in page["items"] if i["type"] == "tool"]
        sent = [c for c in cards if "payloadOmitted" not in c]
        assert sum(payload_bytes(c) for c in sent) <= PAYLOAD_BUDGET_BYTES
        first_omitted = next((n for n, c in enumerate(cards) if "payloadOmitted" in c), None)
        if first_omitted is not None:  # newest first: every older card carries the marker
            assert all("payloadOmitted" in c for c in cards[first_omitted:])
    omitted = [i for i in items if "payloadOmitted" in i]
    assert len(omitted) > 10
    for card in omitted:
        row = ToolActivity.objects.get(tool_call_id=card["toolCallId"])
        assert card["payloadOmitted"] == {"bytes": row.payload_bytes}
        assert not set(PAYLOAD_KEYS) & set(card)
        assert card["status"] == "completed"


@pytest.mark.django_db
def test_large_messages_move_to_the_next_page(api, user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    for n in range(4):
        assistant_calls(conversation, turn_id, text=f"{n}" + "ä" * 200_000)  # ~400 KiB each
    pages = _walk(api, conversation, 100)
    assert [len(p["items"]) for p in pages] == [2, 3]  # the user message is small
    for page in pages:
        assert compact_size(page) <= FRAME_BUDGET_BYTES
    sequences = [i["event"]["sequence"] for p in pages for i in p["items"]]
    assert sequences == [5, 4, 3, 2, 1]


@pytest.mark.django_db
def test_older_payloads_are_never_read(user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    ids = assistant_calls(conversation, turn_id, *[("notes", {"n": n}) for n in range(30)]).call_ids
    for call_id in ids:
        settle_host(call_id, text="Ω" * 20_000)
    with CaptureQueriesContext(connection) as queries:
        page = history_page(user, conversation.pk, before=None, limit=100)
    omitted = [i["toolCallId"] for i in page["items"] if "payloadOmitted" in i]
    sent = [i["toolCallId"] for i in page["items"] if i["type"] == "tool" and "output" in i]
    assert len(omitted) > 10 and sent
    reading = [q["sql"] for q in queries if "payload_json" in q["sql"]]
    assert len(reading) == 1, reading  # the loader, once
    (loader,) = reading
    for call_id in omitted:
        assert str(call_id) not in loader and uuid.UUID(call_id).hex not in loader
    records = [
        q["sql"] for q in queries if "ordinal" in q["sql"] and "ORDER BY" in q["sql"].upper()
    ]
    assert records and not any("payload_json" in sql for sql in records)


# --- pages cost the same in any conversation -----------------------------------------------------


def _bulk_conversation(owner, *, calls: int, per_message: int = 4) -> Conversation:
    """A conversation of ``calls`` settled calls (each with a ~2 KiB card), ``per_message`` to
    an assistant message. Rows are written directly, in bulk: through the services 10,000
    calls would take minutes, and a page reads only these rows."""
    conversation = new_conversation(owner)
    turn = Turn.objects.create(conversation=conversation, ordinal=1)
    events: list[ConversationEvent] = []
    cards: list[ToolActivity] = []
    sequence = 0

    def event(type_: str, payload: dict[str, Any], **fields: Any) -> int:
        nonlocal sequence
        sequence += 1
        events.append(
            ConversationEvent(
                conversation=conversation,
                sequence=sequence,
                type=type_,
                turn=turn,
                payload=payload,
                **fields,
            )
        )
        return sequence

    event("user_message", {"messageId": "u", "content": []}, message_id="u")
    output = bound_tool_output("line of output\n" * 128)
    for m in range(calls // per_message):
        blocks = [
            {"type": "tool_call", "id": f"p{m}.{i}", "name": "notes", "arguments": {"i": i}}
            for i in range(per_message)
        ]
        after = event(
            "assistant_message", {"messageId": f"a{m}", "content": blocks}, message_id=f"a{m}"
        )
        for i in range(per_message):
            call_id = uuid.uuid4()
            event("tool_call_response", {"outcome": "completed"}, tool_call_id=call_id)
            payload = {"input": {"i": i}, "output": output}
            cards.append(
                ToolActivity(
                    tool_call_id=call_id,
                    conversation=conversation,
                    turn=turn,
                    ordinal=len(cards) + 1,
                    after_sequence=after,
                    rev=3,
                    state_json={
                        "toolCallId": str(call_id),
                        "turnId": str(turn.pk),
                        "toolName": "notes",
                        "kind": "other",
                        "status": "completed",
                    },
                    payload_json=payload,
                    payload_bytes=len(dumps(payload).encode()),
                    is_final=True,
                )
            )
    ConversationEvent.objects.bulk_create(events, batch_size=500)
    ToolActivity.objects.bulk_create(cards, batch_size=500)
    Conversation.objects.filter(pk=conversation.pk).update(last_sequence=sequence)
    return conversation


def _page_queries(user, conversation, before: str | None) -> tuple[list[str], dict[str, Any]]:
    with CaptureQueriesContext(connection) as queries:
        page = history_page(user, conversation.pk, before=before, limit=50)
    return [q["sql"] for q in queries], page


@pytest.mark.django_db
def test_a_page_costs_the_same_with_100_or_10000_calls(user):
    small = _bulk_conversation(user, calls=100)
    large = _bulk_conversation(user, calls=10_000)
    # The first page, and one from the middle (its cursor as the previous page would give it).
    middle = _cursor_encode(6_247, 5_000)  # message a1249 (sequence 6,247) and its last card
    first_small, page_small = _page_queries(user, small, None)
    first_large, page_large = _page_queries(user, large, None)
    middle_large, page_middle = _page_queries(user, large, middle)
    assert len(first_small) == len(first_large) == len(middle_large)
    assert len(page_large["items"]) == len(page_middle["items"]) == 50
    first, second = page_middle["items"][:2]
    assert first["toolCallId"] == str(
        ToolActivity.objects.get(conversation=large, ordinal=5_000).tool_call_id
    )
    assert second["toolCallId"] == str(
        ToolActivity.objects.get(conversation=large, ordinal=4_999).tool_call_id
    )
    assert [i["event"]["sequence"] for i in page_middle["items"] if i["type"] == "message"][:2] == [
        6_247,
        6_242,
    ]
    assert [i["type"] for i in page_small["items"]] == [i["type"] for i in page_large["items"]]
    reads = [sql for sql in middle_large if "conversationevent" in sql or "toolactivity" in sql]
    assert reads
    for sql in reads:
        if "payload_json" not in sql:  # the loader reads by the unique call id
            assert " LIMIT " in sql.upper(), sql
    # Every read walks an index in page order (no scan, no sort of the rows): messages the
    # partial index of messages, cards the conversation's ordinals, payloads their call ids.
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE conversations_conversationevent, conversations_toolactivity")
    for sql in reads:
        plan = _plan(sql)
        if "payload_json" in sql:
            expected = ["tool_call_id"]
        elif "conversationevent" in sql:
            expected = ["event_messages"]
        else:
            expected = ["activity_recent"]
        for word in expected:
            assert word in plan, (sql, plan)
        for word in ("SCAN ", "TEMP B-TREE", "Seq Scan", "Sort"):
            assert word not in plan, (sql, plan)


def _plan(sql: str) -> str:
    explain = "EXPLAIN QUERY PLAN" if connection.vendor == "sqlite" else "EXPLAIN"
    with connection.cursor() as cursor:
        cursor.execute(f"{explain} {sql}")
        return " ".join(str(row[-1]) for row in cursor.fetchall())


@pytest.mark.django_db
def test_a_commands_card_carries_how_it_ended(api, user):
    """A history card of a command that ended holds its ``exit`` beside its state (the state's
    keys are fixed); other cards have none."""
    PermissionRule.objects.create(tool_name="bash", pattern="", decision="allow")
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    failing, passing, running = assistant_calls(
        conversation,
        turn_id,
        ("bash", {"command": "exit 3"}),
        ("bash", {"command": "true"}),
        ("bash", {"command": "sleep 60"}),
    ).call_ids
    settle_command(failing, exit_code=3)
    settle_command(passing, exit_code=0)
    cards = {i["toolCallId"]: i for i in _page(api, conversation)["items"] if i["type"] == "tool"}
    assert cards[str(failing)]["exit"]["summary"] == "Exit 3"
    assert cards[str(failing)]["exit"]["succeeded"] is False
    assert cards[str(failing)]["status"] == "completed"
    assert cards[str(passing)]["exit"]["succeeded"] is True
    assert "exit" not in cards[str(running)]
