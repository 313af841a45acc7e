"""Accessibility of the pages: WCAG AA contrast of every status, button and text style in the
light and the dark scheme, controls that all have a name, the approval card used from the
keyboard alone, and no animation for those who ask for reduced motion."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from .conftest import log_in, open_page, screenshot

pytestmark = pytest.mark.browser

RUN_MS = 30_000
STATUSES = [
    "pending",
    "awaiting_approval",
    "in_progress",
    "awaiting_input",
    "completed",
    "failed",
    "declined",
    "cancelled",
    "indeterminate",
]
# The workbench's launch badges use the cards' styles, and one of their own: a stopped launch.
LAUNCH_ONLY_STYLES = ["stopped"]

# Samples of every text style the pages use, built with the pages' own classes, then measured:
# the contrast ratio of each against its background. Normal text needs 4.5:1; the focus ring (a
# graphic) 3:1.
SAMPLES = """(statuses) => {
  const box = document.createElement("div");
  box.id = "contrast-samples";
  const add = (html) => { const d = document.createElement("div"); d.innerHTML = html; box.append(d); };
  for (const s of statuses) add(`<span class="badge badge-${s}" data-sample="badge-${s}"><span class="badge-icon">·</span><span class="badge-label">${s}</span></span>`);
  // A command's end on a completed card (not a status of its own): not succeeded, and being read.
  add('<span class="badge badge-exit" data-sample="badge-exit"><span class="badge-icon">✕</span><span class="badge-label">Exit 3</span></span>');
  add('<span class="badge badge-checking" data-sample="badge-checking"><span class="badge-icon">✓</span><span class="badge-label">Completed</span></span>');
  add('<p class="muted" data-sample="muted">muted</p>');
  add('<a href="#" data-sample="link">link</a>');
  add('<button class="primary" data-sample="primary">primary</button>');
  add('<button class="danger" data-sample="danger">danger</button>');
  add('<button data-sample="button">button</button>');
  add('<button class="quiet" data-sample="quiet">quiet</button>');
  add('<p class="omitted" data-sample="omitted">[1.0 KiB of output not shown]</p>');
  add('<span class="pill pill-open" data-sample="pill-open">open</span>');
  add('<span class="pill pill-waiting" data-sample="pill-waiting">waiting</span>');
  for (const s of ["connecting", "open", "reconnecting", "closed"]) add(`<p class="connection" data-state="${s}" data-sample="connection-${s}">${s}</p>`);
  add('<div class="card"><pre class="output" data-sample="code">code</pre></div>');
  add('<div class="message message-user"><span class="role" data-sample="user-role">You</span></div>');
  add('<div class="interaction"><p data-sample="interaction">asked</p></div>');
  add('<div class="interaction record"><p data-sample="record">answered</p></div>');
  document.querySelector("main").append(box);

  const rgb = (text) => {
    const m = text.match(/rgba?\\(([^)]+)\\)/);
    if (!m) return null;
    const [r, g, b, a] = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number);
    return { r, g, b, a: a === undefined ? 1 : a };
  };
  const lum = ({ r, g, b }) => {
    const f = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
  const background = (node) => {
    for (let n = node; n; n = n.parentElement) {
      const c = rgb(getComputedStyle(n).backgroundColor);
      if (c && c.a > 0) return c;
    }
    return rgb(getComputedStyle(document.documentElement).backgroundColor);
  };
  const out = {};
  for (const node of box.querySelectorAll("[data-sample]")) {
    out[node.dataset.sample] = Math.round(ratio(rgb(getComputedStyle(node).color), background(node)) * 100) / 100;
  }
  const body = document.body;
  out.body = Math.round(ratio(rgb(getComputedStyle(body).color), background(body)) * 100) / 100;
  const focus = rgb(getComputedStyle(document.documentElement).getPropertyValue("--focus").trim().replace(/^#(..)(..)(..)$/, (_, r, g, b) => `rgb(${parseInt(r, 16)}, ${parseInt(g, 16)}, ${parseInt(b, 16)})`));
  out.focus = Math.round(ratio(focus, background(body)) * 100) / 100;
  const badges = [...box.querySelectorAll(".badge[data-sample^='badge-']")].filter((n) => !["badge-exit", "badge-checking"].includes(n.dataset.sample)).map((n) => getComputedStyle(n).color + "/" + getComputedStyle(n).backgroundColor);
  box.remove();
  return { ratios: out, badges };
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_text_style_meets_wcag_aa_contrast(chromium, live_site, request, scheme):
    page = open_page(chromium, live_site, request, color_scheme=scheme)
    log_in(page, live_site, f"/c/{live_site.demo_conversation}/")
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    measured = page.evaluate(SAMPLES, STATUSES + LAUNCH_ONLY_STYLES)
    low = {name: r for name, r in measured["ratios"].items() if r < (3 if name == "focus" else 4.5)}
    assert low == {}, f"below AA in the {scheme} scheme: {low}"
    # Each status its own colours, except the two that wait on the user (their labels differ).
    badges = measured["badges"]
    awaiting = {
        badges[STATUSES.index("awaiting_approval")],
        badges[STATUSES.index("awaiting_input")],
    }
    assert len(awaiting) == 1 and len(set(badges)) == len(badges) - 1, badges
    screenshot(page, f"transcript-{scheme}")
    page.context.close()
    assert page.errors == []


def test_every_status_has_its_own_label_and_icon(user_page, live_site):
    page = user_page
    page.goto(f"/c/{live_site.demo_conversation}/")
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    shown = page.evaluate(
        """(statuses) => statuses.map((s) => {
             const card = new Toolcore.Card("x-" + s, { wantResponse() {}, announce() {} });
             card.setState({ toolCallId: "x", turnId: "t", toolName: "bash", status: s });
             return card.el.querySelector(".badge").textContent;
           })""",
        STATUSES,
    )
    assert len(set(shown)) == len(STATUSES), shown
    assert dict(zip(STATUSES, shown, strict=True))["declined"] == "⊘Declined"


CONTROLS_WITHOUT_NAME = """() => [...document.querySelectorAll("button, input, select, textarea, a[href]")]
  .filter((n) => n.offsetParent !== null || n.type === "checkbox")
  .filter((n) => {
    const labelled = (n.labels && n.labels.length) || n.getAttribute("aria-label") || n.getAttribute("aria-labelledby");
    return !labelled && !(n.textContent || "").trim() && n.type !== "hidden";
  })
  .map((n) => n.outerHTML.slice(0, 120))"""


def test_every_control_has_a_name(page, live_site):
    page.goto("/accounts/login/")
    assert page.evaluate(CONTROLS_WITHOUT_NAME) == []
    log_in(page, live_site)
    for path in ("/", f"/c/{live_site.demo_conversation}/", "/workbench/"):
        page.goto(path)
        page.wait_for_load_state("networkidle")
        assert page.evaluate(CONTROLS_WITHOUT_NAME) == [], path


def test_approve_with_the_keyboard_alone(user_page, live_site):
    page = user_page
    cid = live_site.conversation("keyboard")
    turn = live_site.user_says(cid, "u1", "go")
    (call_id,) = live_site.assistant_calls(cid, turn, "a1", [("bash", {"command": "echo typed"})])
    page.goto(f"/c/{cid}/")
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    card = page.locator(f'article.card[data-call-id="{call_id}"]')
    allow = card.get_by_role("button", name="Allow once")
    expect(allow).to_be_visible()
    # Skip link first, then on through the page until the Allow button has the focus.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    for _ in range(40):
        if allow.evaluate("node => node === document.activeElement"):
            break
        page.keyboard.press("Tab")
    else:
        pytest.fail("Allow once is not reachable with Tab")
    outline = allow.evaluate("node => getComputedStyle(node).outlineStyle")
    assert outline == "solid"  # a visible focus ring
    page.keyboard.press("Enter")
    expect(card.locator(".badge")).to_have_text("✓Completed", timeout=RUN_MS)
    details = card.get_by_role("button", name="Details of bash")
    details.focus()
    page.keyboard.press("Enter")
    expect(card.get_by_role("button", name="Hide details of bash")).to_have_attribute(
        "aria-expanded", "true"
    )
    expect(card.locator(".card-details")).to_contain_text("typed")


@pytest.mark.parametrize("motion", ["reduce", "no-preference"])
def test_reduced_motion_stops_the_running_spinner(chromium, live_site, request, motion):
    page = open_page(chromium, live_site, request, reduced_motion=motion)
    log_in(page, live_site, f"/c/{live_site.demo_conversation}/")
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    animation = page.evaluate(
        """() => {
             const card = new Toolcore.Card("spin", { wantResponse() {}, announce() {} });
             card.setState({ toolCallId: "spin", turnId: "t", toolName: "bash", status: "in_progress",
                             startedAt: new Date().toISOString() });
             document.querySelector("main").append(card.el);
             return getComputedStyle(card.el.querySelector(".badge-icon")).animationName;
           }"""
    )
    assert animation == ("none" if motion == "reduce" else "spin")
    page.context.close()
    assert page.errors == []


def test_focus_stays_on_a_running_card_while_it_streams(user_page, live_site):
    page = user_page
    cid = live_site.conversation("focus")
    turn = live_site.user_says(cid, "u1", "go")
    command = "for i in $(seq 1 40); do echo step $i; sleep 0.1; done"
    (call_id,) = live_site.assistant_calls(cid, turn, "a1", [("bash", {"command": command})])
    live_site.api(
        "POST",
        f"/tool-calls/{call_id}/resolution",
        {"requestId": "r", "kind": "approval", "decision": "allow"},
    )
    page.goto(f"/c/{cid}/")
    card = page.locator(f'article.card[data-call-id="{call_id}"]')
    expect(card.locator(".card-preview")).to_contain_text("step 2", timeout=RUN_MS)
    details = card.get_by_role("button", name="Details of bash")
    details.focus()
    # Ten more updates of the card while its button has the focus.
    expect(card.locator(".card-preview pre")).to_contain_text(
        re.compile(r"step (1[2-9]|[2-4]\d)\b"), timeout=RUN_MS
    )
    assert details.evaluate("node => node === document.activeElement")
    expect(card.locator(".badge")).to_have_text("✓Completed", timeout=RUN_MS)
    assert details.evaluate("node => node === document.activeElement")
