"""What connecting to one MCP server needs (``ServerConfig``), apart from the connection itself
(``connection.py``): the modules that only read and pass it on (``services.py``, the admin,
the worker's handler) do not import the SDK, which costs more than a second of start-up to
every process, a command's or a worker's, that never connects to a server.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ServerConfig:
    """What connecting to a server needs, secrets opened (never in its ``repr``)."""

    id: int
    name: str
    transport: str
    command: str = ""
    arguments: tuple[str, ...] = ()
    url: str = ""
    environment: dict[str, str] = field(default_factory=dict, repr=False, compare=False)
    headers: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def fingerprint(self) -> str:
        """Changes whenever anything the connection uses changes (a session made for another
        fingerprint is replaced)."""
        material = json.dumps(
            [
                self.transport,
                self.command,
                self.arguments,
                self.url,
                self.environment,
                self.headers,
            ],
            sort_keys=True,
        )
        return hashlib.sha256(material.encode()).hexdigest()
