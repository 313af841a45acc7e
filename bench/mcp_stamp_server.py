"""The stdio MCP server of bench/mcp.py's settlement figure, written with the official SDK: one
tool, ``stamp``, whose answer is the server's ``time.time()`` taken as it answers (the last
thing the tool does before the SDK writes its result to stdout).

    python bench/mcp_stamp_server.py        # serves stdio

Registered in Toolcore as the stdio server ``stamp`` (its tool ``mcp__stamp__stamp``), and
started again by the bench itself for the baseline: the same round trip with the SDK's client
alone.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

# bench/ is this script's folder, first on ``sys.path``, and holds bench/mcp.py: keep it off, so
# that ``import mcp`` finds the SDK.
HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]

from mcp.server.mcpserver import MCPServer  # noqa: E402
from mcp_types import ToolAnnotations  # noqa: E402

server = MCPServer("bench-stamp")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def stamp() -> str:
    """Answers the server's wall clock (``time.time()``) as it answers."""
    return f"{time.time():.6f}"


if __name__ == "__main__":
    server.run()
