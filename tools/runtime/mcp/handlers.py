"""The handler the tool workers run for every ``mcp__<server>__<tool>`` call (docs/mcp.md).

It reads the server as it is now (disabled, deleted or another owner's since supervision: the
call settles ``failed``, nothing was sent), calls the tool through the process's session of
that server (``sessions.py``) with ``TOOLCORE_MCP_CALL_TIMEOUT``, and maps the answer
(``results.py``). When the server cannot tell what became of the call (it timed out, or the
connection ended during it), a read-only tool settles ``failed`` (it had no effect) and any
other ``indeterminate`` (it may have had one), each with a reason naming the server. A cancel
of the call cancels the request, which sends the server ``notifications/cancelled``.
"""

from __future__ import annotations

import asyncio

from django.conf import settings

from conversations.services.settlement import INDETERMINATE_REASON
from tools.catalog import mcp_tool_parts, tool_spec

from ..base import CallContext, HandlerResult, ToolError
from .server_config import ServerConfig
from .services import McpUnavailable, mcp_ready_tools, mcp_server_for_call


def _unknown(ctx: CallContext, server: str, why: str) -> HandlerResult:
    """The server could not say what became of the call: ``failed`` for a read-only tool,
    ``indeterminate`` for any other."""
    if tool_spec(ctx.tool_name).replay_safe:
        return HandlerResult(outcome="failed", reason=f"MCP server “{server}” {why}")
    return HandlerResult(
        outcome="indeterminate", reason=f"{INDETERMINATE_REASON} MCP server “{server}” {why}"
    )


async def mcp_call(ctx: CallContext) -> HandlerResult:
    """Run one MCP tool call on its server and settle what it answered."""
    # The SDK loads with the process's first MCP call: a worker that never makes one does not
    # pay its second of imports at start.
    from mcp.shared.exceptions import MCPError

    from .connection import error_text
    from .results import result_of
    from .sessions import CallTimedOut, ConnectFailed, ServerGone, mcp_sessions

    parts = mcp_tool_parts(ctx.tool_name)
    if parts is None:
        raise ToolError(f"{ctx.tool_name} is not the name of an MCP server's tool.")
    server, tool = parts
    try:
        config: ServerConfig = await ctx.sync(
            mcp_server_for_call, name=server, owner_id=ctx.owner_id
        )
    except McpUnavailable as exc:
        raise ToolError(str(exc)) from None
    timeout = settings.TOOLCORE_MCP_CALL_TIMEOUT
    try:
        answer = await mcp_sessions().call(config, tool, ctx.arguments, timeout=timeout)
    except ConnectFailed as exc:
        raise ToolError(f"MCP server “{server}” could not be started or reached: {exc}") from None
    except CallTimedOut:
        return _unknown(
            ctx,
            server,
            f"did not answer within {timeout:g} s (TOOLCORE_MCP_CALL_TIMEOUT); it was told to stop.",
        )
    except ServerGone:
        return _unknown(
            ctx,
            server,
            "stopped or hung up during the call; the next call starts it again.",
        )
    except MCPError as exc:
        # A protocol error (an unknown tool, arguments it refused): it did not run the tool.
        raise ToolError(
            f"MCP server “{server}” refused the call ({exc.error.code}): {exc.error.message}"
        ) from None
    except Exception as exc:  # noqa: BLE001 - an answer the SDK could not read
        # It answered, so the tool ran, but what it did cannot be read (a result that breaks
        # the protocol, structured content against its own schema).
        return _unknown(
            ctx, server, f"answered in a form that could not be read ({error_text(exc)})."
        )
    return await asyncio.to_thread(
        result_of, answer, server=server, tool=tool, folder=ctx.attempt_dir
    )


def claimable() -> list[str]:
    """The MCP calls a worker may claim now (``base.HandlerFamily``)."""
    return mcp_ready_tools()
