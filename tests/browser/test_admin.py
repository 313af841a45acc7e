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
