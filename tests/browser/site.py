"""A live Toolcore for the browser tests: a real daphne (websockets!) on a free port.

A ``Site`` of the end-to-end harness (tests/realtime/daphne_helpers.py: a database of its own,
a fresh SQLite file or a database created on the suite's PostgreSQL server and dropped at the
end), loaded with ``seed_demo --force`` instead of a bare superuser: the demo user, its token
and the demo conversation, as the README's quick start has them. Served with
``TOOLCORE_WORKERS=1``, so the embedded worker runs the calls the tests approve. With
``REDIS_URL`` the site uses Redis in a database number of its own: the suite flushes its own
layer's keys after its tests, which must not touch the live site's groups.

Nothing here touches the test process's database: the tests speak HTTP, websockets and
``manage.py``.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.isolation import own_redis_database
from tests.realtime.daphne_helpers import (
    ROOT,
    Daphne,
    Site,
    redis_url,
    text_block,
)

__all__ = ["ROOT", "LiveSite"]

DEMO_USERNAME = "demo"
DEMO_PASSWORD = "demo-password"


class LiveSite(Site):
    """One daphne serving the seeded demo: ``url``, the demo user, token and conversation."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, TOOLCORE_WORKERS="1")
        if redis_url():
            self.env["REDIS_URL"] = own_redis_database("browser")
        self.username = DEMO_USERNAME
        self.password = DEMO_PASSWORD
        self.token = ""
        self.demo_conversation = ""
        self.server: Daphne | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.http_url

    def create(self) -> LiveSite:
        """The harness's database, migrated, then ``seed_demo`` as ``make run`` does (its user
        is the README's, not the harness's superuser)."""
        self.migrate()
        seeded = self.manage("seed_demo", "--force", timeout=120)
        self.demo_conversation = re.search(r"^Demo conversation: (\S+)$", seeded, re.M).group(1)
        self.token = re.search(r"^Demo token: (\S+)$", seeded, re.M).group(1)
        return self

    def start(self) -> LiveSite:
        self.server = self.daphne()
        return self

    # --- the API, as an agent would call it -----------------------------------------------

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """``/api/v1`` with the demo token; the decoded answer (raises on an error status)."""
        request = urllib.request.Request(
            f"{self.url}/api/v1{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                text = answer.read()
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{method} {path}: {exc.code} {exc.read()[:500]!r}") from exc
        return json.loads(text) if text else None

    def conversation(self, title: str) -> str:
        return self.api("POST", "/conversations", {"title": title})["id"]

    def user_says(self, cid: str, message_id: str, text: str) -> str:
        body = {"messageId": message_id, "role": "user", "content": [text_block(text)]}
        return self.api("POST", f"/conversations/{cid}/messages", body)["turnId"]

    def assistant_calls(
        self, cid: str, turn_id: str, message_id: str, calls: list[tuple[str, dict]], text: str = ""
    ) -> list[str]:
        """An assistant message asking for ``calls`` (name, arguments); the calls' ids."""
        content: list[dict[str, Any]] = [text_block(text)] if text else []
        content += [
            {"type": "tool_call", "id": f"{message_id}-{i}", "name": name, "arguments": arguments}
            for i, (name, arguments) in enumerate(calls)
        ]
        body = {"messageId": message_id, "role": "assistant", "turnId": turn_id, "content": content}
        answer = self.api("POST", f"/conversations/{cid}/messages", body)
        return [call["id"] for call in answer["toolCalls"]]

    def call(self, call_id: str) -> dict[str, Any]:
        return self.api("GET", f"/tool-calls/{call_id}")

    def wait_settled(self, call_id: str, seconds: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            call = self.call(call_id)
            if "outcome" in call:
                return call
            time.sleep(0.1)
        raise AssertionError(f"call {call_id} did not settle in {seconds} s: {call}")
