"""The demo conversation in the browser, as the README's quick start walks through it: log in,
open it, see its cards, allow the bash call that awaits approval and watch it complete."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from .conftest import log_in, screenshot

pytestmark = pytest.mark.browser

DEMO_TITLE = "Demo: calls the worker runs, and one awaiting approval"
DEMO_TOOLS = ["notes_lookup", "ls", "read", "grep", "bash"]
RUN_SECONDS_MS = 30_000


def card(page, tool_name: str):
    return page.locator("article.card").filter(
        has=page.get_by_role("heading", name=tool_name, exact=True)
    )


def open_demo(page, live_site):
    page.goto(f"/c/{live_site.demo_conversation}/")
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    expect(page.locator("#connection")).to_have_text("Live")


def test_log_in_and_see_the_demo_conversation_with_its_cards(page, live_site):
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/$"))
    log_in(page, live_site)
    row = page.get_by_role("row").filter(has_text=DEMO_TITLE)
    expect(row).to_contain_text("Open turn")
    expect(row).to_contain_text("1 call waiting")
    screenshot(page, "conversations")

    row.get_by_role("link", name=DEMO_TITLE).click()
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    expect(page.get_by_role("heading", level=1)).to_have_text(DEMO_TITLE)
    expect(page.locator(".message-user")).to_contain_text(
        "What is in this project, and does it run?"
    )
    expect(page.locator(".message-assistant")).to_contain_text("Let me look around first")
    expect(page.locator("article.card h3")).to_have_text(DEMO_TOOLS)
    bash = card(page, "bash")
    expect(bash.locator(".badge")).to_have_text("?Awaiting approval")
    expect(bash.locator(".card-input")).to_contain_text("python3 src/app.py")
    expect(bash.get_by_role("button", name="Allow once")).to_be_visible()
    expect(bash.get_by_role("button", name=re.compile("^Always allow"))).to_be_visible()
    expect(bash.get_by_role("button", name="Deny")).to_be_visible()
    # The host call was settled by seed_demo; the path tools run in the embedded worker.
    expect(card(page, "notes_lookup").locator(".badge")).to_have_text("✓Completed")
    expect(card(page, "read").locator(".badge")).to_have_text("✓Completed", timeout=RUN_SECONDS_MS)
    expect(card(page, "read").locator(".card-preview")).to_contain_text("Demo project")
    expect(card(page, "grep").locator(".badge")).to_have_text("✓Completed", timeout=RUN_SECONDS_MS)
    expect(card(page, "grep").locator(".card-preview")).to_contain_text("notes.md:5:TODO")
    screenshot(page, "transcript-awaiting-approval")


def test_allow_the_awaiting_bash_call_and_watch_it_complete(user_page, live_site):
    page = user_page
    open_demo(page, live_site)
    bash = card(page, "bash")
    bash.get_by_role("button", name="Allow once").click()
    expect(bash.locator(".interaction.record")).to_contain_text("Allowed once by demo.")
    expect(bash.locator(".badge")).to_have_text("✓Completed", timeout=RUN_SECONDS_MS)
    expect(bash.locator(".card-preview")).to_contain_text("hello from the demo app")
    expect(bash.locator(".card-meta")).to_contain_text("Started")
    expect(bash.locator(".card-meta")).to_contain_text("Finished")
    screenshot(page, "transcript")
    page.reload()  # the approval asked and the answer recorded stay on the settled card
    bash = card(page, "bash")
    expect(bash.locator(".badge")).to_have_text("✓Completed")
    expect(bash.locator(".interaction.record")).to_contain_text("Approval asked.")
    expect(bash.locator(".interaction.record")).to_contain_text("Allowed once by demo.")
