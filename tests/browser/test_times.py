"""One time convention on every page and in the admin, seen from New York: each time reads in
UTC with its zone ("2026-11-29 23:43:01 UTC"), and on hover the reader's local time with its
zone ("2026-11-29 18:43:01 EST, your time (America/New_York)"); durations under a second in ms.
"""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import expect

from .conftest import log_in, open_page, screenshot

pytestmark = pytest.mark.browser

RUN_MS = 30_000
NEW_YORK = "America/New_York"
TIMES = """nodes => nodes.map(n => ({
  datetime: n.getAttribute("datetime"), text: n.textContent, title: n.getAttribute("title"),
}))"""


def convention(iso: str) -> tuple[str, str]:
    """What a <time> of ``iso`` shows, and its hover text, for a reader in New York."""
    moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    local = moment.astimezone(ZoneInfo(NEW_YORK))
    return (
        f"{moment:%Y-%m-%d %H:%M:%S} UTC",
        f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}, your time ({NEW_YORK})",
    )


def check_times(page, selector: str, at_least: int) -> list[dict]:
    expect(page.locator(selector).first).to_be_attached()
    times = page.locator(selector).evaluate_all(TIMES)
    assert len(times) >= at_least, times
    for time in times:
        assert (time["text"], time["title"]) == convention(time["datetime"]), time
    return times


@pytest.fixture
def new_york(chromium, live_site, request):
    page = open_page(chromium, live_site, request, timezone_id=NEW_YORK)
    log_in(page, live_site)
    yield page
    page.context.close()
    assert page.errors == []


def test_the_list_the_transcript_and_the_workbench_read_alike(new_york, live_site):
    page = new_york
    assert page.evaluate("Intl.DateTimeFormat().resolvedOptions().timeZone") == NEW_YORK
    cid = live_site.conversation("times from new york")
    turn = live_site.user_says(cid, "u1", "what time is it?")
    live_site.api("POST", f"/conversations/{cid}/turns/{turn}/end")  # commands wait for it

    page.goto(f"/c/{cid}/")
    expect(page.locator("#connection")).to_have_text("Live")
    page.get_by_label(re.compile("Run a !command")).fill("!true")
    page.get_by_role("button", name="Run", exact=True).click()
    card = page.locator("article.card")
    expect(card.locator(".badge")).to_have_text("✓Completed", timeout=RUN_MS)
    expect(card.locator(".card-meta")).to_contain_text("Finished")
    # A message's time, and the card's start and finish.
    check_times(page, "#items time", at_least=3)
    took = card.locator(".card-meta .times").inner_text()
    assert re.search(r"took (\d{1,3} ms|\d\.\d s|\d+ s)$", took) and "took 0 s" not in took, took
    screenshot(page, "times-transcript-new-york")

    page.goto("/")
    row = page.get_by_role("row").filter(has_text="times from new york")
    (shown,) = check_times(page, f'tr:has(a[href="/c/{cid}/"]) time', at_least=1)
    expect(row).to_contain_text(shown["text"])

    page.goto("/workbench/")
    expect(page.locator("#connection")).to_have_text("Live")
    page.get_by_label("Name").fill("clock")
    page.get_by_label("Command").fill("true")
    page.get_by_role("button", name="Start").click()
    row = page.get_by_role("row").filter(has_text="clock")
    expect(row.locator(".badge")).to_have_text("✓Exited 0", timeout=RUN_MS)
    check_times(page, 'tr:has-text("clock") time', at_least=2)  # start and end


def test_the_admin_reads_alike(new_york, live_site):
    page = new_york
    cid = live_site.conversation("admin times")
    turn = live_site.user_says(cid, "u1", "list it")
    (call_id,) = live_site.assistant_calls(cid, turn, "a1", [("bash", {"command": "ls"})])
    page.goto(f"/admin/conversations/toolcall/{call_id}/change/")
    check_times(page, "#call-summary time", at_least=1)
    check_times(page, "#call-timeline time", at_least=2)
    page.goto("/admin/")
    check_times(page, "#support-console time", at_least=1)


def test_a_23_ms_call_says_so(new_york, live_site):
    page = new_york
    page.goto(f"/c/{live_site.demo_conversation}/")
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    meta = page.evaluate(
        """() => {
             const card = new Toolcore.Card("x-fast", { wantResponse() {}, announce() {} });
             card.setState({
               toolCallId: "x-fast", turnId: "t", toolName: "bash", status: "completed",
               startedAt: "2026-11-29T23:43:01.000Z", finishedAt: "2026-11-29T23:43:01.023Z",
             });
             return card.el.querySelector(".card-meta .times").textContent;
           }"""
    )
    assert meta == ("Started 2026-11-29 23:43:01 UTCFinished 2026-11-29 23:43:01 UTCtook 23 ms"), (
        meta
    )
