"""How a command ended, where people see it: a card reads ``Exit 3``, ``Killed by SIGKILL`` or
``Timed out after 1 s`` and is not styled as a success (its outcome stays ``completed``), live
and after a reload; exit 0 stays green; Details says it; a background run's end reaches its
call's card; the admin's call page says it too.

The scenes here are also the README's screenshots: ``TOOLCORE_README_IMAGES=1`` writes them to
``docs/img/`` (docs/web.md, "Browser tests").
"""

from __future__ import annotations

import time

import pytest
from playwright.sync_api import expect

from .conftest import log_in, open_conversation, readme_image, screenshot

pytestmark = pytest.mark.browser

RUN_MS = 30_000

# (tool arguments, what its card's badge reads once it ended)
COMMANDS = [
    ({"command": "echo 'all 12 tests passed'"}, "✓Completed"),
    ({"command": "echo 'test_parse ... FAILED' >&2; exit 3"}, "✕Exit 3"),
    ({"command": "echo 'starting the server'; kill -9 $$"}, "✕Killed by SIGKILL"),
    ({"command": "echo 'waiting for the lock'; sleep 5", "timeout": 1}, "✕Timed out after 1 s"),
    ({"command": "sleep 1; echo 'build failed'; exit 4", "run_in_background": True}, "✕Exit 4"),
]

# Every badge a card shows, in order, from the first render on (a MutationObserver): a card that
# ends in `Exit 3` must never have shown a green "Completed" on the way.
WATCH_BADGES = """() => {
  window.badgeHistory = {};
  const note = () => {
    for (const card of document.querySelectorAll("article.card[data-call-id]")) {
      const badge = card.querySelector(".badge");
      if (!badge) continue;
      const seen = (window.badgeHistory[card.dataset.callId] ||= []);
      const now = `${badge.className}|${badge.textContent}`;
      if (seen[seen.length - 1] !== now) seen.push(now);
    }
  };
  new MutationObserver(note).observe(document.body, { subtree: true, childList: true, characterData: true });
  note();
}"""


def card_of(page, call_id: str):
    return page.locator(f'article.card[data-call-id="{call_id}"]')


def background_of(locator) -> str:
    return locator.evaluate("node => getComputedStyle(node).backgroundColor")


def ask_for_commands(live_site) -> tuple[str, list[str]]:
    cid = live_site.conversation("Run the checks")
    turn = live_site.user_says(cid, "u1", "Run the checks and start the server, please.")
    ids = live_site.assistant_calls(
        cid,
        turn,
        "a1",
        [("bash", arguments) for arguments, _ in COMMANDS],
        text="Running the checks, the server and a background build.",
    )
    return cid, ids


def allow(live_site, ids: list[str]) -> None:
    for number, call_id in enumerate(ids):
        body = {"requestId": f"allow-{number}", "kind": "approval", "decision": "allow"}
        live_site.api("POST", f"/tool-calls/{call_id}/resolution", body)


def wait_exit(live_site, call_id: str, seconds: float = 30) -> dict:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ended = live_site.api("GET", f"/tool-calls/{call_id}/details")["exit"]
        if ended is not None:
            return ended
        time.sleep(0.1)
    raise AssertionError(f"no exit for {call_id} in {seconds} s")


def expect_ended(page, ids: list[str]) -> None:
    """Each card's badge as COMMANDS says; only exit 0 styled as a success."""
    green = None
    for call_id, (_, badge) in zip(ids, COMMANDS, strict=True):
        card = card_of(page, call_id)
        expect(card.locator(".badge")).to_have_text(badge, timeout=RUN_MS)
        expect(card).to_have_attribute("data-status", "completed")  # the outcome stays
        if badge == "✓Completed":
            expect(card.locator(".badge")).to_have_class("badge badge-completed")
            expect(card).to_have_attribute("data-exit", "succeeded")
            green = background_of(card.locator(".badge"))
        else:
            expect(card.locator(".badge")).to_have_class("badge badge-exit")
            expect(card).to_have_attribute("data-exit", "unsuccessful")
            assert background_of(card.locator(".badge")) != green, badge


def test_a_commands_card_says_how_it_ended_live_and_after_a_reload(user_page, live_site):
    page = user_page
    cid, ids = ask_for_commands(live_site)
    open_conversation(page, cid)
    page.evaluate(WATCH_BADGES)
    allow(live_site, ids)
    expect_ended(page, ids)  # live: each card learned its end as it settled
    history = page.evaluate("window.badgeHistory")
    for call_id in ids[1:4]:  # the foreground commands that did not succeed
        seen = history[call_id]
        assert not any("badge-completed" in entry for entry in seen), seen
    # The background command settled at once (it went on as an async run) and was green until
    # its run ended; then its card read the run's end.
    assert any("badge-completed" in entry for entry in history[ids[4]]), history[ids[4]]

    # Details says it too.
    failing = card_of(page, ids[1])
    failing.get_by_role("button", name="Details of bash").click()
    expect(failing.locator(".card-details .exit")).to_have_text("Process: Exit 3")
    expect(failing.locator(".card-details")).to_contain_text("Outcome: completed")
    background = card_of(page, ids[4])
    background.get_by_role("button", name="Details of bash").click()
    expect(background.locator(".card-details .exit")).to_have_text(
        f"Process (async run {live_site.call(ids[4])['response']['payload']['asyncRunId']}): Exit 4"
    )

    # After a reload the history page says how each ended: no details read needed.
    details_reads: list[str] = []
    page.on("request", lambda r: details_reads.append(r.url) if "/details" in r.url else None)
    page.reload()
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    expect_ended(page, ids)
    assert details_reads == []
    card_of(page, ids[1]).get_by_role("button", name="Details of bash").click()
    expect(card_of(page, ids[1]).locator(".card-details .exit")).to_have_text("Process: Exit 3")
    screenshot(page, "command-exits")
    readme_image(page, "transcript")


def test_the_admin_call_page_says_how_a_command_ended(page, live_site):
    cid, ids = ask_for_commands(live_site)
    allow(live_site, ids)
    for call_id in ids:
        live_site.wait_settled(call_id)
    wait_exit(live_site, ids[4])  # the background run's end
    log_in(page, live_site, f"/admin/conversations/toolcall/{ids[1]}/change/")
    summary = page.locator("#call-summary")
    expect(summary.locator("h2")).to_have_text("Settled: completed · Exit 3")
    expect(page.locator("#call-status")).to_have_text("completed")
    expect(page.locator("#call-exit")).to_have_text("Exit 3")
    readme_image(page, "admin-call", full_page=False)  # the summary band and what follows
    page.goto(f"/admin/conversations/toolcall/{ids[2]}/change/")
    expect(page.locator("#call-exit")).to_have_text("Killed by SIGKILL")
    page.goto(f"/admin/conversations/toolcall/{ids[3]}/change/")
    expect(page.locator("#call-exit")).to_have_text("Timed out after 1 s")
    page.goto(f"/admin/conversations/toolcall/{ids[0]}/change/")
    expect(page.locator("#call-exit")).to_have_text("Exit 0")
    expect(summary.locator("h2")).to_have_text("Settled: completed")
    # The support console lists the ones that did not succeed under "Non-zero exits".
    page.goto("/admin/")
    exits = page.locator("#console-exits")
    for call_id in ids[1:]:
        expect(exits.locator(f'a[href$="/toolcall/{call_id}/change/"]')).to_have_count(1)
    expect(exits.locator(f'a[href$="/toolcall/{ids[0]}/change/"]')).to_have_count(0)
    failures = page.locator("#console-failures")
    for call_id in ids:
        expect(failures.locator(f'a[href$="/toolcall/{call_id}/change/"]')).to_have_count(0)
