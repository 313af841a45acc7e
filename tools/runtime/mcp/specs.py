"""The MCP servers' tools in the catalog: the provider ``tools/catalog.py`` consults for the
names ``mcp__<server>__<tool>`` (registered at start by ``services.register``).

Every process keeps the entries in memory and reads the servers again when they changed: at
most once every ``CHECK_SECONDS`` it asks the database for the servers' count, highest id and
the sum of their ``version`` (one aggregate over a small table), which every change of a server
or of its tools moves (``services.py``). A change made in this process is seen at once (the
services drop the cache after their commit); one made in another process within
``CHECK_SECONDS``.

The entry of an MCP tool: its server's input schema, default decision ``ask``, risk ``read``
when the server annotates it ``readOnlyHint: true`` and ``execute`` otherwise (never replayed,
and approving it needs ``tools.run_commands``), kind ``read`` or ``other``, profile
``conservative_fallback``, no rule subject. A name of a registered server that it does not list,
or of a disabled server, has an entry with a ``refusal``: supervision settles the call
``failed``. A server name nobody registered is not Toolcore's: a host tool, as before.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import SynchronousOnlyOperation
from django.db.models import Count, Max, Sum

from tools.catalog import ToolSpec, mcp_tool_name, mcp_tool_parts
from tools.models import McpServer, McpTool

CHECK_SECONDS = 1.0
PROFILE = "conservative_fallback"
_UNKNOWN_SCHEMA: dict[str, Any] = {"type": "object"}


@dataclass(frozen=True)
class ServerEntry:
    id: int
    name: str
    enabled: bool
    owner_id: int | None
    listed_at: Any


def tool_risk(annotations: dict[str, Any]) -> str:
    """``read`` for a tool its server annotates read-only, else ``execute``."""
    return "read" if annotations.get("readOnlyHint") is True else "execute"


def _spec(server: ServerEntry, tool: McpTool) -> ToolSpec:
    risk = tool_risk(tool.annotations or {})
    return ToolSpec(
        name=mcp_tool_name(server.name, tool.name),
        schema=tool.input_schema or _UNKNOWN_SCHEMA,
        risk=risk,
        default_decision="ask",
        profile=PROFILE,
        kind="read" if risk == "read" else "other",
        core=False,
        description=tool.description,
        offered_to=server.owner_id,
        refusal=None if server.enabled else _disabled(server.name),
    )


def _disabled(server: str) -> str:
    return f"MCP server “{server}” is disabled."


class McpCatalog:
    """The entries of every registered server's tools, kept fresh by the version check."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple[Any, ...] | None = None
        self._checked = float("-inf")
        self._servers: dict[str, ServerEntry] = {}
        self._specs: dict[str, ToolSpec] = {}

    def invalidate(self) -> None:
        """Read the servers again at the next use (a change was just committed here)."""
        with self._lock:
            self._checked = float("-inf")
            self._key = None

    def _fresh(self) -> None:
        now = time.monotonic()
        if now - self._checked < CHECK_SECONDS:
            return
        try:
            summary = McpServer.objects.aggregate(n=Count("id"), top=Max("id"), v=Sum("version"))
        except SynchronousOnlyOperation:
            return  # called on an event loop: the entries as they are
        key = (summary["n"], summary["top"], summary["v"])
        with self._lock:
            self._checked = now
            if key == self._key:
                return
        servers = {
            s.name: s
            for s in (
                ServerEntry(row.id, row.name, row.enabled, row.owner_id, row.tools_listed_at)
                for row in McpServer.objects.all()
            )
        }
        by_id = {s.id: s for s in servers.values()}
        specs = {}
        for tool in McpTool.objects.filter(server_id__in=list(by_id)):
            spec = _spec(by_id[tool.server_id], tool)
            specs[spec.name] = spec
        with self._lock:
            self._servers, self._specs, self._key = servers, specs, key

    def spec(self, name: str) -> ToolSpec | None:
        """The entry of ``name``; None when its server is not registered (a host tool)."""
        parts = mcp_tool_parts(name)
        if parts is None:
            return None
        self._fresh()
        server = self._servers.get(parts[0])
        if server is None:
            return None
        spec = self._specs.get(name)
        if spec is not None:
            return spec
        when = server.listed_at.strftime("%Y-%m-%d %H:%M:%S UTC") if server.listed_at else None
        listed = f"it last listed its tools at {when}" if when else "its tools were never listed"
        return ToolSpec(
            name=name,
            schema=_UNKNOWN_SCHEMA,
            risk="execute",
            default_decision="ask",
            profile=PROFILE,
            core=False,
            offered_to=server.owner_id,
            refusal=(
                _disabled(server.name)
                if not server.enabled
                else f"MCP server “{server.name}” has no tool “{parts[1]}” ({listed})."
            ),
        )

    def listing(self) -> list[ToolSpec]:
        """The tools of the enabled servers."""
        self._fresh()
        return [spec for spec in self._specs.values() if spec.refusal is None]

    def server_names(self) -> frozenset[str]:
        """Every registered server's name, enabled or not."""
        self._fresh()
        return frozenset(self._servers)


CATALOG = McpCatalog()
