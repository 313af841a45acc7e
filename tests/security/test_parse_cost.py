"""What reading commands may cost (docs/security.md, "What reading commands may cost"): one
line's parsing is bounded (its re-parses and the strings its shells run included), one
message's commands are read before its transaction and bounded together (413), and one user's
reading is bounded per minute (429 ``throttled`` with ``Retry-After``), nothing written when
refused."""

from __future__ import annotations

import pytest
from django.db import connection

from conversations.models import ConversationEvent, ToolCall
from conversations.services.message_limits import MAX_MESSAGE_PARSE_BYTES
from tests.conftest import client_for
from tests.conversations.api_helpers import API, assert_error, grant_run_commands
from tests.conversations.helpers import new_conversation, open_turn
from tools.models import Launch
from tools.shell import MAX_PARSE_WORK_BYTES, parse_command, parse_work
from tools.shell import parse as shell_parse

pytestmark = pytest.mark.django_db
KiB = 1024


def _continued(size: int, joins: int, word: str = "a") -> str:
    """A command line of about ``size`` bytes with ``joins`` line continuations: the grammar
    reads it ``joins + 1`` times. ``word`` keeps lines apart (the parse cache)."""
    body = f"echo {word} " + "x" * max(0, size // (joins + 1) - 12)
    return " \\\n".join([body] * (joins + 1))


def _fresh():
    parse_command.cache_clear()


def test_a_line_that_takes_too_much_reading_is_not_plain_and_not_read_on():
    _fresh()
    line = _continued(60 * KiB, 20)  # 21 parses of 60 KiB: about 1.2 MiB
    with parse_work() as work:
        parsed = parse_command(line)
    assert (
        parsed.unplain == f"a command line that takes over {MAX_PARSE_WORK_BYTES:,} bytes to read"
    )
    assert work.bytes <= MAX_PARSE_WORK_BYTES  # it stopped before the parse that passed it
    with parse_work() as again:
        parse_command(line)
    assert again.bytes == 0  # answered from the cache: nothing read twice


def test_a_line_within_the_bound_is_read_whole():
    _fresh()
    line = _continued(8 * KiB, 20)
    with parse_work() as work:
        parsed = parse_command(line)
    assert parsed.plain and parsed.commands[0].program == "echo"
    assert 20 * 8 * KiB < work.bytes < MAX_PARSE_WORK_BYTES


def _post(api, conversation, turn_id, commands, message_id="a-1"):
    content = [
        {"type": "tool_call", "id": f"p{i}", "name": "bash", "arguments": {"command": c}}
        for i, c in enumerate(commands)
    ]
    body = {"messageId": message_id, "role": "assistant", "turnId": turn_id, "content": content}
    return api.post_json(f"{API}/conversations/{conversation.pk}/messages", body)


def _nothing_written(conversation, message_id="a-1"):
    assert not ConversationEvent.objects.filter(
        conversation=conversation, message_id=message_id
    ).exists()
    assert not ToolCall.objects.filter(conversation=conversation).exists()


def test_a_message_whose_commands_take_too_much_reading_is_413_and_nothing_written(user):
    _fresh()
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    # Each line: 6 parses of 60 KiB (360 KiB, within its own bound); two take 720 KiB.
    commands = [_continued(60 * KiB, 5, word=w) for w in ("a", "b")]
    response = _post(client_for(user), conversation, turn_id, commands)
    error = assert_error(response, 413, "payload_too_large", field="content")
    assert f"at most {MAX_MESSAGE_PARSE_BYTES:,} (512 KiB)" in error["message"]
    assert "the first 2 of its 2 commands" in error["message"]
    _nothing_written(conversation)


def test_a_message_s_commands_are_read_before_its_transaction(user, monkeypatch):
    """The parse, the slow part, runs with no transaction open (no conversation lock, no
    SQLite write lock held), and supervision, inside it, finds each line read."""
    _fresh()
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    depths: list[int] = []
    read = shell_parse._read

    def watched(parser, source):
        depths.append(len(connection.savepoint_ids))  # transactions open inside the test's own
        return read(parser, source)

    monkeypatch.setattr(shell_parse, "_read", watched)
    outer = len(connection.savepoint_ids)
    response = _post(client_for(user), conversation, turn_id, ["ls -la", "git status | head"])
    assert response.status_code == 201, response.content
    assert depths and all(depth == outer for depth in depths)  # none of the post's open
    calls = ToolCall.objects.filter(conversation=conversation)
    assert sorted(c.arguments["command"] for c in calls) == ["git status | head", "ls -la"]


@pytest.fixture
def small_budget(settings):
    """64 KiB of reading per user and minute (the least the setting takes)."""
    settings.TOOLCORE_PARSE_BYTES_PER_MINUTE = 64 * KiB
    return 64 * KiB


def test_a_user_over_the_minute_s_budget_is_429_with_retry_after(user, other_user, small_budget):
    _fresh()
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    api = client_for(user)
    first = _post(api, conversation, turn_id, [_continued(40 * KiB, 1)], message_id="a-1")
    assert first.status_code == 201, first.content  # 80 KiB read: over the budget now
    refused = _post(api, conversation, turn_id, ["ls"], message_id="a-2")
    error = assert_error(refused, 429, "throttled")
    assert "in this minute" in error["message"] and f"({small_budget:,})" in error["message"]
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert not ConversationEvent.objects.filter(message_id="a-2").exists()
    # A message with no command is not refused: it reads nothing.
    reads = {
        "messageId": "a-3",
        "role": "assistant",
        "turnId": turn_id,
        "content": [{"type": "tool_call", "id": "r", "name": "read", "arguments": {"path": "x"}}],
    }
    assert (
        api.post_json(f"{API}/conversations/{conversation.pk}/messages", reads).status_code == 201
    )
    # Another user has a budget of their own.
    theirs = new_conversation(other_user)
    other = _post(client_for(other_user), theirs, open_turn(theirs), ["ls"], message_id="b-1")
    assert other.status_code == 201, other.content


def test_typed_commands_and_launches_count_too(user, small_budget):
    _fresh()
    grant_run_commands(user)
    api = client_for(user)
    conversation = new_conversation(user)
    typed = api.post_json(
        f"{API}/conversations/{conversation.pk}/commands",
        {"inputId": "c1", "command": _continued(40 * KiB, 1), "includeInContext": True},
    )
    assert typed.status_code == 201, typed.content
    again = api.post_json(
        f"{API}/conversations/{new_conversation(user).pk}/commands",
        {"inputId": "c2", "command": "ls", "includeInContext": True},
    )
    assert_error(again, 429, "throttled")
    launch = api.post_json(f"{API}/launches", {"name": "dev", "command": "sleep 1"})
    assert_error(launch, 429, "throttled")
    assert not Launch.objects.exists()


def test_a_line_read_before_costs_nothing(user, small_budget):
    """The budget counts the grammar's work, not the bytes posted: a line already read (the
    parse cache) is free, so an agent repeating its commands is not throttled for it."""
    _fresh()
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    api = client_for(user)
    line = _continued(20 * KiB, 1)  # 40 KiB of reading, once
    for n in range(5):
        response = _post(api, conversation, turn_id, [line], message_id=f"a-{n}")
        assert response.status_code == 201, (n, response.content)
