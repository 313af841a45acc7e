"""A settled call as an MCP ``CallToolResult`` (docs/mcp.md, "Results").

- ``content``: the model projection, exactly the text blocks the REST results give
  (``modelContent`` of the call's ``tool_call_response``), then one ``resource_link`` per asset
  of the call, its URL ``/api/v1/assets/{id}`` on the host the client reached;
- ``structuredContent``: ``{toolCallId, conversationId, outcome, exitCode, signal, asyncRunId,
  assetIds}``;
- ``isError``: the outcomes where the tool did not do its work: ``failed``, ``denied``,
  ``cancelled``, ``indeterminate``.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from django.db import connections

from .. import selectors
from ..exits import exit_of
from ..models import Asset

ERROR_OUTCOMES = frozenset({"failed", "denied", "cancelled", "indeterminate"})

# How an asset reads in a client's list of links.
_ASSET_TITLES = {
    "payload": "Complete result (JSON)",
    "report": "Report",
    "image": "Image",
    "stdout": "Standard output",
    "stderr": "Standard error",
    "output": "Output (stdout and stderr)",
    "overflow_recovery": "Output kept past the limit",
    "arguments": "Whole arguments (JSON)",
}


def asset_link(asset: Asset, base_url: str) -> types.ResourceLink:
    kind = asset.kind
    return types.ResourceLink(
        uri=f"{base_url}/api/v1/assets/{asset.pk}",
        name=f"{kind}-{asset.pk}",
        title=_ASSET_TITLES.get(kind, kind),
        mime_type=asset.media_type or None,
        size=asset.size,
    )


def result_parts(call_id: Any, payload: dict[str, Any]) -> dict[str, Any]:
    """What the answer needs besides the payload: the asset rows, how the command ended, its
    async run. Runs on a pool thread and gives its connection back."""
    try:
        ended = exit_of(call_id)
        return {
            "assets": selectors.assets_of(payload.get("assetIds") or []),
            "exitCode": ended.exit_code if ended is not None else None,
            "signal": (ended.signal or None) if ended is not None else None,
            "asyncRunId": selectors.async_run_id_of(call_id),
        }
    finally:
        connections.close_all()


def call_result(
    *,
    call_id: Any,
    conversation_id: Any,
    payload: dict[str, Any],
    parts: dict[str, Any],
    base_url: str,
) -> types.CallToolResult:
    outcome = payload["outcome"]
    content: list[types.ContentBlock] = [
        types.TextContent(text=block["text"])
        for block in payload.get("modelContent") or []
        if block.get("type") == "text"
    ]
    content += [asset_link(asset, base_url) for asset in parts["assets"]]
    structured = {
        "toolCallId": str(call_id),
        "conversationId": str(conversation_id),
        "outcome": outcome,
        "exitCode": parts["exitCode"],
        "signal": parts["signal"],
        "asyncRunId": parts["asyncRunId"],
        "assetIds": [str(a) for a in payload.get("assetIds") or []],
    }
    return types.CallToolResult(
        content=content, structured_content=structured, is_error=outcome in ERROR_OUTCOMES
    )


def refusal_result(text: str) -> types.CallToolResult:
    """A call Toolcore could not create (the conversation busy with another turn): an error
    the model reads, nothing recorded."""
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)
