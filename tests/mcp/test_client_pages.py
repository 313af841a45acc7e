"""MCP calls on the pages and in the admin (docs/mcp.md): shown as their tool's own name with a
small "MCP · <server>" label. The naming is read in one place (``tools/catalog.py``
``MCP_TOOL_NAME``): the admin through ``mcp_tool_parts``, the cards through the same pattern in
the page's configuration, checked here in Node against the Python reading."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from tests.conversations.helpers import assistant_calls, new_conversation, open_turn
from tools.catalog import MCP_TOOL_NAME, mcp_tool_parts
from tools.models import McpServer

from .client_helpers import BIN, mcp_clean  # noqa: F401 - a fixture

NODE = shutil.which("node") or shutil.which("nodejs")
NAMES = [
    "mcp__time__get_current_time",
    "mcp__my_srv__a__b",
    "mcp__git-2___x",
    "mcp__a__line\nbreak",
    "mcp__a_",
    "mcp____x",
    "bash",
    "mcp__notes",
]


@pytest.mark.skipif(NODE is None, reason="Node.js not found: the cards' reading is not checked")
def test_the_cards_read_mcp_names_as_the_server_does():
    done = subprocess.run(
        [NODE, str(Path(__file__).with_name("client_names_check.js"))],
        input=json.dumps({"pattern": MCP_TOOL_NAME.pattern, "names": NAMES}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    read = json.loads(done.stdout)
    expected = [
        None if (p := mcp_tool_parts(n)) is None else {"server": p[0], "tool": p[1]} for n in NAMES
    ]
    assert read == expected
    assert read[0] == {"server": "time", "tool": "get_current_time"}


@pytest.mark.django_db
def test_the_conversation_page_gives_its_script_the_pattern(client, user):
    client.force_login(user)
    conversation = new_conversation(user)
    page = client.get(f"/c/{conversation.pk}/").content.decode()
    assert json.dumps(MCP_TOOL_NAME.pattern)[1:-1] in page.replace("\\u0026", "&")


@pytest.mark.django_db
@pytest.mark.usefixtures("mcp_clean")
def test_the_admin_shows_the_server_and_adds_a_server_with_its_tools(client, user, admin_user):
    client.force_login(admin_user)
    answer = client.post(
        reverse("admin:tools_mcpserver_add"),
        {
            "name": "time",
            "transport": "stdio",
            "command": str(BIN / "mcp-server-time"),
            "arguments_text": "--local-timezone\nUTC",
            "set_environment": "TOKEN=never-shown",
            "enabled": "on",
            "tools-TOTAL_FORMS": "0",
            "tools-INITIAL_FORMS": "0",
        },
        follow=True,
    )
    assert answer.status_code == 200
    text = answer.content.decode()
    assert "MCP server time lists 2 tool(s)." in text, text[:3000]
    server = McpServer.objects.get(name="time")
    assert server.arguments == ["--local-timezone", "UTC"] and list(server.environment) == ["TOKEN"]
    change = client.get(reverse("admin:tools_mcpserver_change", args=[server.pk])).content.decode()
    assert "mcp__time__get_current_time" in change and "TOKEN (values hidden)" in change
    assert "never-shown" not in change
    refreshed = client.post(
        reverse("admin:tools_mcpserver_changelist"),
        {"action": "refresh_tools", "_selected_action": [server.pk]},
        follow=True,
    )
    assert "MCP server time lists 2 tool(s)." in refreshed.content.decode()

    conversation = new_conversation(user)
    (call_id,) = assistant_calls(
        conversation, open_turn(conversation), ("mcp__time__get_current_time", {"timezone": "UTC"})
    ).call_ids
    page = client.get(reverse("admin:conversations_toolcall_change", args=[call_id]))
    assert page.status_code == 200
    assert (
        'get_current_time</span> <span class="tool-origin">MCP · time</span>'
        in page.content.decode()
    )
    listing = client.get(reverse("admin:conversations_toolcall_changelist")).content.decode()
    assert '<span class="tool-origin">MCP · time</span>' in listing
    assert Permission.objects.filter(codename="change_mcpserver").exists()
