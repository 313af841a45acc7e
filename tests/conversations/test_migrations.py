"""Migration 0004 places the cards of existing calls in history (``after_sequence``)."""

from __future__ import annotations

import json
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


@pytest.mark.django_db(transaction=True)
def test_commands_settled_before_0008_get_their_exit(settings):
    """A foreground command's end from its result.json, an ended async run's from its row; a
    lost run, a result that cannot be read and another tool's result give none."""
    apps = _migrate([("conversations", "0006_activity_worker"), ("tools", "0004_admin_indexes")])
    try:
        User = apps.get_model("auth", "User")
        Conversation = apps.get_model("conversations", "Conversation")
        Event = apps.get_model("conversations", "ConversationEvent")
        Asset = apps.get_model("conversations", "Asset")
        AsyncRun = apps.get_model("tools", "AsyncRun")
        owner = User.objects.create(username="older")
        conversation = Conversation.objects.create(owner=owner, workspace="w", last_sequence=0)
        sequence = iter(range(1, 100))

        def response(tool: str, result: dict | None, **payload) -> uuid.UUID:
            call_id = uuid.uuid4()
            event = Event.objects.create(
                conversation=conversation,
                sequence=next(sequence),
                type="tool_call_response",
                tool_call_id=call_id,
                payload={"toolName": tool, "outcome": "completed", **payload},
            )
            path = f"conversations/{conversation.pk}/tool-calls/{call_id}/g1/result.json"
            if result is not None:
                (settings.DATA_DIR / path).parent.mkdir(parents=True)
                (settings.DATA_DIR / path).write_text(json.dumps(result))
            Asset.objects.create(
                conversation=conversation,
                tool_call_id=call_id,
                event=event,
                kind="payload",
                path=path,
                size=0,
                sha256="0" * 64,
            )
            return call_id

        failing = response("bash", {"exitCode": 3, "signal": None, "timedOut": False})
        slow = response(
            "bash",
            {"exitCode": None, "signal": "SIGTERM", "timedOut": True},
            arguments={"command": "sleep 9", "timeout": 5},
        )
        unreadable = response("bash", None)
        other = response("read", {"exitCode": 1})
        now = timezone.now()
        ended, lost = uuid.uuid4(), uuid.uuid4()
        for call_id, status, code in [(ended, "exited", 4), (lost, "lost", None)]:
            AsyncRun.objects.create(
                conversation=conversation,
                tool_call_id=call_id,
                command="make",
                cwd="/w",
                status=status,
                exit_code=code,
                started_at=now,
                finished_at=now,
            )
        apps = _migrate([("conversations", "0008_command_exit")])
        CommandExit = apps.get_model("conversations", "CommandExit")
        found = {
            row.tool_call_id: (row.exit_code, row.signal, row.timed_out, row.timeout_seconds)
            for row in CommandExit.objects.all()
        }
        assert found == {
            failing: (3, "", False, None),
            slow: (None, "SIGTERM", True, 5.0),
            ended: (4, "", False, None),
        }
        assert unreadable not in found and other not in found and lost not in found
    finally:
        apps = _migrate_to_latest()
        apps.get_model("conversations", "Conversation").objects.all().delete()
