"""What happens around an MCP call (docs/mcp.md): a stdio server killed mid-call, one that never
answers, a cancel, a server whose tools change, a worker that died. The tiny server of this
folder records its pid, the slow tools it started and the cancels it received."""

from __future__ import annotations

import os
import signal

import pytest

from conversations.models import ToolCall
from conversations.services.cancel import call_cancel
from conversations.services.claims import claim_acquire
from conversations.services.recovery import recover_all
from tests.conversations.helpers import (
    assistant_calls,
    expire_claim,
    new_conversation,
    open_turn,
)
from tests.tools.worker_helpers import model_call, response_of, wait_for
from tools.catalog import tool_spec
from tools.models import McpTool

from .client_helpers import add_tiny, mcp_clean, mcp_worker, recorded  # noqa: F401 - a fixture

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("mcp_clean")]


def _pids(record) -> list[int]:
    return [int(line.split()[1]) for line in recorded(record) if line.startswith("pid ")]


def test_a_server_killed_mid_call_fails_the_call_and_the_next_call_restarts_it(user, tmp_path):
    record = tmp_path / "record.txt"
    add_tiny("tiny", record)  # its listing was a process of its own, already gone
    with mcp_worker():
        _, _, napping = model_call(user, "mcp__tiny__nap", {"seconds": 30})
        wait_for(lambda: "started nap" in recorded(record), timeout=20)
        (pid,) = _pids(record)[1:]
        os.kill(pid, signal.SIGKILL)
        payload = wait_for(lambda: response_of(napping), timeout=25)  # its nap: 30 s
        # Read-only: it had no effect, so failed (an execute tool reads indeterminate).
        assert payload["outcome"] == "failed"
        assert payload["modelContent"][0]["text"].count("MCP server “tiny” stopped or hung up") == 1
        _, _, echo = model_call(user, "mcp__tiny__echo", {"text": "again"})
        again = wait_for(lambda: response_of(echo), timeout=20)
    assert again["outcome"] == "completed" and "echo: again" in again["modelContent"][0]["text"]
    assert len(_pids(record)) == 3  # the listing, the killed one, the one started again


def test_a_server_that_never_answers_times_out_and_is_told_to_stop(user, tmp_path, settings):
    settings.TOOLCORE_MCP_CALL_TIMEOUT = 1
    record = tmp_path / "record.txt"
    add_tiny("tiny", record)
    with mcp_worker():
        _, _, call_id = model_call(user, "mcp__tiny__work", {"seconds": 30})
        payload = wait_for(lambda: response_of(call_id), timeout=20)
        wait_for(lambda: "cancelled work" in recorded(record), timeout=25)  # its work: 30 s
    # work is not read-only: what it did is unknown.
    assert payload["outcome"] == "indeterminate"
    assert (
        "MCP server “tiny” did not answer within 1 s (TOOLCORE_MCP_CALL_TIMEOUT)"
        in (payload["modelContent"][0]["text"])
    )


def test_cancel_sends_notifications_cancelled_to_the_server(user, tmp_path):
    record = tmp_path / "record.txt"
    add_tiny("tiny", record)
    with mcp_worker():
        _, _, call_id = model_call(user, "mcp__tiny__nap", {"seconds": 30})
        wait_for(lambda: "started nap" in recorded(record), timeout=20)
        answer = call_cancel(call_id=call_id)
        wait_for(lambda: "cancelled nap" in recorded(record), timeout=25)  # its nap: 30 s
    # The Cancel rules: a running call's effect cannot be confirmed by the one who cancels.
    assert answer == {"outcome": "indeterminate", "alreadySettled": False}
    # Cancelled before it ran: cancelled.
    conversation = new_conversation(user)
    (waiting,) = assistant_calls(
        conversation, open_turn(conversation), ("mcp__tiny__work", {"seconds": 1})
    ).call_ids
    assert ToolCall.objects.get(pk=waiting).state == "awaiting_approval"
    assert call_cancel(call_id=waiting)["outcome"] == "cancelled"


def test_list_changed_refreshes_the_tools_and_the_catalog(user, tmp_path):
    add_tiny("tiny", tmp_path / "record.txt")
    assert tool_spec("mcp__tiny__sprout").refusal is not None
    with mcp_worker():
        _, _, call_id = model_call(user, "mcp__tiny__grow", {"name": "sprout"})
        assert wait_for(lambda: response_of(call_id), timeout=20)["outcome"] == "completed"
        wait_for(lambda: McpTool.objects.filter(name="sprout").exists())
    spec = tool_spec("mcp__tiny__sprout")
    assert spec.refusal is None and spec.risk == "execute"


def test_recovery_treats_mcp_tools_by_their_risk(user, tmp_path):
    """A worker that died mid-call: an execute tool settles indeterminate, a read-only one runs
    again, as for the core tools."""
    add_tiny("tiny", tmp_path / "record.txt")
    _, _, working = model_call(user, "mcp__tiny__work", {"seconds": 1})
    _, _, napping = model_call(user, "mcp__tiny__nap", {"seconds": 1})
    for call_id in (working, napping):
        assert claim_acquire(call_id=call_id, worker="dead") is not None
        expire_claim(call_id)
    recover_all()
    assert response_of(working)["outcome"] == "indeterminate"
    assert ToolCall.objects.get(pk=napping).state == "ready"
