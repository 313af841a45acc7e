"""Browser tests: Playwright for Python driving Debian's Chromium against a live daphne.

Marked ``browser``. Where ``/usr/bin/chromium`` is missing they are skipped, and the run says
so at its end; ``.ci/run`` installs Chromium with apt, so CI always runs them. Playwright's own
browser downloads are never used (``playwright install`` is not needed). Screenshots go to
``test-output/screenshots/`` (``TOOLCORE_TEST_OUTPUT`` moves ``test-output``); the README's
images are made by ``test_command_exits.py`` with ``TOOLCORE_README_IMAGES=1``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from .site import ROOT, LiveSite

CHROMIUM = Path("/usr/bin/chromium")
SKIP_REASON = f"Chromium not found at {CHROMIUM}: browser tests skipped"
# The machine's network is closed: without the background-networking flags Chromium stalls.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 15_000
OUTPUT = Path(os.environ.get("TOOLCORE_TEST_OUTPUT") or ROOT / "test-output")
SCREENSHOTS = OUTPUT / "screenshots"
README_IMAGES = ROOT / "docs" / "img"


def chromium_present() -> bool:
    return CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)


def pytest_collection_modifyitems(config, items):
    if chromium_present():
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not chromium_present():
        terminalreporter.write_line(f"{SKIP_REASON} (apt-get install chromium)", yellow=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(autouse=True)
def _clean_channel_layer():
    """Replaces the suite's: browser tests use no channel layer of the test process (and
    Playwright's event loop runs in this thread, where ``async_to_sync`` cannot)."""
    yield


@pytest.fixture(scope="package")
def live_site(tmp_path_factory) -> Iterator[LiveSite]:
    """The seeded demo served by a daphne, once for every browser test (they run in one worker,
    tests/parallel.py): its set-up takes about ten seconds (``seed_demo`` and a daphne started),
    and each test resets what it needs by making conversations of its own."""
    if not chromium_present():
        pytest.skip(SKIP_REASON)
    site = LiveSite(tmp_path_factory.mktemp("browser-site"))
    try:
        yield site.create().start()
    finally:
        site.close()


@pytest.fixture(scope="package")
def chromium() -> Iterator:
    """Chromium, started once for every browser test (a few seconds); each test gets a new
    context of its own (``open_page``): no cookie, storage or page carries over."""
    if not chromium_present():
        pytest.skip(SKIP_REASON)
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
    try:
        yield browser
    finally:
        browser.close()
        playwright.stop()


def screenshot(page, name: str, *, full_page: bool = True) -> Path:
    """A screenshot (of the whole page by default) into the test output folder; its path."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


def readme_image(page, name: str, *, full_page: bool = True) -> Path:
    """A screenshot the README shows: into the test output as ``readme-<name>.png``, and over
    ``docs/img/<name>.png`` when ``TOOLCORE_README_IMAGES=1`` (how those are made again)."""
    path = screenshot(page, f"readme-{name}", full_page=full_page)
    if os.environ.get("TOOLCORE_README_IMAGES") == "1":
        shutil.copyfile(path, README_IMAGES / f"{name}.png")
    return path


def open_page(chromium, live_site: LiveSite, request, **options):
    """A new browser context and page on the site; JavaScript errors are collected in
    ``page.errors`` (a test fails on any)."""
    context = chromium.new_context(
        base_url=live_site.url, viewport={"width": 1280, "height": 900}, **options
    )
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    return page


def log_in(page, live_site: LiveSite, next_path: str = "/") -> None:
    page.goto(f"/accounts/login/?next={next_path}")
    page.get_by_label("Username").fill(live_site.username)
    page.get_by_label("Password").fill(live_site.password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"**{next_path}")


def open_conversation(page, cid: str) -> None:
    """The conversation's page, once it is ready and its socket live."""
    from playwright.sync_api import expect

    page.goto(f"/c/{cid}/")
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    expect(page.locator("#connection")).to_have_text("Live")


@pytest.fixture
def page(chromium, live_site, request):
    """A logged-out page; on a failed test, a screenshot named after it."""
    page = open_page(chromium, live_site, request)
    yield page
    failed = getattr(request.node, "report_call", None)
    if failed is not None and failed.failed:
        screenshot(page, f"failed-{request.node.name}")
    page.context.close()
    assert page.errors == [], f"JavaScript errors: {page.errors}"


@pytest.fixture
def user_page(page, live_site):
    """A page logged in as the demo user, on the conversation list."""
    log_in(page, live_site)
    return page
