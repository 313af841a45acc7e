"""Migration 0004 places the cards of existing calls in history (``after_sequence``)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

BEFORE = [("conversations", "0003_claim_process")]
AFTER = [("conversations", "0004_history_order")]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def _migrate_to_latest():
    """Every app at its newest migration, as the tests after this one expect the schema."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    latest = executor.loader.graph.leaf_nodes()
    executor.migrate(latest)
    return executor.loader.project_state(latest).apps


@pytest.mark.django_db(transaction=True)
def test_existing_cards_follow_the_last_event_created_before_them():
    apps = _migrate(BEFORE)
    try:
        User = apps.get_model("auth", "User")
        Conversation = apps.get_model("conversations", "Conversation")
        Turn = apps.get_model("conversations", "Turn")
        Event = apps.get_model("conversations", "ConversationEvent")
        Activity = apps.get_model("conversations", "ToolActivity")
        owner = User.objects.create(username="old")
        conversation = Conversation.objects.create(owner=owner, workspace="w", last_sequence=5)
        turn = Turn.objects.create(conversation=conversation, ordinal=1)
        start = timezone.now() - timedelta(hours=1)

        def at(minutes: int):
            return start + timedelta(minutes=minutes)

        # user message, assistant message (two calls), their responses, a command's call, its
        # response; created in that order.
        for sequence, minute, kind in [
            (1, 1, "user_message"),
            (2, 2, "assistant_message"),
            (3, 4, "tool_call_response"),
            (4, 5, "tool_call_response"),
            (5, 7, "tool_call_response"),
        ]:
            event = Event.objects.create(
                conversation=conversation, sequence=sequence, type=kind, turn=turn, payload={}
            )
            Event.objects.filter(pk=event.pk).update(created_at=at(minute))
        cards = []
        for ordinal, minute in [(1, 3), (2, 3), (3, 6)]:
            card = Activity.objects.create(
                tool_call_id=uuid.uuid4(), conversation=conversation, turn=turn, ordinal=ordinal
            )
            Activity.objects.filter(pk=card.pk).update(created_at=at(minute))
            cards.append(card.tool_call_id)
        apps = _migrate(AFTER)
        Activity = apps.get_model("conversations", "ToolActivity")
        placed = dict(Activity.objects.values_list("tool_call_id", "after_sequence"))
        assert [placed[c] for c in cards] == [2, 2, 4]
    finally:
        apps = _migrate_to_latest()
        apps.get_model("conversations", "Conversation").objects.all().delete()
