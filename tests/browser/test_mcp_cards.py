"""An MCP server's tool on the transcript page (docs/mcp.md, docs/web.md): its card reads as
the tool's own name with a small "MCP · <server>" label, the full name its hover title. The
name is read by the server's pattern (``mcpToolName`` in the page's configuration), whatever
runs the call: here a host tool's name, which no worker takes, so the card stays."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from .conftest import open_conversation, screenshot

pytestmark = pytest.mark.browser


def test_an_mcp_call_shows_its_tool_and_its_server(user_page, live_site):
    page = user_page
    cid = live_site.conversation("an MCP call")
    turn_id = live_site.user_says(cid, "mcp-u1", "what time is it?")
    live_site.assistant_calls(
        cid, turn_id, "mcp-a1", [("mcp__clock__get_time", {}), ("notes_lookup", {})]
    )
    open_conversation(page, cid)
    cards = page.locator("article.card")
    expect(cards).to_have_count(2)
    mcp = cards.nth(0)
    expect(mcp.locator("h3.tool-name")).to_have_text("get_time")
    expect(mcp.locator("h3.tool-name")).to_have_attribute("title", "mcp__clock__get_time")
    expect(mcp.locator(".tool-origin")).to_have_text("MCP · clock")
    expect(cards.nth(1).locator("h3.tool-name")).to_have_text("notes_lookup")
    expect(cards.nth(1).locator(".tool-origin")).to_have_count(0)
    screenshot(page, "mcp-card", full_page=False)
