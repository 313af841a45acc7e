"""Support staff approve a waiting call from the admin console, and the user's transcript,
open meanwhile, shows it run to completion live."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from .conftest import log_in, screenshot

pytestmark = pytest.mark.browser

RUN_MS = 30_000


def test_approve_from_the_admin_console(page, live_site):
    cid = live_site.conversation("approved by support")
    turn = live_site.user_says(cid, "u1", "what time is it?")
    (call_id,) = live_site.assistant_calls(
        cid, turn, "a1", [("bash", {"command": "echo it is late"})]
    )

    log_in(page, live_site, f"/c/{cid}/")
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    card = page.locator(f'article.card[data-call-id="{call_id}"]')
    expect(card.locator(".badge")).to_have_text("?Awaiting approval")

    admin = page.context.new_page()
    admin.goto(f"/admin/conversations/toolcall/{call_id}/change/")
    expect(admin.get_by_text("echo it is late").first).to_be_visible()
    screenshot(admin, "admin-call")
    admin.get_by_role("button", name="Approve", exact=True).click()
    expect(admin.locator(".messagelist, .messages, [role=alert]").first).to_contain_text(
        re.compile("approved", re.I)
    )
    admin.close()

    expect(card.locator(".badge")).to_have_text("✓Completed", timeout=RUN_MS)
    expect(card.locator(".card-preview")).to_contain_text("it is late")
    payload = live_site.call(call_id)["response"]["payload"]
    assert payload["resolution"]["decision"] == "allow" and payload["resolvedBy"] == "demo"


def test_no_page_asks_for_a_missing_icon(page, live_site):
    """Every admin page logged a 404 for /favicon.ico: the pages and the admin link the icon,
    and the root answers for what asks it there (the API docs, a browser showing JSON)."""
    logged = len(live_site.server.stderr())
    missing = []
    page.on("response", lambda answer: missing.append(answer.url) if answer.status == 404 else 0)
    log_in(page, live_site)
    paths = ["/", "/workbench/", f"/c/{live_site.demo_conversation}/", "/admin/"]
    for path in [*paths, "/admin/tools/launch/", "/admin/tools/leftprocess/", "/api/v1/docs"]:
        page.goto(path)
        page.wait_for_load_state("networkidle")
        if path in paths:
            linked = page.evaluate("document.querySelector('link[rel=icon]').href")
            answer = page.request.get(linked)
            assert answer.status == 200 and answer.headers["content-type"] == "image/svg+xml"
    icon = page.request.get("/favicon.ico")
    assert icon.status == 200 and icon.headers["content-type"] == "image/x-icon"
    assert missing == []
    assert "Not Found" not in live_site.server.stderr()[logged:]
