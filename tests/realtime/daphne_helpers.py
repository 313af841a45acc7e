"""Real daphne processes for the end-to-end tests (``test_e2e_daphne.py``), black-box.

A ``Site`` is what one or more daphne processes serve: a database of its own (a fresh SQLite file,
or a PostgreSQL database created for the test on the server of the suite's ``DATABASE_URL``),
migrated with ``manage.py migrate``, a superuser and a token made with ``manage.py`` (once per
test process, then copied for each site: ``site_databases.py``), and the environment every
process of the site runs with (the suite's Redis server, in a database of this worker's sites,
``tests/isolation.py``, when the suite has ``REDIS_URL``).
Nothing here touches the test process's own database: the tests speak HTTP and websockets only.

Also here: the clients of a site (``Rest``, ``Browser``, ``ws_connect``, ``Cursor``), its writer
process (``append``, ``appended``), and what any test's child process needs (``ROOT``,
``stop_process``, ``rss_bytes``; free ports come from ``tests/ports.py``).

A process that fails (a ``manage.py`` command, a daphne that does not start) raises with its
stderr; the stderr of every daphne is printed when the site closes, so pytest shows it beside a
failed test. A daphne's or worker's stdout goes to the same log as its stderr: both are
everything the process wrote (logs go to stderr; nothing is expected on stdout).
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import http.cookiejar
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

from tests.isolation import own_redis_database
from tests.ports import free_port

from .site_databases import Template, database_copy, postgres_database, template

ROOT = Path(__file__).resolve().parents[2]
# As the deployment guide starts daphne: a listen queue of 1,024 (Twisted's default is 50, which
# a burst of reconnecting clients overflows: their connections then wait for SYN retries).
LISTEN = "tcp:port={port}:interface=127.0.0.1:backlog=1024"
START_SECONDS = 30  # a daphne that does not answer /healthz by then failed to start
STOP_SECONDS = 10  # after SIGTERM, then SIGKILL
FRAME_SECONDS = 10  # the longest a test waits for one websocket frame
# Only what a process needs to run: nothing of the suite's own settings leaks into the site.
INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")
USERNAME = "e2e"


def uses_postgresql() -> bool:
    from django.db import connection

    return connection.vendor == "postgresql"


def redis_url() -> str:
    from django.conf import settings

    return settings.REDIS_URL


def rss_bytes(pid: int) -> int:
    """The resident memory (``VmRSS``) of process ``pid``."""
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB$", status, re.MULTILINE)
    assert match, status
    return int(match.group(1)) * 1024


def stop_process(process: subprocess.Popen | None, seconds: float = STOP_SECONDS) -> None:
    """SIGTERM, then SIGKILL if it lingers ``seconds``."""
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Daphne:
    """One ``daphne`` process on a free port of 127.0.0.1, started by ``Site.daphne``."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env = env
        self.log = log
        self.port = 0
        self.process: subprocess.Popen | None = None

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws/conversations/"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, port: int | None = None) -> Daphne:
        """Start on ``port``, or on a free port (trying another if one is taken meanwhile)."""
        for _ in range(1 if port else 3):
            self.port = port or free_port()
            with self.log.open("ab") as stderr:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "daphne", "-e", LISTEN.format(port=self.port)]
                    + ["config.asgi:application"],
                    cwd=ROOT,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=stderr,  # all it writes in one log (nothing, normally)
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
                with urllib.request.urlopen(f"{self.http_url}/healthz", timeout=1) as answer:
                    if answer.status == 200:
                        return True
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.1)
        self.stop()
        return False

    def stderr(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def rss_bytes(self) -> int:
        """The process's resident memory (``VmRSS``)."""
        return rss_bytes(self.pid)

    def errors(self) -> list[str]:
        """Lines of its stderr at level ERROR or above, and tracebacks printed outside logging."""
        found = []
        for line in self.stderr().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if isinstance(record, dict):
                if record.get("level") in ("ERROR", "CRITICAL"):
                    found.append(line)
            elif "Traceback" in line or "Unhandled error" in line:
                found.append(line)
        return found

    def kill(self) -> None:
        """``kill -9``: gone at once, nothing cleaned up."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def restart(self) -> Daphne:
        """Stopped, then started again on the same port (clients see the server go away)."""
        self.stop()
        return self.start(self.port)

    def stop(self) -> str:
        """SIGTERM (SIGKILL if it lingers); the stderr it left."""
        stop_process(self.process)
        return self.stderr()


class ToolWorker(Daphne):
    """One ``manage.py runworker_tools`` process, started by ``Site.tool_worker``: the same
    stderr, errors, RSS and stop as a daphne."""

    def start(self, port: int | None = None) -> ToolWorker:
        with self.log.open("ab") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "manage.py", "runworker_tools"],
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=stderr,
            )
        return self


class Site:
    """A database with a superuser and a token, and the environment its processes share."""

    def __init__(self, root: Path, **env: str) -> None:
        self.root = root
        self.username = USERNAME
        self.password = secrets.token_urlsafe(16)
        self.daphnes: list[Daphne] = []  # and the tool workers (``tool_worker``)
        self._drop: Any = None
        self.env = {k: os.environ[k] for k in INHERITED if k in os.environ}
        self.env.update(
            DJANGO_SETTINGS_MODULE="config.settings",
            PYTHONUNBUFFERED="1",
            SECRET_KEY=secrets.token_urlsafe(48),
            ALLOWED_HOSTS="127.0.0.1,localhost",
            DATA_DIR=str(root / "data"),
            TOOLCORE_WORKSPACE_ROOT=str(root / "workspaces"),
            TOOLCORE_WORKERS="0",
            LOG_LEVEL="WARNING",
        )
        if redis_url():
            self.env["REDIS_URL"] = own_redis_database("sites")
        self.env.update(env)

    def migrate(self) -> None:
        """The site's folders and a database of its own (``DATABASE_URL``), migrated: a copy of
        this process's migrated template (``site_databases``)."""
        self._database(template("migrated", _migrated))

    def create(self) -> Site:
        """Migrated, with the superuser and a token of it: a copy of this process's template of
        such a database, whose password and token the site takes."""
        made = template("superuser", _with_superuser)
        self._database(made)
        self.password = str(made.facts["password"])
        self.token_id, self.token = int(made.facts["token_id"]), str(made.facts["token"])
        return self

    def _database(self, made: Template) -> None:
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        (self.root / "workspaces").mkdir(parents=True, exist_ok=True)
        self.env["DATABASE_URL"], self._drop = database_copy(made, self.root)

    def _migrated_afresh(self) -> None:
        """What ``migrate`` did before templates: a new database, ``manage.py migrate``."""
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        (self.root / "workspaces").mkdir(parents=True, exist_ok=True)
        if uses_postgresql():
            from django.conf import settings

            self.env["DATABASE_URL"], self._drop = postgres_database(settings.DATABASE_URL)
        else:
            self.env["DATABASE_URL"] = f"sqlite:///{self.root / 'db.sqlite3'}"
        self.manage("migrate", "--no-input", "-v", "0")

    def run(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess:
        """Run ``manage.py`` with the site's environment, whatever its exit status."""
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env={**self.env, **(env or {})},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def manage(self, *args: str, env: dict[str, str] | None = None, timeout: float = 60) -> str:
        """Run ``manage.py`` with the site's environment; its stdout (raises on failure)."""
        done = self.run(*args, env=env, timeout=timeout)
        if done.returncode != 0:
            raise AssertionError(
                f"manage.py {' '.join(args[:2])} exited {done.returncode}:\n{done.stderr}"
            )
        return done.stdout

    def token_create(self) -> tuple[int, str]:
        """A new token of the site's user (``create_token``): its id and its secret."""
        lines = self.manage("create_token", self.username).strip().splitlines()
        found = re.match(r"Token (\d+) for ", lines[0])
        assert found, lines
        return int(found.group(1)), lines[-1].split()[-1]

    def token_revoke(self, token_id: int) -> None:
        """Revoke a token from a process of its own, through the service the admin uses."""
        self.manage(
            "shell",
            "-c",
            "from conversations.api.auth import token_revoke\n"
            f"assert token_revoke(token_id={int(token_id)})",
        )

    def daphne(self, **env: str) -> Daphne:
        """A started daphne serving this site (``env`` adds settings for it alone)."""
        server = Daphne({**self.env, **env}, self.root / f"daphne-{len(self.daphnes)}.stderr")
        self.daphnes.append(server)
        return server.start()

    def tool_worker(self, **env: str) -> ToolWorker:
        """A started ``manage.py runworker_tools`` process of this site."""
        worker = ToolWorker({**self.env, **env}, self.root / f"worker-{len(self.daphnes)}.stderr")
        self.daphnes.append(worker)
        return worker.start()

    def errors(self) -> list[str]:
        """The lines at level ERROR or above (and tracebacks) its daphnes and workers logged."""
        return [line for server in self.daphnes for line in server.errors()]

    def close(self) -> None:
        for server in self.daphnes:
            stderr = server.stop()
            if stderr.strip():
                what = f"daphne on port {server.port}" if server.port else f"pid {server.pid}"
                print(f"--- {what}, stderr ---\n{stderr[-20000:]}")
        if self._drop is not None:
            self._drop()


def _migrated(folder: Path) -> Template:
    """The template of a migrated database (``Site.migrate``)."""
    maker = Site(folder)
    maker._migrated_afresh()
    return Template(maker.env["DATABASE_URL"], {})


def _with_superuser(folder: Path) -> Template:
    """The template of a migrated database with the harness's superuser and a token of it."""
    maker = Site(folder)
    maker._migrated_afresh()
    maker.manage(
        "createsuperuser",
        "--no-input",
        "--username",
        maker.username,
        "--email",
        f"{maker.username}@example.com",
        env={"DJANGO_SUPERUSER_PASSWORD": maker.password},
    )
    token_id, token = maker.token_create()
    facts = {"password": maker.password, "token_id": token_id, "token": token}
    return Template(maker.env["DATABASE_URL"], facts)


@contextlib.contextmanager
def site(root: Path, **env: str) -> Iterator[Site]:
    """A created site, closed (daphnes stopped, PostgreSQL database dropped) on exit."""
    made = Site(root, **env)
    try:
        yield made.create()
    finally:
        made.close()


class Rest:
    """A keep-alive client of one daphne's ``/api/v1/`` with a bearer token (blocking)."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        self.conn.request(method, f"/api/v1{path}", body=data, headers=self.headers)
        answer = self.conn.getresponse()
        text = answer.read()
        if answer.status not in (200, 201):
            raise AssertionError(f"{method} {path} answered {answer.status}: {text[:500]!r}")
        return json.loads(text) if text else None

    def conversation_create(self, title: str = "e2e") -> str:
        return self.call("POST", "/conversations", {"title": title})["id"]

    def turn_open(self, cid: str, message_id: str = "user-1") -> str:
        body = {"messageId": message_id, "role": "user", "content": [text_block("go")]}
        return self.call("POST", f"/conversations/{cid}/messages", body)["turnId"]

    def say(self, cid: str, turn_id: str, message_id: str, text: str) -> int:
        """An assistant text message (one event); its sequence."""
        body = {"messageId": message_id, "role": "assistant", "turnId": turn_id}
        body["content"] = [text_block(text)]
        return self.call("POST", f"/conversations/{cid}/messages", body)["event"]["sequence"]

    def close(self) -> None:
        self.conn.close()


class Browser:
    """A browser's cookies on one daphne: logs in and out through the admin's forms."""

    def __init__(self, server: Daphne) -> None:
        self.base = server.http_url
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def cookies(self) -> dict[str, str]:
        return {cookie.name: cookie.value for cookie in self.jar}

    def _form(self, path: str, fields: dict[str, str]) -> None:
        """Post a form of the admin with the CSRF token of its page."""
        url = f"{self.base}{path}"
        with self.opener.open(f"{self.base}/admin/login/", timeout=30) as page:
            html = page.read().decode()
        found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
        data = {"csrfmiddlewaretoken": found.group(1) if found else ""} | fields
        request = urllib.request.Request(url, data=urllib.parse.urlencode(data).encode())
        with self.opener.open(request, timeout=30) as answer:
            answer.read()

    def login(self, username: str, password: str) -> str:
        """The session cookie of a login through ``/admin/login/``."""
        self._form("/admin/login/", {"username": username, "password": password, "next": "/admin/"})
        session = self.cookies().get("sessionid")
        assert session, f"no session after logging in as {username}: {self.cookies()}"
        return session

    def logout(self) -> None:
        self._form("/admin/logout/", {})


def text_block(text: str) -> dict[str, str]:
    """A message's text content block."""
    return {"type": "text", "text": text}


# --- a writer process --------------------------------------------------------------------------


async def append(site: Site, server: Daphne, cid: str, **options) -> asyncio.subprocess.Process:
    """Start ``tests.realtime.appender`` (options as its flags) in a process of its own."""
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.realtime.appender",
        f"--port={server.port}",
        f"--token={site.token}",
        f"--conversation={cid}",
        *flags,
        cwd=ROOT,
        env=site.env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def appended(process: asyncio.subprocess.Process, timeout: float = 60) -> int:
    """The last sequence the appender wrote (it must have succeeded)."""
    async with asyncio.timeout(timeout):
        out, err = await process.communicate()
    assert process.returncode == 0, err.decode(errors="replace")[-5000:]
    return int(out.split()[-1])


# --- websockets --------------------------------------------------------------------------------


async def ws_connect(
    server: Daphne, token: str | None = None, *, hello: bool = True, **kwargs: Any
) -> ClientConnection:
    """A ``websockets`` client of ``/ws/conversations/`` (its ``hello`` read when ``hello``)."""
    headers = dict(kwargs.pop("additional_headers", {}))
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    kwargs.setdefault("proxy", None)
    kwargs.setdefault("open_timeout", FRAME_SECONDS)
    ws = await connect(server.ws_url, additional_headers=headers, **kwargs)
    if hello:
        try:
            assert await receive(ws) == {"type": "hello", "protocolVersion": 1}
        except BaseException:
            ws.transport.abort()  # not left open (a server socket and consumer) when given up
            raise
    return ws


async def receive(ws: ClientConnection, timeout: float = FRAME_SECONDS) -> dict[str, Any]:
    async with asyncio.timeout(timeout):
        return json.loads(await ws.recv())


async def subscribe(ws: ClientConnection, cid: str, after: int | None) -> None:
    await ws.send(json.dumps({"type": "subscribe", "conversationId": cid, "after": after}))


class Cursor:
    """What a client of one conversation holds: checks, frame by frame, that durable events
    arrive exactly once, in order, without a gap (``replay`` pages exact, ``head`` truthful)."""

    # The frames that are not durable events (realtime.md): never replayed, they may come
    # between any two durable frames when the conversation has tool calls.
    EPHEMERAL = frozenset(
        {"tool_call.changed", "tool.updated", "conversation.live", "queue.changed"}
    )

    def __init__(self, cid: str, *, ephemeral: bool = False) -> None:
        self.cid = cid
        self.ephemeral = ephemeral  # whether ephemeral frames are expected (and skipped)
        self.last = 0
        self.sequences: list[int] = []
        self.live = 0  # events from conversation.event frames
        self.replayed = 0  # events from replay frames
        self.skipped = 0  # ephemeral frames

    def take(self, frame: dict[str, Any]) -> list[dict[str, Any]]:
        """Check one frame; the durable events it brought (none for a ``head``)."""
        kind = frame.get("type")
        assert frame.get("conversationId") == self.cid, frame
        if kind == "replay":
            got = [event["sequence"] for event in frame["events"]]
            assert frame["from"] == self.last, (self.last, _short(frame))
            assert got == list(range(frame["from"] + 1, frame["to"] + 1)), _short(frame)
            self.sequences += got
            self.replayed += len(got)
            self.last = frame["to"]
            return frame["events"]
        if kind == "conversation.event":
            sequence = frame["event"]["sequence"]
            assert sequence == self.last + 1, (self.last, _short(frame))
            self.sequences.append(sequence)
            self.live += 1
            self.last = sequence
            return [frame["event"]]
        if kind == "head":
            assert frame["sequence"] == self.last, (self.last, frame)
            return []
        if self.ephemeral and kind in self.EPHEMERAL:
            self.skipped += 1
            return []
        raise AssertionError(f"unexpected frame: {_short(frame)}")


def _short(frame: dict[str, Any]) -> str:
    text = json.dumps(frame)
    return text if len(text) < 600 else f"{text[:600]}…"
