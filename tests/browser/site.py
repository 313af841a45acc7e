"""A live Toolcore for the browser tests: a real daphne (websockets!) on a free port.

The site has a database of its own: a fresh SQLite file, or, when the suite runs on
PostgreSQL, a database created for it on the same server (dropped at the end). It is migrated,
loaded with ``seed_demo --force`` (the demo user, its token and the demo conversation), and
served with ``TOOLCORE_WORKERS=1``, so the embedded worker runs the calls the tests approve.
With ``REDIS_URL`` the site uses Redis too, in a database number of its own: the suite flushes
its own layer's keys after every test, which must not touch the live site's groups.

Nothing here touches the test process's database: the tests speak HTTP, websockets and
``manage.py``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[2]
START_SECONDS = 30  # a daphne that does not answer /healthz by then failed to start
STOP_SECONDS = 10  # after SIGTERM, then SIGKILL
# Only what a process needs to run: nothing of the suite's own settings leaks into the site.
INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")
DEMO_USERNAME = "demo"
DEMO_PASSWORD = "demo-password"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _suite_settings() -> tuple[str, str]:
    """The suite's ``DATABASE_URL`` when it is PostgreSQL (else ``""``) and ``REDIS_URL``."""
    from django.conf import settings
    from django.db import connection

    database = settings.DATABASE_URL if connection.vendor == "postgresql" else ""
    return database, settings.REDIS_URL


def _own_redis_database(url: str) -> str:
    """``url`` on another database number than the suite's (15, or 14 if the suite uses 15)."""
    parts = urlsplit(url)
    current = parts.path.strip("/") or "0"
    return urlunsplit(parts._replace(path="/14" if current == "15" else "/15"))


def _postgres_database(suite_url: str) -> tuple[str, Any]:
    """A new, empty database on the server of ``suite_url``: its URL and a function dropping it."""
    import psycopg
    from psycopg import sql

    name = f"toolcore_browser_{secrets.token_hex(6)}"
    parts = urlsplit(suite_url)
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))

    def drop() -> None:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    return urlunsplit(parts._replace(path=f"/{name}")), drop


class LiveSite:
    """One daphne serving a seeded database; ``url``, the demo user, token and conversation."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = 0
        self.process: subprocess.Popen | None = None
        self.username = DEMO_USERNAME
        self.password = DEMO_PASSWORD
        self.token = ""
        self.demo_conversation = ""
        self._drop: Any = None
        self.log = root / "daphne.stderr"
        self.env = {k: os.environ[k] for k in INHERITED if k in os.environ}
        self.env.update(
            DJANGO_SETTINGS_MODULE="config.settings",
            PYTHONUNBUFFERED="1",
            SECRET_KEY=secrets.token_urlsafe(48),
            ALLOWED_HOSTS="127.0.0.1,localhost",
            DATA_DIR=str(root / "data"),
            TOOLCORE_WORKSPACE_ROOT=str(root / "workspaces"),
            TOOLCORE_WORKERS="1",
            LOG_LEVEL="WARNING",
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def create(self) -> LiveSite:
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        (self.root / "workspaces").mkdir(parents=True, exist_ok=True)
        database, redis = _suite_settings()
        if database:
            self.env["DATABASE_URL"], self._drop = _postgres_database(database)
        else:
            self.env["DATABASE_URL"] = f"sqlite:///{self.root / 'db.sqlite3'}"
        if redis:
            self.env["REDIS_URL"] = _own_redis_database(redis)
        self.manage("migrate", "--no-input", "-v", "0")
        seeded = self.manage("seed_demo", "--force")
        self.demo_conversation = re.search(r"^Demo conversation: (\S+)$", seeded, re.M).group(1)
        self.token = re.search(r"^Demo token: (\S+)$", seeded, re.M).group(1)
        return self

    def manage(self, *args: str, timeout: float = 120) -> str:
        """Run ``manage.py`` with the site's environment; its stdout (raises on failure)."""
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise AssertionError(f"manage.py {args[0]} exited {done.returncode}:\n{done.stderr}")
        return done.stdout

    def start(self) -> LiveSite:
        for _ in range(3):
            self.port = free_port()
            with self.log.open("ab") as stderr:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port)]
                    + ["config.asgi:application"],
                    cwd=ROOT,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                )
            if self._wait_healthy():
                return self
            if "Address already in use" not in self.stderr():
                break
        raise AssertionError(f"daphne did not start on port {self.port}:\n{self.stderr()}")

    def _wait_healthy(self) -> bool:
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=1) as answer:
                    if answer.status == 200:
                        return True
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.1)
        self.stop()
        return False

    def stderr(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def close(self) -> None:
        self.stop()
        errors = self.stderr().strip()
        if errors:
            print(f"--- daphne on port {self.port}, stderr ---\n{errors[-20000:]}")
        if self._drop is not None:
            self._drop()

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
        body = {"messageId": message_id, "role": "user", "content": [_text(text)]}
        return self.api("POST", f"/conversations/{cid}/messages", body)["turnId"]

    def assistant_calls(
        self, cid: str, turn_id: str, message_id: str, calls: list[tuple[str, dict]], text: str = ""
    ) -> list[str]:
        """An assistant message asking for ``calls`` (name, arguments); the calls' ids."""
        content: list[dict[str, Any]] = [_text(text)] if text else []
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


def _text(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}
