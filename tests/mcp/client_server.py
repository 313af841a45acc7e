"""A tiny MCP server for the MCP client tests (tests/mcp/test_client_*.py), written with the
official SDK: ``python tests/mcp/client_server.py`` serves stdio, ``--http PORT`` Streamable
HTTP on 127.0.0.1 (refusing requests without the header ``X-Test-Token: $TEST_MCP_TOKEN``).

It records what the tests need to see in the file ``$TEST_MCP_RECORD`` (one line each): its
pid when it starts, ``started <tool>`` when a slow tool starts, and ``cancelled <tool>`` when
the client's ``notifications/cancelled`` stopped one.
"""

from __future__ import annotations

import os
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.utilities.types import Image
from mcp_types import (
    CallToolResult,
    EmbeddedResource,
    ResourceLink,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)

# The smallest PNG: 1 x 1, one transparent pixel.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)
READ_ONLY = ToolAnnotations(readOnlyHint=True)

server = MCPServer("toolcore-test")


def record(line: str) -> None:
    path = os.environ.get("TEST_MCP_RECORD")
    if path:
        with open(path, "a") as out:
            out.write(line + "\n")


@server.tool(annotations=READ_ONLY)
def echo(text: str) -> str:
    """Answers the text it was given."""
    return f"echo: {text}"


@server.tool()
def fail(message: str) -> CallToolResult:
    """Answers an error result (isError) with the message."""
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


async def _slow(tool: str, seconds: float) -> str:
    record(f"started {tool}")
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        record(f"cancelled {tool}")
        raise
    return f"slept {seconds}"


@server.tool(annotations=READ_ONLY)
async def nap(seconds: float) -> str:
    """Sleeps (read-only), then answers."""
    return await _slow("nap", seconds)


@server.tool()
async def work(seconds: float) -> str:
    """Sleeps as if it changed something, then answers."""
    return await _slow("work", seconds)


@server.tool(annotations=READ_ONLY)
def picture() -> list:
    """Answers a caption and a PNG."""
    return ["a tiny picture", Image(data=PNG, format="png")]


@server.tool(annotations=READ_ONLY)
def documents() -> list:
    """Answers an embedded text resource and a resource link."""
    return [
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(
                uri="file:///notes.txt", mime_type="text/plain", text="the notes"
            ),
        ),
        ResourceLink(
            type="resource_link", uri="file:///big.log", name="big.log", mime_type="text/plain"
        ),
    ]


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Adds a tool called ``name`` and tells the client its tools changed."""
    server.add_tool(lambda: f"I am {name}", name=name, description=f"Added at run time: {name}")
    await ctx.notify_tools_changed()
    return f"added {name}"


def _guarded(app):
    """The HTTP app, refusing requests without the expected header."""
    token = os.environ.get("TEST_MCP_TOKEN", "")

    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"x-test-token", b"").decode() != token:
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"no token"})
                return
        await app(scope, receive, send)

    return guarded


def main() -> None:
    record(f"pid {os.getpid()}")
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        import uvicorn

        app = _guarded(server.streamable_http_app())
        uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
    else:
        server.run()


if __name__ == "__main__":
    main()
