"""The processes of bench/realtime.py: daphne, the bare ``websockets`` servers of the replay
baseline and floor, and the REST poster of the fan-out. No Django here: the children start fast
and measure only themselves.

    python bench/realtime_peers.py frames FILE PORT     # sends FILE's frames (one a line)
    python bench/realtime_peers.py floor SPEC PORT      # reads the rows itself, then sends
    python bench/realtime_peers.py post SPEC            # POSTs assistant messages in a row

Each server answers one subscription per connection (the first client frame) with its frames
and prints ``ready`` once it listens.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REPLAY_EVENTS_PER_FRAME = 100  # the consumer's replay page (projections.frames.REPLAY_MAX_EVENTS)
REPLAY_READ_ROWS = 1000  # rows read at once, as the consumer does (REPLAY_READ_EVENTS)


def raise_fd_limit() -> None:
    """Open files up to the hard limit (1,000 sockets and more); children inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _proc_status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Daphne:
    """daphne serving ``app`` on a free port of 127.0.0.1, started and ready (``/healthz``)."""

    def __init__(self, app: str, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.log_path = log
        self._log = open(log, "w+")  # noqa: SIM115 - read back at stop()
        daphne = str(Path(sys.executable).with_name("daphne"))
        self.process = subprocess.Popen(
            [daphne, "-b", "127.0.0.1", "-p", str(self.port), app],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(self.url("/healthz"), timeout=1) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"daphne did not start: {self.errors()[-3000:]}")
            time.sleep(0.1)

    @property
    def pid(self) -> int:
        return self.process.pid

    def url(self, path: str, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    def rss_kib(self) -> int:
        return _proc_status_kib(self.pid, "VmRSS:")

    def errors(self) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read()

    def stop(self) -> str:
        """Stop it; what it wrote on stderr."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        errors = self.errors()
        self._log.close()
        return errors


class Child:
    """A child of this module (``frames``, ``floor``), started and ready."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.process.stdout.readline()
        if line.strip() != "ready":
            self.stop()
            raise RuntimeError(f"{args[0]} server did not start: {line!r}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


# --- the bare servers ------------------------------------------------------------------------


async def _serve(port: int, frames_for: Any) -> None:
    """A ``websockets`` server on ``port``: after a connection's first frame, it sends
    ``frames_for()``'s frames one ``send`` each, as text."""
    from websockets.asyncio.server import serve

    async def handler(ws: Any) -> None:
        await ws.recv()
        async for frame in frames_for():
            await ws.send(frame, text=True)
        await ws.wait_closed()

    async with serve(handler, "127.0.0.1", port, compression=None, max_size=None):
        print("ready", flush=True)
        await asyncio.Future()


def serve_frames(path: str, port: int) -> None:
    """The baseline: frames pre-encoded (UTF-8 bytes) before any client connects."""
    lines = Path(path).read_text(encoding="utf-8").split("\n")[:-1]  # not splitlines: U+2028
    frames = [line.encode() for line in lines]

    async def frames_for():
        for frame in frames:
            yield frame

    asyncio.run(_serve(port, frames_for))


def _floor_reader(spec: dict[str, Any]) -> Any:
    """A function reading ``REPLAY_READ_ROWS`` rows after a sequence with the raw driver."""
    if spec["vendor"] == "postgresql":
        import psycopg

        conn = psycopg.connect(spec["conninfo"], autocommit=True)
        sql = spec["sql"].replace("?", "%s")
    else:
        import sqlite3

        conn = sqlite3.connect(spec["path"], isolation_level=None)
        sql = spec["sql"]

    def read(after: int) -> list[tuple]:
        return conn.execute(sql, (spec["conversation"], after, REPLAY_READ_ROWS)).fetchall()

    return read


def _wire_uuid(value: str | None) -> str:
    if value is None:
        return "null"
    if len(value) == 32:  # SQLite stores UUIDs as hex
        value = f"{value[:8]}-{value[8:12]}-{value[12:16]}-{value[16:20]}-{value[20:]}"
    return f'"{value}"'


def serve_floor(spec_json: str, port: int) -> None:
    """The floor: the rows read with the raw driver at each subscription, 1,000 at a time, each
    event's JSON and the replay frames built by string formatting (the stored payload text
    passes through), then sent: the work any server reading the database must do."""
    spec = json.loads(spec_json)
    read = _floor_reader(spec)
    cid = spec["conversation_id"]
    head = f'{{"type":"replay","conversationId":"{cid}","from":'
    encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode

    async def frames_for():
        after = 0
        while True:
            rows = read(after)
            if not rows:
                return
            texts = [
                f'{{"sequence":{seq},"type":{encode(type_)},"turnId":{_wire_uuid(turn)},'
                f'"toolCallId":{_wire_uuid(call)},"payload":{payload},"createdAt":"{created}"}}'
                for seq, type_, turn, call, payload, created in rows
            ]
            for start in range(0, len(rows), REPLAY_EVENTS_PER_FRAME):
                page = rows[start : start + REPLAY_EVENTS_PER_FRAME]
                body = ",".join(texts[start : start + REPLAY_EVENTS_PER_FRAME])
                frm, to = page[0][0] - 1, page[-1][0]
                yield f'{head}{frm},"to":{to},"events":[{body}]}}'.encode()
            after = rows[-1][0]

    asyncio.run(_serve(port, frames_for))


# --- the REST poster -------------------------------------------------------------------------


def post_messages(spec: dict[str, Any]) -> list[float]:
    """POST ``spec["count"]`` assistant text messages one after the other on one kept-alive
    connection; the ``time.time()`` at which each was sent."""
    conn = http.client.HTTPConnection("127.0.0.1", spec["port"], timeout=60)
    headers = {"Authorization": f"Bearer {spec['token']}", "Content-Type": "application/json"}
    path = f"/api/v1/conversations/{spec['conversation']}/messages"
    sent = []
    for i in range(spec["count"]):
        body = {
            "messageId": f"{spec['prefix']}-{i}",
            "role": "assistant",
            "turnId": spec["turn"],
            "content": [{"type": "text", "text": f"event {i} of the fan-out bench"}],
        }
        sent.append(time.time())
        conn.request("POST", path, json.dumps(body), headers)
        answer = conn.getresponse()
        answer.read()
        if answer.status != 201:
            raise RuntimeError(f"POST answered {answer.status}")
    conn.close()
    return sent


def main() -> None:
    kind, *args = sys.argv[1:]
    if kind == "frames":
        serve_frames(args[0], int(args[1]))
    elif kind == "floor":
        serve_floor(args[0], int(args[1]))
    elif kind == "post":
        print(json.dumps(post_messages(json.loads(args[0]))))
    else:
        raise SystemExit(f"unknown child {kind!r}")


if __name__ == "__main__":
    main()
