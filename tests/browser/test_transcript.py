"""The transcript page live: a `!command` with a large output and its Details, a reload and a
reconnect in the middle of streaming output, a question card, arguments streamed before their
message is stored."""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from .conftest import open_conversation, screenshot

pytestmark = pytest.mark.browser

RUN_MS = 30_000
STREAM = "for i in $(seq 1 {n}); do echo line $i; sleep {pause}; done"


def cards_by_id(page) -> list[str]:
    return page.locator("article.card[data-call-id]").evaluate_all(
        "nodes => nodes.map(n => n.dataset.callId)"
    )


def test_a_command_with_a_large_output_shows_its_details(user_page, live_site):
    page = user_page
    cid = live_site.conversation("a large output")
    open_conversation(page, cid)
    page.get_by_label(re.compile("Run a !command")).fill("!seq 1 300000")
    page.get_by_role("button", name="Run", exact=True).click()
    card = page.locator("article.card")
    expect(card).to_have_count(1)
    expect(card.locator(".badge")).to_have_text("✓Completed", timeout=RUN_MS)
    expect(card.locator(".card-input")).to_contain_text("seq 1 300000")
    # The preview is the transcript projection of the whole output: its last lines, and how
    # many lines it leaves out (the bounded output, cut in the middle, is in Details).
    expect(card.locator(".card-preview pre")).to_contain_text("299999\n300000")
    expect(card.locator(".card-preview .more")).to_have_text("299994 lines more")

    card.get_by_role("button", name="Details of bash").click()
    details = card.locator(".card-details")
    expect(details).to_be_visible()
    expect(details.locator(".omitted")).to_have_text(
        re.compile(r"^\[\d+\.\d (KiB|MiB) of output not shown\]$")
    )
    expect(details.locator(".bounded-output")).to_contain_text("300000")
    expect(details.locator(".assets li")).to_have_count(4)
    expect(details.locator(".assets")).to_contain_text("SHA-256")
    assert re.fullmatch(r"[0-9a-f]{64}", details.locator(".sha code").first.inner_text())
    output = details.locator(".assets a", has_text="output")
    assert output.get_attribute("href").startswith("/api/v1/assets/")
    # Only bounded payloads in the page: ~2 MB of output, a few KiB of text.
    assert page.evaluate("document.body.innerText.length") < 64 * 1024
    screenshot(page, "details")
    card.get_by_role("button", name="Hide details of bash").click()
    expect(details).to_be_hidden()


def _streaming_turn(live_site, title: str, commands: list[str]) -> tuple[str, list[str]]:
    cid = live_site.conversation(title)
    turn = live_site.user_says(cid, "u1", "run them")
    ids = live_site.assistant_calls(cid, turn, "a1", [("bash", {"command": c}) for c in commands])
    for number, call_id in enumerate(ids):
        body = {"requestId": f"allow-{number}", "kind": "approval", "decision": "allow"}
        live_site.api("POST", f"/tool-calls/{call_id}/resolution", body)
    return cid, ids


def test_a_reload_mid_stream_shows_every_card_once(user_page, live_site):
    page = user_page
    commands = [STREAM.format(n=60, pause=0.1), "echo short", STREAM.format(n=30, pause=0.15)]
    cid, ids = _streaming_turn(live_site, "reload mid-stream", commands)
    open_conversation(page, cid)
    first = page.locator(f'article.card[data-call-id="{ids[0]}"]')
    expect(first.locator(".card-preview")).to_contain_text("line 5", timeout=RUN_MS)
    expect(first.locator(".badge")).to_have_text(re.compile("Running"))
    page.reload()
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    assert sorted(cards_by_id(page)) == sorted(ids)
    for call_id in ids:
        expect(page.locator(f'article.card[data-call-id="{call_id}"] .badge')).to_have_text(
            "✓Completed", timeout=RUN_MS
        )
    assert cards_by_id(page) == ids  # in the order the message asked for them, once each
    expect(first.locator(".card-preview")).to_contain_text("line 60")
    expect(page.locator(".message-user")).to_have_count(1)
    expect(page.locator(".message-assistant")).to_have_count(0)  # it holds only calls


def test_a_reconnect_resumes_and_says_so(user_page, live_site):
    page = user_page
    cid, ids = _streaming_turn(live_site, "reconnect", [STREAM.format(n=50, pause=0.1)])
    open_conversation(page, cid)
    card = page.locator("article.card")
    expect(card.locator(".card-preview")).to_contain_text("line 3", timeout=RUN_MS)
    page.evaluate("Toolcore.page.socket.drop()")
    expect(page.locator("#connection")).to_have_text("Reconnecting…")
    expect(page.locator("#connection")).to_have_text("Live")
    expect(card.locator(".badge")).to_have_text("✓Completed", timeout=RUN_MS)
    expect(card.locator(".card-preview pre")).to_contain_text("line 50")
    assert cards_by_id(page) == ids
    # The page holds every durable event exactly up to the conversation's last sequence.
    last = live_site.api("GET", f"/conversations/{cid}")["lastSequence"]
    expect(page.locator("#connection")).to_have_text("Live")
    deadline = time.monotonic() + 30  # bounds a hang
    while page.evaluate("Toolcore.page.lastSequence()") != last and time.monotonic() < deadline:
        time.sleep(0.1)
    assert page.evaluate("Toolcore.page.lastSequence()") == last


def test_answer_a_question_card(user_page, live_site):
    page = user_page
    cid = live_site.conversation("a question")
    turn = live_site.user_says(cid, "u1", "deploy it")
    questions = [
        {"id": "env", "question": "Which environment?", "options": ["staging", "production"]},
        {
            "id": "steps",
            "question": "Which steps?",
            "options": ["build", "test", "migrate"],
            "multiple": True,
        },
        {"id": "note", "question": "Anything to tell the team?"},
    ]
    (call_id,) = live_site.assistant_calls(
        cid, turn, "a1", [("ask_user", {"questions": questions})]
    )
    open_conversation(page, cid)
    card = page.locator(f'article.card[data-call-id="{call_id}"]')
    expect(card.locator(".badge")).to_have_text("✎Awaiting input", timeout=RUN_MS)
    form = card.get_by_role("form")
    form.get_by_role("group", name="Which environment?").get_by_label("staging").check()
    steps = form.get_by_role("group", name="Which steps?")
    steps.get_by_label("build").check()
    steps.get_by_label("test").check()
    steps.get_by_label("Another answer").fill("smoke")
    form.get_by_role("group", name="Anything to tell the team?").get_by_label("Your answer").fill(
        "Friday"
    )
    screenshot(page, "question")
    form.get_by_role("button", name="Send answers").click()

    def recorded():
        record = card.locator(".interaction.record")
        expect(record).to_contain_text("Answered by demo")
        expect(record.locator("dt")).to_have_text([q["question"] for q in questions])
        expect(record.locator("dd")).to_have_text(["staging", "build, test, smoke", "Friday"])

    recorded()
    expect(card.locator(".badge")).to_have_text("✓Completed", timeout=RUN_MS)
    page.reload()  # the question and the recorded answer stay
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    recorded()
    answers = live_site.call(call_id)["response"]["payload"]["resolution"]["value"]["answers"]
    assert answers == {"env": "staging", "steps": ["build", "test", "smoke"], "note": "Friday"}


def test_arguments_streamed_before_the_message_show_a_card(user_page, live_site):
    page = user_page
    cid = live_site.conversation("streamed arguments")
    turn = live_site.user_says(cid, "u1", "read it")
    open_conversation(page, cid)
    live = {"turnId": turn, "kind": "arguments", "providerCallId": "p1"}
    for delta in ['{"name": "read", ', '"arguments": {"path": "notes', '.md"}}']:
        live_site.api("POST", f"/conversations/{cid}/live", {**live, "delta": delta})
    text = {"turnId": turn, "kind": "text", "delta": "Reading the notes"}
    live_site.api("POST", f"/conversations/{cid}/live", text)
    streaming = page.locator("article.card.provisional")
    expect(streaming).to_contain_text("Arguments streaming")
    expect(streaming).to_contain_text('"path": "notes.md"')
    expect(streaming.locator("h3")).to_have_text("read")
    expect(page.locator(".message.provisional")).to_contain_text("Reading the notes")
    (call_id,) = live_site.assistant_calls(
        cid, turn, "a1", [("read", {"path": "notes.md"})], text="Reading the notes"
    )
    expect(page.locator(".provisional")).to_have_count(0)
    expect(page.locator(".message-assistant")).to_contain_text("Reading the notes")
    expect(page.locator(f'article.card[data-call-id="{call_id}"] .badge')).to_have_text(
        re.compile("Completed|Failed"), timeout=RUN_MS
    )


def test_an_approval_whose_answer_is_lost_is_asked_again_after_a_reconnect(user_page, live_site):
    page = user_page
    cid = live_site.conversation("lost answer")
    turn = live_site.user_says(cid, "u1", "go")
    (call_id,) = live_site.assistant_calls(cid, turn, "a1", [("bash", {"command": "echo once"})])
    open_conversation(page, cid)
    # The server's `resolved` frame is lost with the socket: the page sends the same request
    # (same requestId) after reconnecting and gets the recorded answer.
    page.evaluate(
        """() => {
             const socket = Toolcore.page.socket;
             const onFrame = socket.handlers.onFrame;
             let lost = false;
             socket.handlers.onFrame = (frame) => {
               if (frame.type === "resolved" && !lost) { lost = true; socket.drop(); return; }
               onFrame(frame);
             };
           }"""
    )
    card = page.locator(f'article.card[data-call-id="{call_id}"]')
    card.get_by_role("button", name="Allow once").click()
    expect(card.locator(".interaction.record")).to_contain_text("Allowed once by demo.")
    expect(card.locator(".badge")).to_have_text("✓Completed", timeout=RUN_MS)
    payload = live_site.call(call_id)["response"]["payload"]
    assert payload["resolution"] == {"kind": "approval", "decision": "allow", "persist": False}
