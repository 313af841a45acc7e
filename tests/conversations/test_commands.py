"""Management commands: create_token, seed_demo, recover, run_commands."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management import CommandError, call_command
from django.utils import timezone

from conversations.api.auth import token_authenticate, token_digest
from conversations.grants import may_run_commands
from conversations.models import ApiToken, Conversation, ConversationEvent, ToolCall
from conversations.services.claims import claim_acquire

from .helpers import assistant_calls, new_conversation, open_turn

pytestmark = pytest.mark.django_db


def _run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_create_token_prints_the_token_last_and_stores_only_its_digest(user):
    output = _run("create_token", user.username, "--name", "ci", "--scope", "host")
    token = output.strip().splitlines()[-1].split()[-1]
    row = ApiToken.objects.get(user=user)
    assert row.digest == token_digest(token) and token not in row.digest
    assert row.name == "ci" and row.scopes == ["host"]
    assert token_authenticate(token).pk == row.pk
    plain = _run("create_token", user.username)
    assert ApiToken.objects.get(digest=token_digest(plain.split()[-1])).scopes == []


def test_create_token_for_an_unknown_user_fails_clearly():
    with pytest.raises(CommandError, match="No user named"):
        _run("create_token", "nobody")


def _last_word(output: str) -> str:
    return output.strip().splitlines()[-1].split()[-1]


def test_create_token_expires_after_the_days_given(user):
    output = _run("create_token", user.username, "--expires", "7")
    row = ApiToken.objects.get(digest=token_digest(_last_word(output)))
    expected = timezone.now() + timedelta(days=7)
    assert abs((row.expires_at - expected).total_seconds()) < 60
    assert f"expires {row.expires_at:%Y-%m-%d}" in output
    assert token_authenticate(_last_word(output)).pk == row.pk
    assert "never expires" in _run("create_token", user.username)


@pytest.mark.parametrize("days", ["0", "-1", "abc", "1.5", "99999999999"])
def test_create_token_refuses_an_expiry_that_is_not_a_positive_number_of_days(user, days):
    with pytest.raises(CommandError, match="--expires: must be a whole number of days"):
        _run("create_token", user.username, "--expires", days)
    assert not ApiToken.objects.filter(user=user).exists()


def test_seed_demo_refuses_with_debug_off_unless_forced(settings):
    settings.DEBUG = False
    with pytest.raises(CommandError, match="DEBUG is off"):
        _run("seed_demo")
    assert not get_user_model().objects.filter(username="demo").exists()
    output = _run("seed_demo", "--force")
    assert token_authenticate(_last_word(output)).user.username == "demo"


def test_seed_demo_keeps_one_live_demo_token(settings):
    settings.DEBUG = True
    tokens = [_last_word(_run("seed_demo")) for _ in range(3)]
    assert len(set(tokens)) == 3
    assert [token_authenticate(t) is not None for t in tokens] == [False, False, True]
    demo = ApiToken.objects.filter(user__username="demo")
    assert demo.count() == 3 and demo.filter(revoked_at__isnull=True).count() == 1
    # --no-token leaves the live one alone.
    output = _run("seed_demo", "--no-token")
    assert "Demo token" not in output and token_authenticate(tokens[-1]) is not None


def test_seed_demo_keeps_a_changed_password_and_says_so(settings):
    settings.DEBUG = True
    first = _run("seed_demo")
    assert "Admin login: demo / demo-password (the demo password; created True)" in first
    demo = get_user_model().objects.get(username="demo")
    demo.set_password("a-password-of-my-own")
    demo.save()
    second = _run("seed_demo")
    assert "Admin login: demo (password changed from the demo one; not shown)" in second
    assert "demo-password" not in second and "a-password-of-my-own" not in second
    demo.refresh_from_db()
    assert demo.check_password("a-password-of-my-own")


def test_seed_demo_is_idempotent_and_shows_something_real(settings):
    settings.DEBUG = True
    first = _run("seed_demo")
    second = _run("seed_demo")
    assert Conversation.objects.filter(owner__username="demo").count() == 1
    conversation = Conversation.objects.get(owner__username="demo")
    assert (
        ConversationEvent.objects.filter(
            conversation=conversation, type="tool_call_response"
        ).count()
        == 1
    )
    states = sorted(
        ToolCall.objects.filter(conversation=conversation).values_list("state", flat=True)
    )
    assert states == ["awaiting_approval", "ready", "ready", "ready"]  # the worker runs the rest
    tokens = [out.strip().splitlines()[-1].split()[-1] for out in (first, second)]
    assert tokens[0] != tokens[1]
    assert token_authenticate(tokens[0]) is None and token_authenticate(tokens[1]) is not None
    assert "Admin login: demo /" in first


def test_recover_prints_what_it_did(user, settings):
    settings.TOOLCORE_CLAIM_LEASE = -1  # every claim is already expired
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("notes", {})).call_ids
    claim_acquire(call_id=call_id, worker="dead-worker")
    output = _run("recover")
    assert f"{call_id}: settled indeterminate (claim expired)" in output
    assert "Recovery done: 1 action(s)." in output
    assert ConversationEvent.objects.get(tool_call_id=call_id).payload["outcome"] == "indeterminate"


def test_health_and_readiness(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    body = ready.json()
    disk = body.pop("disk")  # reported, not a check (tests/conversations/test_health.py)
    assert body["sandbox"].pop("limits")  # the host's; tests/tools/test_sandbox.py
    assert body == {
        "status": "ready",
        "checks": {"database": "ok", "migrations": "ok", "channelLayer": "ok", "workers": "ok"},
        "workers": {"alive": 0, "byHost": {}},  # none expected: none ran, none started here
        "sandbox": {"on": True},  # reported, not a check (tests/tools/test_sandbox.py)
    }
    assert disk["full"] is False and 0 < disk["freeBytes"] <= disk["totalBytes"]


def test_run_commands_grants_and_revokes_by_username_idempotently(user, other_user):
    assert not may_run_commands(user)
    granted = _run("run_commands", "grant", user.username, other_user.username)
    assert granted.splitlines() == [
        f"Granted tools.run_commands to {user.username}.",
        f"Granted tools.run_commands to {other_user.username}.",
    ]
    assert may_run_commands(_fresh(user)) and may_run_commands(_fresh(other_user))
    again = _run("run_commands", "grant", user.username)
    assert again == f"{user.username} already holds tools.run_commands: nothing changed.\n"
    assert _run("run_commands", "list").splitlines() == sorted(
        [f"{user.username}: direct", f"{other_user.username}: direct"]
    )
    revoked = _run("run_commands", "revoke", user.username)
    assert revoked == f"Revoked tools.run_commands from {user.username}.\n"
    assert not may_run_commands(_fresh(user)) and may_run_commands(_fresh(other_user))
    again = _run("run_commands", "revoke", user.username)
    assert (
        again == f"{user.username} held no direct grant of tools.run_commands: nothing changed.\n"
    )


def test_run_commands_says_what_still_lets_a_user_run_commands(user):
    group = Group.objects.create(name="operators")
    group.permissions.add(Permission.objects.get(codename="run_commands"))
    user.groups.add(group)
    user.is_superuser = True
    user.is_active = False
    user.save()
    output = _run("run_commands", "revoke", user.username)
    assert output.splitlines()[-1] == (
        f"{user.username} may still run commands (superuser, group operators): "
        "change that in the admin."
    )
    assert (
        _run("run_commands", "list") == f"{user.username}: superuser, group operators (inactive)\n"
    )
    granted = _run("run_commands", "grant", user.username)
    assert "is inactive: it applies once the account is active again." in granted


def test_run_commands_changes_nothing_when_a_user_is_unknown(user):
    with pytest.raises(CommandError, match=r"No user named 'nobody', 'ghost': nothing changed"):
        _run("run_commands", "grant", user.username, "nobody", "ghost")
    assert not may_run_commands(_fresh(user))
    with pytest.raises(CommandError, match="grant: give at least one USERNAME"):
        _run("run_commands", "grant")
    with pytest.raises(CommandError, match="list takes no USERNAME"):
        _run("run_commands", "list", user.username)
    assert _run("run_commands", "list").startswith("Nobody holds tools.run_commands.")


def _fresh(user):
    """The user read again: Django caches permissions on the object."""
    return get_user_model().objects.get(pk=user.pk)


def test_seed_demo_reset_replaces_the_demo_conversation_and_keeps_the_rest(settings):
    """The README's walkthrough after a first run: the bash call was approved and ran. Without
    ``--reset`` seed_demo keeps that conversation; with it, a fresh one waits for approval."""
    from conversations.services.cancel import call_cancel
    from conversations.storage import resolve_workspace

    settings.DEBUG = True
    _run("seed_demo", "--no-token")
    demo = get_user_model().objects.get(username="demo")
    first = Conversation.objects.get(owner=demo)
    bash = ToolCall.objects.get(conversation=first, tool_name="bash")
    call_cancel(call_id=bash.pk)  # settled, as after the walkthrough
    notes = resolve_workspace(demo.pk, first.workspace) / "notes.md"
    notes.write_text("changed during the walkthrough\n")
    mine = new_conversation(demo)
    assert f"Demo conversation: {first.pk}" in _run("seed_demo", "--no-token")
    assert not ToolCall.objects.filter(pk=bash.pk).exists()  # idempotent: still settled

    output = _run("seed_demo", "--no-token", "--reset")
    assert "Reset: deleted 1 demo conversation(s)." in output
    assert not Conversation.objects.filter(pk=first.pk).exists()
    fresh = Conversation.objects.get(owner=demo, title=first.title)
    assert f"Demo conversation: {fresh.pk}" in output and fresh.pk != first.pk
    assert Conversation.objects.filter(pk=mine.pk).exists()  # not a demo: kept
    states = sorted(ToolCall.objects.filter(conversation=fresh).values_list("state", flat=True))
    assert states == ["awaiting_approval", "ready", "ready", "ready"]
    assert (
        (resolve_workspace(demo.pk, fresh.workspace) / "notes.md")
        .read_text()
        .startswith("# Demo project")
    )
    again = _run("seed_demo", "--no-token", "--reset")
    assert "Reset: deleted 1 demo conversation(s)." in again
    assert Conversation.objects.filter(owner=demo).count() == 2
