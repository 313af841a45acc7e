"""What the execution benches share: the options of the run, Django and the throw-away
PostgreSQL database (set up on demand, both undone at the end), the calls they make ready and
the worker processes' readiness.

Nothing is imported from Django or bench/_setup.py until a bench asks for it: the capture
benches' child interpreters (``bench/execution.py --child``) import this module and must stay
light.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).with_name("execution.py")  # what every child process runs
MIB = 1024 * 1024


@dataclass
class Options:
    """The command line's options that the benches read."""

    quick: bool = False  # --quick: one run, smaller sizes
    profile: Path | None = None  # --profile DIR


OPTIONS = Options()


def seconds(t: float) -> str:
    return f"{t * 1000:.0f} ms" if t < 1 else f"{t:.2f} s"


class Django:
    """Django set up once, on demand, and a throw-away database created once for the benches
    that need PostgreSQL (bench/_setup.py); both undone at the end."""

    def __init__(self) -> None:
        self.ready = False
        self.connection: Any = None
        self.user: Any = None

    def setup(self) -> None:
        if not self.ready:
            import _setup  # noqa: F401  (the environment of the benches)
            import django

            django.setup()
            self.ready = True

    def postgresql(self) -> Any:
        """The bench database's connection, created at the first call; None (and the benches
        skip) when the settings' database is not PostgreSQL."""
        self.setup()
        from django.db import connection

        if connection.vendor != "postgresql":
            return None
        if self.connection is None:
            from _setup import django_on_bench_database
            from django.contrib.auth import get_user_model

            self.connection = django_on_bench_database()
            self.user = get_user_model().objects.create(username="bench")
        return self.connection

    def skip_reason(self) -> str:
        from django.db import connection

        return (
            f"needs PostgreSQL (worker processes share it); DATABASE_URL gives {connection.vendor}"
        )

    def _wait_alone(self, timeout: float = 20.0) -> None:
        """Until the sessions of the worker processes stopped have ended (a database in use
        cannot be dropped)."""
        name = self.connection.settings_dict["NAME"]
        deadline = time.monotonic() + timeout
        with self.connection._nodb_cursor() as cursor:
            while time.monotonic() < deadline:
                cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [name])
                if cursor.fetchone()[0] == 0:
                    return
                time.sleep(0.1)

    def close(self) -> None:
        if not self.ready:
            return
        from django.conf import settings
        from django.db import connections

        data = Path(settings.DATA_DIR)
        try:
            connections.close_all()
            if self.connection is not None:
                from _setup import drop_bench_database

                self.connection.close_pool()
                self._wait_alone()
                drop_bench_database(self.connection)
        finally:
            from _setup import remove_bench_data_dir

            remove_bench_data_dir(data)


DJANGO = Django()


def listening(connection: Any, channel: str) -> int:
    """How many sessions of the bench database have sent ``LISTEN channel`` last: the worker
    listens on its channels in a fixed order, the last one once it is ready."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query = %s",
            [f"LISTEN {channel}"],
        )
        return cursor.fetchone()[0]


def wait_listening(connection: Any, count: int, check: Callable[[], None]) -> None:
    """Until exactly ``count`` sessions listen (workers started and ready, or gone); ``check``
    raises when a worker process ended."""
    from conversations.services.runners import CHANNELS

    deadline = time.monotonic() + 60
    while listening(connection, CHANNELS[-1]) != count:
        check()
        if time.monotonic() > deadline:
            raise RuntimeError(f"not {count} listening worker processes within 60 s")
        time.sleep(0.05)


def open_conversation(title: str, files: dict[str, str] | None = None) -> tuple[Any, str]:
    """A conversation of the bench user with an open turn; ``files`` written in its workspace."""
    from _setup import conversation_with_turn

    from tools.workspaces import conversation_workspace

    conversation, turn_id = conversation_with_turn(DJANGO.user, title)
    workspace = conversation_workspace(conversation)
    workspace.mkdir(parents=True, exist_ok=True)
    for name, text in (files or {}).items():
        (workspace / name).write_text(text)
    return conversation, turn_id


def post_calls(conversation: Any, turn_id: str, calls: list[tuple[str, dict]]) -> list:
    """An assistant message with these tool calls (≤ 128 a message); their ids."""
    from conversations.services.messages import message_post

    content = [
        {"type": "tool_call", "id": f"c{i}", "name": name, "arguments": arguments}
        for i, (name, arguments) in enumerate(calls)
    ]
    posted = message_post(
        conversation_id=conversation.pk,
        message_id=f"a-{uuid.uuid4().hex}",
        role="assistant",
        turn_id=turn_id,
        content=content,
    )
    return posted.call_ids


def wait_response(call_id: Any, timeout: float = 60.0) -> dict:
    """The payload of the call's response event, polled every 5 ms."""
    from conversations.models import ConversationEvent

    query = ConversationEvent.objects.filter(tool_call_id=call_id, type="tool_call_response")
    deadline = time.monotonic() + timeout
    while True:
        payload = query.values_list("payload", flat=True).first()
        if payload is not None:
            return payload
        if time.monotonic() > deadline:
            raise RuntimeError(f"no response to call {call_id} within {timeout:.0f} s")
        time.sleep(0.005)
