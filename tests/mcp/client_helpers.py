"""What the MCP client tests share (tests/mcp/test_client_*.py): registering real MCP servers
(``mcp-server-time``, ``mcp-server-git``, and the tiny server ``client_server.py`` of this
folder, over stdio or Streamable HTTP), a worker that runs their tools, and a clean slate of
sessions and catalog around each test (``mcp_clean``)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.ports import free_port
from tests.tools.worker_helpers import running_worker
from tools.models import McpServer
from tools.runtime.mcp.services import mcp_server_refresh, mcp_server_save
from tools.runtime.mcp.sessions import mcp_sessions
from tools.runtime.mcp.specs import CATALOG
from tools.runtime.registry import FAMILIES, HANDLERS

BIN = Path(sys.executable).parent
TINY_SERVER = Path(__file__).with_name("client_server.py")


@pytest.fixture
def mcp_clean() -> Iterator[None]:
    """No session or catalog entry of an earlier test: each test registers its own servers
    (in a database the test then empties), and its stdio servers are stopped after it."""
    CATALOG.invalidate()
    yield
    mcp_sessions().close_all()
    CATALOG.invalidate()


def add_server(name: str, *command: str, owner: Any = None, **kwargs: Any) -> McpServer:
    """Register a stdio server (``command``) or, with ``url=``, an HTTP one, and list its
    tools, as ``mcp_add`` does."""
    transport = McpServer.Transport.HTTP if kwargs.get("url") else McpServer.Transport.STDIO
    server = mcp_server_save(
        name=name,
        transport=transport,
        command=command[0] if command else "",
        arguments=command[1:],
        owner=owner,
        **kwargs,
    )
    mcp_server_refresh(server=server)
    return server


def add_tiny(name: str, record: Path, **kwargs: Any) -> McpServer:
    """The tiny test server over stdio, recording into ``record``."""
    return add_server(
        name,
        sys.executable,
        str(TINY_SERVER),
        environment={"TEST_MCP_RECORD": str(record)},
        **kwargs,
    )


def git_repository(folder: Path) -> Path:
    """A git repository with one commit, for ``mcp-server-git``."""
    folder.mkdir(parents=True, exist_ok=True)
    git = ["git", "-C", str(folder), "-c", "user.name=Test", "-c", "user.email=test@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    (folder / "README.md").write_text("hello\n")
    subprocess.run([*git, "add", "README.md"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "First commit"], check=True)
    return folder


def recorded(record: Path) -> list[str]:
    return record.read_text().splitlines() if record.exists() else []


@contextlib.contextmanager
def mcp_worker() -> Iterator[Any]:
    """A worker that runs the core tools and the MCP servers' tools."""
    with running_worker(handlers=HANDLERS, families=FAMILIES, poll_seconds=60) as worker:
        yield worker


@contextlib.contextmanager
def http_tiny_server(token: str, record: Path) -> Iterator[str]:
    """The tiny server over Streamable HTTP in a process of its own (uvicorn); its URL."""
    port = free_port()
    env = {**os.environ, "TEST_MCP_TOKEN": token, "TEST_MCP_RECORD": str(record)}
    process = subprocess.Popen(
        [sys.executable, str(TINY_SERVER), "--http", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 30  # bounds a hang: uvicorn starting, loaded
        while True:
            try:
                httpx2.get(url, timeout=1)
                break
            except httpx2.HTTPError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise AssertionError("the HTTP MCP server did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        mcp_sessions().close_all()  # its open streams would hold uvicorn's shutdown
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
