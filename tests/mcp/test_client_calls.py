"""MCP tool calls run by a real worker against real servers (docs/mcp.md): asked, approved,
run, settled and projected; ``isError`` settles ``failed`` with the server's text; images
become image assets, resources are listed; a Streamable HTTP server gets its secret header."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings

from conversations.models import Asset, ToolCall
from tests.conftest import client_for
from tests.conversations.api_helpers import grant_run_commands
from tests.conversations.helpers import assistant_calls, new_conversation, open_turn
from tests.tools.worker_helpers import model_call, response_of, wait_for
from tools.models import McpServer
from tools.runtime.mcp.services import McpUnavailable, mcp_server_refresh, mcp_server_save

from .client_helpers import (
    BIN,
    add_server,
    add_tiny,
    git_repository,
    http_tiny_server,
    mcp_clean,  # noqa: F401 - a fixture
    mcp_worker,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("mcp_clean")]

TIME = [str(BIN / "mcp-server-time"), "--local-timezone", "UTC"]


def _text(payload) -> str:
    return payload["modelContent"][0]["text"]


def test_a_time_call_is_approved_over_rest_run_and_projected(user):
    add_server("time", *TIME)
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(
        conversation, turn_id, ("mcp__time__get_current_time", {"timezone": "Europe/Paris"})
    ).call_ids
    assert ToolCall.objects.get(pk=call_id).state == "awaiting_approval"
    grant_run_commands(user)
    with mcp_worker():
        answer = client_for(user).post_json(
            f"/api/v1/tool-calls/{call_id}/resolution",
            {"requestId": "r1", "kind": "approval", "decision": "allow"},
        )
        assert answer.status_code == 200, answer.content
        payload = wait_for(lambda: response_of(call_id), timeout=20)
    assert payload["outcome"] == "completed"
    text = _text(payload)
    assert '"timezone": "Europe/Paris"' in text and "day_of_week" in text
    result = Asset.objects.get(pk=payload["assetIds"][0])
    assert result.kind == "payload"
    stored = (Path(settings.DATA_DIR) / result.path).read_text()
    assert '"server":"time"' in stored and '"tool":"get_current_time"' in stored


def test_is_error_settles_failed_with_the_servers_text(user):
    add_server("time", *TIME)
    with mcp_worker():
        _, _, call_id = model_call(user, "mcp__time__get_current_time", {"timezone": "Nowhere/X"})
        payload = wait_for(lambda: response_of(call_id), timeout=20)
    assert payload["outcome"] == "failed"
    assert "Invalid timezone: 'No time zone found with key Nowhere/X'" in _text(payload)


def test_git_read_tools_on_a_test_repository(user, tmp_path):
    repository = git_repository(tmp_path / "repo")
    add_server("git", str(BIN / "mcp-server-git"), "--repository", str(repository))
    with mcp_worker():
        _, _, log = model_call(user, "mcp__git__git_log", {"repo_path": str(repository)})
        _, _, status = model_call(user, "mcp__git__git_status", {"repo_path": str(repository)})
        logged = wait_for(lambda: response_of(log), timeout=20)
        stated = wait_for(lambda: response_of(status), timeout=20)
    assert logged["outcome"] == "completed" and "First commit" in _text(logged)
    assert stated["outcome"] == "completed" and "main" in _text(stated)


def test_images_become_assets_and_resources_are_listed(user, tmp_path):
    add_tiny("tiny", tmp_path / "record.txt")
    with mcp_worker():
        _, _, picture = model_call(user, "mcp__tiny__picture", {})
        _, _, documents = model_call(user, "mcp__tiny__documents", {})
        pictured = wait_for(lambda: response_of(picture), timeout=20)
        documented = wait_for(lambda: response_of(documents), timeout=20)
    assert pictured["outcome"] == "completed"
    assert "a tiny picture" in _text(pictured) and "[image images/1.png (image/png" in _text(
        pictured
    )
    image = Asset.objects.get(pk__in=pictured["assetIds"], kind="image")
    assert image.media_type == "image/png" and image.path.endswith("/images/1.png")
    served = client_for(user).get(f"/api/v1/assets/{image.pk}")  # from either asset store
    assert served.status_code == 200, served.content
    assert b"".join(served.streaming_content).startswith(b"\x89PNG")
    text = _text(documented)
    assert "[resource file:///notes.txt (text/plain)]\nthe notes" in text
    assert "[resource link big.log file:///big.log (text/plain)]" in text


def test_a_streamable_http_server_gets_its_secret_header(user, tmp_path):
    with http_tiny_server("s3cret", tmp_path / "record.txt") as url:
        refused = mcp_server_save(
            name="web", transport="http", url=url, headers={"X-Test-Token": "no"}
        )
        with pytest.raises(McpUnavailable, match="could not list its tools"):
            mcp_server_refresh(server=refused)
        server = mcp_server_save(
            name="web",
            transport="http",
            url=url,
            headers={"X-Test-Token": "s3cret"},
            server=refused,
        )
        assert mcp_server_refresh(server=server)
        assert "s3cret" not in str(McpServer.objects.get(name="web").headers)
        with mcp_worker():
            _, _, call_id = model_call(user, "mcp__web__echo", {"text": "over http"})
            payload = wait_for(lambda: response_of(call_id), timeout=20)
    assert payload["outcome"] == "completed"
    assert "echo: over http" in _text(payload)
