"""The workbench: start a launch, read its log live and page back through older lines by
scrolling up, stop it; every change arrives over /ws/workbench/, and the status line says when
the page is live."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from .conftest import screenshot

pytestmark = pytest.mark.browser

RUN_MS = 30_000


def start(page, name: str, command: str) -> None:
    page.get_by_label("Name").fill(name)
    page.get_by_label("Command").fill(command)
    page.get_by_role("button", name="Start").click()
    expect(page.locator("#launch-status")).to_have_text(f"Started {name}.")


def line_numbers(page) -> list[int]:
    return page.locator("#log-lines .n").evaluate_all(
        "nodes => nodes.map(n => Number(n.textContent))"
    )


def open_workbench(page) -> None:
    page.goto("/workbench/")
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    expect(page.locator("#connection")).to_have_text("Live")


def test_the_status_line_says_live_and_again_after_each_reconnect(user_page, live_site):
    page = user_page
    open_workbench(page)
    socket = "Toolcore.page.socket"
    assert page.evaluate(f"{socket}.delay") == 500
    for _ in range(2):
        page.evaluate(f"{socket}.drop()")
        expect(page.locator("#connection")).to_have_text("Reconnecting…")
        expect(page.locator("#connection")).to_have_attribute("data-state", "open")
        expect(page.locator("#connection")).to_have_text("Live")
        # Live again: the next drop is retried after half a second again, not after longer.
        assert page.evaluate(f"{socket}.delay") == 500
    # And it is live indeed: a launch started elsewhere (the API) shows up.
    live_site.api("POST", "/launches", {"name": "from the api", "command": "true"})
    row = page.get_by_role("row").filter(has_text="from the api")
    expect(row.locator(".badge")).to_have_text("✓Exited 0", timeout=RUN_MS)


def test_a_launch_streams_its_log_and_ends(user_page):
    page = user_page
    open_workbench(page)
    start(page, "ticker", "for i in $(seq 1 30); do echo tick $i; sleep 0.05; done")
    row = page.get_by_role("row").filter(has_text="ticker")
    expect(page.locator("#log-lines")).to_contain_text("tick 30", timeout=RUN_MS)
    expect(row.locator(".badge")).to_have_text("✓Exited 0", timeout=RUN_MS)
    assert line_numbers(page) == list(range(1, 31))
    page.get_by_text("Summary at exit").click()
    expect(page.locator("#log-summary")).to_contain_text("tick 30")


def test_page_back_through_a_long_log_and_stop_the_launch(user_page):
    page = user_page
    open_workbench(page)
    start(page, "long log", "seq 1 1500; sleep 60")
    expect(page.locator("#log-lines")).to_contain_text("1500", timeout=RUN_MS)
    view = page.locator("#log-view")
    # Scrolling up loads older pages until the first line.
    for _ in range(20):
        if line_numbers(page)[0] == 1:
            break
        view.evaluate("node => { node.scrollTop = 0; node.dispatchEvent(new Event('scroll')); }")
        page.wait_for_timeout(150)
    assert line_numbers(page) == list(range(1, 1501))
    texts = page.locator("#log-lines li").evaluate_all(
        "nodes => nodes.map(n => n.lastChild.textContent)"
    )
    assert texts == [str(n) for n in range(1, 1501)]
    row = page.get_by_role("row").filter(has_text="long log")
    expect(row.locator(".badge")).to_have_text("◌Running")
    screenshot(page, "workbench")
    row.get_by_role("button", name="Stop long log").click()
    expect(row.locator(".badge")).to_have_text("■Stopped", timeout=RUN_MS)
    expect(row.get_by_role("button", name="Stop long log")).to_have_count(0)
    # Styled (it was plain text on the selected row): its own colours, set off from the row.
    assert row.get_attribute("aria-selected") == "true"
    colours = row.locator(".badge").evaluate(
        """(badge) => {
             const style = getComputedStyle(badge);
             const rowBackground = getComputedStyle(badge.closest("tr")).backgroundColor;
             return [style.backgroundColor, style.boxShadow, rowBackground];
           }"""
    )
    background, ring, row_background = colours
    assert background not in ("rgba(0, 0, 0, 0)", row_background), colours
    assert ring != "none", colours


def test_a_stop_answered_after_the_launch_ended_leaves_it_stopped(user_page):
    """The stop's answer (the launch as it was, still running) can reach the page after the
    socket's launch.changed that ended it; the page keeps the end. Here the answer is held back
    until the socket has told it."""
    page = user_page
    open_workbench(page)
    start(page, "quick stop", "sleep 60")
    row = page.get_by_role("row").filter(has_text="quick stop")
    expect(row.locator(".badge")).to_have_text("◌Running", timeout=RUN_MS)

    # The stop goes to the server at once; its answer is given to the page only later.
    held = []
    page.route("**/api/v1/launches/*/stop", lambda route: held.append((route, route.fetch())))
    row.get_by_role("button", name="Stop quick stop").click()
    expect(row.locator(".badge")).to_have_text("■Stopped", timeout=RUN_MS)
    ((route, answer),) = held
    assert answer.json()["status"] == "running"  # what the late answer says
    route.fulfill(response=answer)
    page.wait_for_timeout(500)
    expect(row.locator(".badge")).to_have_text("■Stopped")
