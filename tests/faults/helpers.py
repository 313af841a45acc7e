"""What every fault test ends with: recovery done, orphan files purged as an operator would,
then the invariant check (``manage.py check_integrity``), which must pass: on the test database
(``assert_intact``) or on a site's (``assert_site_intact``); every call settled once
(``settled_once``). Also what they start from (``bash_conversation``) and the PostgreSQL server's
side (``admin_url``, ``terminate_backends``)."""

from __future__ import annotations

from io import StringIO
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.core.management import call_command

from conversations.integrity import CHECKS
from conversations.models import ConversationEvent, ToolCall
from tests.conversations.helpers import new_conversation, open_turn
from tools.models import PermissionRule
from tools.workspaces import conversation_workspace


def integrity() -> tuple[int, str]:
    """``check_integrity`` on the test database: its exit status and output."""
    out = StringIO()
    try:
        call_command("check_integrity", stdout=out)
    except SystemExit as exc:
        return int(exc.code), out.getvalue()
    return 0, out.getvalue()


def assert_intact(*, purge: bool = True) -> str:
    """The invariants hold. ``purge``: first ``purge_orphans``, the step after a crash that
    removes the files of attempts that never settled (the check names each; see
    docs/reliability.md). Before it, the check may name orphan folders, and nothing else."""
    code, output = integrity()
    if purge:
        assert all(line.startswith("orphans: ") for line in breach_lines(output)), output
        call_command("purge_orphans", stdout=StringIO())
        code, output = integrity()
    assert code == 0, output
    return output


def assert_site_intact(made) -> None:
    """On a site of real processes (``tests.realtime.daphne_helpers.Site``): orphan files
    purged, then the invariant check passes on the site's database."""
    made.manage("purge_orphans")
    done = made.run("check_integrity")
    assert done.returncode == 0, done.stdout + done.stderr


def bash_conversation(user, files: dict[str, str]):
    """A conversation whose ``bash`` calls a rule allows (no approval asked), its workspace
    holding ``files`` (name: text), and its open turn: ``(conversation, turn id)``."""
    PermissionRule.objects.create(tool_name="bash", pattern="", decision="allow")
    conversation = new_conversation(user)
    workspace = conversation_workspace(conversation)
    workspace.mkdir(parents=True)
    for name, text in files.items():
        (workspace / name).write_text(text)
    return conversation, open_turn(conversation)


def breach_lines(output: str) -> list[str]:
    """The breach lines of the check's output (not the summaries)."""
    checks = tuple(f"{name}: " for name in CHECKS)
    return [
        line for line in output.splitlines() if line.startswith(checks) and "breach(es)" not in line
    ]


def settled_once(call_ids) -> dict[str, dict]:
    """Every call settled, each by exactly one response: its payload by call id."""
    assert not ToolCall.objects.filter(pk__in=list(call_ids)).exists()
    responses = ConversationEvent.objects.filter(
        type="tool_call_response", tool_call_id__in=list(call_ids)
    )
    payloads = {str(e.tool_call_id): e.payload for e in responses}
    assert len(payloads) == responses.count() == len(call_ids)
    return payloads


def admin_url() -> str:
    """The suite's PostgreSQL server, through its ``postgres`` database (the configured
    database itself need not exist: the tests run on ``test_<name>_<pid>``)."""
    return urlunsplit(urlsplit(settings.DATABASE_URL)._replace(path="/postgres"))


def terminate_backends(database: str) -> int:
    """``pg_terminate_backend`` of every backend connected to ``database`` (that database
    only: other databases of the server, other runs', are never touched), each waited for until
    it has exited (up to 5 s); how many were terminated. Through the server's ``postgres``
    database, so the caller's own connections are among those cut when they are on
    ``database``."""
    import psycopg  # PostgreSQL only

    with psycopg.connect(admin_url(), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            [database],
        ).fetchall()
    return sum(1 for (done,) in rows if done)
