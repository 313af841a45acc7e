"""PostgreSQL connections terminated (``pg_terminate_backend``) in the middle of a transaction:
nothing of it is written, the service call fails with a database error (or, in a worker, is
tried again), a retry succeeds once, and the invariants hold. Connections terminated while
they sit in a pool cost nothing: the pool hands out only live ones.

The first tests hold the conversation row locked from a connection of their own, so the
service's transaction stops, open, on its first statement that needs the row (the sequence);
the test finds that backend in ``pg_stat_activity``, terminates it, and lets go of the row.
The last one terminates every backend of a site's database again and again under a stream of
requests to a real daphne in development mode (``DEBUG=1``): no answer is a 500.
Backends are only ever terminated on the test's own database (``datname``), never on another.
PostgreSQL only: SQLite has no server and no backend to terminate.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import DatabaseError, connection, connections

from conversations.models import Conversation, ConversationEvent, ExecutionClaim
from conversations.services.claims import claim_acquire
from conversations.services.messages import message_post
from conversations.services.settlement import ClaimGuard, call_settle
from tests.conversations.helpers import assistant_calls, new_conversation, open_turn
from tests.realtime.daphne_helpers import Rest, site
from tests.tools.worker_helpers import (
    database_url,
    response_of,
    running_worker,
    stop_worker,
    wait_for,
    worker_process,
)
from tools.models import PermissionRule
from tools.runtime.base import CallContext, HandlerResult
from tools.workspaces import conversation_workspace

from .helpers import assert_intact, assert_site_intact, settled_once, terminate_backends

# Runs until a file ``stop`` appears in the workspace (the allow-all rule of the test covers
# each of its simple commands).
HOLD = "while [ ! -f stop ]; do sleep 0.1; done; echo finished"
pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

LEASE_SECONDS = 6


@pytest.fixture(autouse=True)
def _postgresql():
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: SQLite has no server backend to terminate")


@contextlib.contextmanager
def conversation_locked(conversation_id) -> Iterator[psycopg.Connection]:
    """The conversation row locked (``FOR UPDATE``) by a connection of the test's own, until
    the block ends."""
    with psycopg.connect(database_url()) as conn:
        conn.execute(
            f"SELECT 1 FROM {Conversation._meta.db_table} WHERE id = %s FOR UPDATE",
            [conversation_id],
        )
        yield conn
        conn.rollback()


def terminate_waiting(locker: psycopg.Connection) -> str:
    """Terminate the backend of the test database blocked on the lock ``locker`` holds (its
    transaction open, mid-statement): the statement it was running."""
    holder = locker.info.backend_pid

    def waiting() -> tuple[int, str] | None:
        with psycopg.connect(database_url(), autocommit=True) as probe:
            return probe.execute(
                "SELECT pid, query FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND state = 'active' AND %s = ANY("
                "pg_blocking_pids(pid))",
                [holder],
            ).fetchone()

    pid, statement = wait_for(waiting, timeout=30, every=0.05)
    with psycopg.connect(database_url(), autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone()[0]
    return statement


def in_thread(fn, **kwargs):
    """Run ``fn`` on a thread of its own (a connection of its own): a future-like dict."""
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = fn(**kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    outcome["thread"] = thread
    return outcome


def test_a_settlement_whose_connection_is_terminated_writes_nothing(user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("notes", {"q": "x"})).call_ids
    claim = claim_acquire(call_id=call_id, worker="w")
    conversation.refresh_from_db()
    before = conversation.last_sequence
    settle = {
        "call_id": call_id,
        "outcome": "completed",
        "guard": ClaimGuard(claim.token, claim.generation),
        "result": {"content": [{"type": "text", "text": "found"}]},
        "text": "found",
    }
    with conversation_locked(conversation.pk) as locker:
        running = in_thread(call_settle, **settle)
        assert "gone AS (DELETE" in terminate_waiting(locker)  # settlement's one statement
    running["thread"].join(30)
    assert isinstance(running.get("error"), DatabaseError), running
    # Nothing of it: the call is still running under its claim, no response, no sequence.
    assert ExecutionClaim.objects.filter(call_id=call_id, token=claim.token).exists()
    assert not ConversationEvent.objects.filter(tool_call_id=call_id).exists()
    conversation.refresh_from_db()
    assert conversation.last_sequence == before
    event = call_settle(**settle)  # its holder tries again: its files are accepted as written
    assert event.sequence == before + 1
    assert settled_once([call_id])[str(call_id)]["outcome"] == "completed"
    assert_intact(purge=False)


def test_a_message_whose_connection_is_terminated_is_posted_once_on_retry(user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    conversation.refresh_from_db()
    before = conversation.last_sequence
    post = {
        "conversation_id": conversation.pk,
        "message_id": "said-once",
        "role": "assistant",
        "turn_id": turn_id,
        "content": [{"type": "text", "text": "hello"}],
    }
    with conversation_locked(conversation.pk) as locker:
        running = in_thread(message_post, **post)
        terminate_waiting(locker)
    running["thread"].join(30)
    assert isinstance(running.get("error"), DatabaseError), running
    assert not ConversationEvent.objects.filter(message_id="said-once").exists()
    conversation.refresh_from_db()
    assert conversation.last_sequence == before
    message_post(**post)
    message_post(**post)  # idempotent by messageId
    assert ConversationEvent.objects.filter(message_id="said-once").count() == 1
    assert_intact(purge=False)


def test_a_worker_whose_connection_is_terminated_while_settling_tries_again(user):
    PermissionRule.objects.create(tool_name="bash", pattern="", decision="allow")
    conversation = new_conversation(user)
    workspace = conversation_workspace(conversation)
    workspace.mkdir(parents=True)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("bash", {"command": HOLD})).call_ids
    worker = worker_process("w-cut", lease_seconds=LEASE_SECONDS)
    try:
        wait_for(lambda: ExecutionClaim.objects.filter(call_id=call_id).exists(), 30)
        with conversation_locked(conversation.pk) as locker:
            Path(workspace / "stop").touch()  # the command ends: its worker settles
            assert "gone AS (DELETE" in terminate_waiting(locker)
        # The deadline bounds a hang only: who settled it is what the asserts below check.
        response = wait_for(lambda: response_of(call_id), timeout=60)
    finally:
        log = stop_worker(worker)
    # Settled by its own worker, trying again, not by recovery after the lease.
    assert response["outcome"] == "completed" and response["attempts"] == 1, log
    assert "settlement lost its database connection; trying again" in log
    assert "finished" in response["modelContent"][0]["text"]
    settled_once([call_id])
    assert_intact()


async def _listing(ctx: CallContext) -> HandlerResult:
    """Stands for ``ls``: answers at once."""
    return HandlerResult(items=["a.txt"], result={"entries": ["a.txt"]})


def test_a_worker_picks_up_at_once_after_its_pooled_connections_were_terminated(user, caplog):
    """Every backend of the test database terminated while the worker idles (its connections
    back in the pool): the next call made ready is taken by the very next pickup (no pickup
    fails), not after failed pickups and the poll (60 s here)."""
    with running_worker(handlers={"ls": _listing}, poll_seconds=60):
        conversation = new_conversation(user)
        turn_id = open_turn(conversation)
        (first,) = assistant_calls(conversation, turn_id, ("ls", {})).call_ids
        wait_for(lambda: response_of(first))
        connection.close()  # this thread's connection goes back to the pool too
        assert terminate_backends(connection.settings_dict["NAME"]) >= 1
        caplog.clear()
        (call_id,) = assistant_calls(conversation, turn_id, ("ls", {})).call_ids
        # Well under the 60 s poll, which is what a failed pickup would wait for.
        payload = wait_for(lambda: response_of(call_id), timeout=30)
    assert payload["outcome"] == "completed" and payload["attempts"] == 1
    assert "pickup failed" not in caplog.text
    settled_once([first, call_id])
    assert_intact(purge=False)


# --- a stream of requests to a daphne in development mode --------------------------------------

STREAM_CLIENTS = 3
TERMINATIONS = 4
ANSWERS_BETWEEN = 15  # requests answered before each termination: > 50 in all


class Client:
    """One keep-alive HTTP client of a daphne's ``/api/v1/`` that records every answer."""

    def __init__(self, port: int, token: str) -> None:
        self.port, self.token = port, token
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self.answers: list[tuple[str, int, str | None, bytes]] = []

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        self.conn.request(method, f"/api/v1{path}", body=data, headers=headers)
        answer = self.conn.getresponse()
        text = answer.read()
        self.answers.append(
            (f"{method} {path}", answer.status, answer.getheader("Retry-After"), text)
        )
        return answer.status, (json.loads(text) if text else None)

    def until_done(self, method: str, path: str, body: Any = None) -> Any:
        """The call again (the same idempotent body) while it answers 503."""
        for _ in range(100):
            status, value = self.call(method, path, body)
            if status != 503:
                assert status in (200, 201), (status, value)
                return value
            time.sleep(0.05)
        raise AssertionError(f"{method} {path} stayed unavailable")


def _stream(client: Client, stop: threading.Event, calls: list[str]) -> None:
    """Messages (every third with an ``ls`` call for the worker) and reads, until ``stop``."""
    cid = client.until_done("POST", "/conversations", {"title": "stream"})["id"]
    user = {"messageId": "u", "role": "user", "content": [{"type": "text", "text": "go"}]}
    turn_id = client.until_done("POST", f"/conversations/{cid}/messages", user)["turnId"]
    for n in itertools.count():
        if stop.is_set():
            return
        content: list[dict[str, Any]] = [{"type": "text", "text": f"step {n}"}]
        if n % 3 == 0:
            content.append({"type": "tool_call", "id": f"c{n}", "name": "ls", "arguments": {}})
        body = {"messageId": f"a{n}", "role": "assistant", "turnId": turn_id, "content": content}
        posted = client.until_done("POST", f"/conversations/{cid}/messages", body)
        calls += [call["id"] for call in posted["toolCalls"]]
        client.call("GET", f"/conversations/{cid}/events?after=0&limit=20")
        client.call("GET", "/conversations?limit=5")


def _settled(rest: Rest, call_id: str) -> bool:
    return "outcome" in rest.call("GET", f"/tool-calls/{call_id}")


def test_terminated_connections_under_a_stream_of_requests_never_answer_500_in_debug_mode(
    tmp_path,
):
    with site(tmp_path, DEBUG="1", TOOLCORE_CLAIM_LEASE="5") as made:
        server = made.daphne()
        made.tool_worker()
        database = made.env["DATABASE_URL"].rsplit("/", 1)[1]
        clients = [Client(server.port, made.token) for _ in range(STREAM_CLIENTS)]
        stop = threading.Event()
        calls: list[str] = []
        errors: list[BaseException] = []

        def run(client: Client) -> None:
            try:
                _stream(client, stop, calls)
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(c,)) for c in clients]
        for thread in threads:
            thread.start()
        terminated = 0
        for n in range(1, TERMINATIONS + 1):
            # Terminations a second apart at least, each after more requests of the stream
            # (however slowly a loaded machine serves them): the count asserted below.
            time.sleep(1.0)
            wait_for(
                lambda n=n: errors or sum(len(c.answers) for c in clients) >= n * ANSWERS_BETWEEN,
                timeout=60,
                what=f"{n * ANSWERS_BETWEEN} answers of the stream",
            )
            terminated += terminate_backends(database)
        stop.set()
        for thread in threads:
            thread.join(60)
        assert not errors, errors
        # Right after a termination (no request running), the very next requests succeed.
        terminated += terminate_backends(database)
        rest = Rest(server.port, made.token)
        cid = rest.conversation_create("after")  # raises unless 2xx
        turn_id = rest.turn_open(cid)
        body = {"messageId": "after", "role": "assistant", "turnId": turn_id}
        body["content"] = [{"type": "tool_call", "id": "last", "name": "ls", "arguments": {}}]
        posted = rest.call("POST", f"/conversations/{cid}/messages", body)
        calls += [call["id"] for call in posted["toolCalls"]]
        assert rest.call("GET", f"/conversations/{cid}")["lastSequence"] == 2
        # Every call settles, by the worker that lost its connections too.
        deadline = time.monotonic() + 60
        while not all(_settled(rest, c) for c in calls):
            assert time.monotonic() < deadline, "calls left unsettled"
            time.sleep(0.2)
        rest.close()
        answers = [a for client in clients for a in client.answers]
        unavailable = [a for a in answers if a[1] == 503]
        assert terminated >= TERMINATIONS, terminated
        assert len(answers) > 50, len(answers)
        assert not [a for a in answers if a[1] >= 500 and a[1] != 503], [
            a for a in answers if a[1] >= 500 and a[1] != 503
        ][:3]
        assert all(retry == "1" for _, _, retry, _ in unavailable), unavailable[:3]
        assert all(json.loads(text)["error"]["code"] == "unavailable" for *_, text in unavailable)
        assert all(status < 500 or status == 503 for _, status, _, _ in answers)
        print(f"{len(answers)} answers, {len(unavailable)} × 503, {terminated} backends cut")
        assert_site_intact(made)
