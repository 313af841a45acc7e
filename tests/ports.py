"""Free TCP ports on the loopback for the servers the tests start (daphne, SeaweedFS, MCP servers).

The kernel chooses them (a bind to port 0): a port it hands out has no listener and no
connection in ``TIME_WAIT``, whatever the suite did before. A port chosen by the tests themselves
(a block from a fixed range) does not have that promise: after a few thousand connections the
machine's ephemeral range is full of ``TIME_WAIT`` and a block there is seldom free.
"""

from __future__ import annotations

import contextlib
import socket


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports: every probe stays bound until all are chosen."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            probe = stack.enter_context(socket.socket())
            probe.bind(("127.0.0.1", 0))
            ports.append(probe.getsockname()[1])
        return ports


def free_port() -> int:
    return free_ports(1)[0]
