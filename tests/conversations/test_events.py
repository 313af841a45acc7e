"""The event log: sequences 1..N with no gaps or duplicates, also under concurrent appenders."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections, transaction

from conversations.models import Conversation, ConversationEvent
from conversations.services.events import event_append

from .helpers import new_conversation

WRITERS = 8
EACH = 25


@pytest.mark.django_db(transaction=True)
def test_concurrent_appenders_get_gapless_unique_sequences(user):
    """8 threads with their own connections append to one conversation at once.

    On PostgreSQL they contend for the row lock; on SQLite IMMEDIATE transactions serialise them.
    """
    conversation = new_conversation(user)
    start = threading.Barrier(WRITERS)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            start.wait()
            for i in range(EACH):
                with transaction.atomic():
                    event_append(
                        conversation_id=conversation.pk,
                        type="user_message",
                        payload={"messageId": f"w{n}-{i}", "content": []},
                    )
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    sequences = list(
        ConversationEvent.objects.filter(conversation=conversation)
        .order_by("sequence")
        .values_list("sequence", flat=True)
    )
    assert sequences == list(range(1, WRITERS * EACH + 1))
    conversation.refresh_from_db()
    assert conversation.last_sequence == WRITERS * EACH
    writers_seen = {
        p["messageId"].split("-")[0]
        for p in ConversationEvent.objects.filter(conversation=conversation).values_list(
            "payload", flat=True
        )
    }
    assert len(writers_seen) == WRITERS


@pytest.mark.django_db
def test_a_rolled_back_append_leaves_no_gap(user):
    conversation = new_conversation(user)
    with transaction.atomic():
        event_append(conversation_id=conversation.pk, type="user_message", payload={"n": 1})
    with pytest.raises(RuntimeError), transaction.atomic():
        event_append(conversation_id=conversation.pk, type="user_message", payload={"n": 2})
        raise RuntimeError("boom")
    with transaction.atomic():
        event = event_append(conversation_id=conversation.pk, type="user_message", payload={"n": 3})
    assert event.sequence == 2
    assert Conversation.objects.get(pk=conversation.pk).last_sequence == 2


@pytest.mark.django_db
def test_payload_is_stored_as_compact_json_text(user):
    conversation = new_conversation(user)
    with transaction.atomic():
        event = event_append(
            conversation_id=conversation.pk,
            type="user_message",
            payload={"messageId": "m", "content": [{"type": "text", "text": "héllo 世界 🎉"}]},
        )
    table = ConversationEvent._meta.db_table
    cast = "payload::text" if connection.vendor == "postgresql" else "CAST(payload AS TEXT)"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {cast} FROM {table} WHERE id = %s", [event.pk])
        (stored,) = cursor.fetchone()
    assert stored == '{"messageId":"m","content":[{"type":"text","text":"héllo 世界 🎉"}]}'


@pytest.mark.django_db
def test_a_replay_page_equals_the_live_wire_shape_to_the_byte(user):
    """The page passes stored text through and formats times in SQL; it must equal event_wire."""
    import datetime as dt
    import json as jsonlib

    from conversations.selectors import events_page_json
    from conversations.shapes import event_wire

    conversation = new_conversation(user)
    micro = [0, 1, 999, 139_999, 140_000, 500_500, 999_999]
    with transaction.atomic():
        for i, us in enumerate(micro):
            event = event_append(
                conversation_id=conversation.pk,
                type="tool_call_response" if i % 2 else "user_message",
                payload={
                    "messageId": f"m{i}",
                    "content": [{"type": "text", "text": 'é 世界 🎉 "q" \\ end'}],
                },
                turn_id=None,
                tool_call_id="6f6c6f63-6f72-4500-8000-746f6f6c6361" if i == 1 else None,
            )
            stamp = dt.datetime(2026, 11, 29, 18, 0, i, us, tzinfo=dt.UTC)
            ConversationEvent.objects.filter(pk=event.pk).update(created_at=stamp)
    page = events_page_json(user, conversation.pk, after=0, limit=100)
    expected = [
        event_wire(e)
        for e in ConversationEvent.objects.filter(conversation=conversation).order_by("sequence")
    ]
    assert jsonlib.loads(page)["events"] == expected
    compact = ",".join(
        jsonlib.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in expected
    )
    assert page.startswith('{"events":[' + compact + "]")
