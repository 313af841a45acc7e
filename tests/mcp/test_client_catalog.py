"""The MCP servers' tools in the catalog and in supervision (docs/mcp.md): registered with
``manage.py mcp_add`` against real servers from PyPI (``mcp-server-time``, ``mcp-server-git``),
named ``mcp__<server>__<tool>`` with the server's schema, asked by default, their risk from the
server's annotations; arguments checked, servers disabled or of another owner refused; secrets
sealed, never shown; approving a tool not annotated read-only needs tools.run_commands."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from conversations.models import ToolCall
from tests.conftest import client_for
from tests.conversations.api_helpers import grant_run_commands
from tests.conversations.helpers import assistant_calls, new_conversation, open_turn
from tests.tools.worker_helpers import response_of
from tools.catalog import catalog_tools, mcp_tool_name, mcp_tool_parts, tool_spec
from tools.models import McpServer, McpTool
from tools.runtime.mcp.secrets import secret_open
from tools.runtime.mcp.services import mcp_server_save, mcp_tools_store

from .client_helpers import (  # noqa: F401 - mcp_clean: a fixture
    BIN,
    add_server,
    git_repository,
    http_tiny_server,
    mcp_clean,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("mcp_clean")]

TIME = [str(BIN / "mcp-server-time"), "--local-timezone", "UTC"]


def _post(user, tool: str, arguments: dict):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, (tool, arguments)).call_ids
    return call_id


def _state(call_id) -> str:
    call = ToolCall.objects.filter(pk=call_id).first()
    return call.state if call else response_of(call_id)["outcome"]


def test_names_are_read_in_one_place():
    assert mcp_tool_parts("mcp__time__get_current_time") == ("time", "get_current_time")
    assert mcp_tool_parts("mcp__my_srv__a__b") == ("my_srv", "a__b")
    assert mcp_tool_parts("mcp__git-2___x") == ("git-2", "_x")
    for name in ("bash", "mcp__", "mcp____x", "mcp___a__x", "mcp__a_", "mcp__a"):
        assert mcp_tool_parts(name) is None, name
    assert mcp_tool_name("time", "convert_time") == "mcp__time__convert_time"


def test_mcp_add_lists_the_time_servers_tools_into_the_catalog(capsys):
    call_command("mcp_add", "time", "--", *TIME)
    out = capsys.readouterr().out
    assert "mcp__time__get_current_time" in out and "mcp__time__convert_time" in out
    spec = tool_spec("mcp__time__get_current_time")
    assert spec.schema["required"] == ["timezone"]
    assert spec.risk == "read" and spec.replay_safe  # readOnlyHint: true
    assert spec.default_decision == "ask" and spec.profile == "conservative_fallback"
    assert not spec.core and not spec.host and spec.subject_of({"path": "x"}) is None
    assert "mcp__time__convert_time" in {s.name for s in catalog_tools()}
    assert McpServer.objects.get(name="time").tools_listed_at is not None


def test_git_tools_without_read_only_hint_count_as_execute(tmp_path):
    repository = git_repository(tmp_path / "repo")
    add_server("git", str(BIN / "mcp-server-git"), "--repository", str(repository))
    assert tool_spec("mcp__git__git_status").risk == "read"
    commit = tool_spec("mcp__git__git_commit")
    assert commit.risk == "execute" and not commit.replay_safe  # never replayed
    assert McpTool.objects.filter(server__name="git").count() >= 10


def test_a_call_is_asked_and_bad_arguments_are_refused_in_supervision(user):
    add_server("time", *TIME)
    asked = _post(user, "mcp__time__get_current_time", {"timezone": "Europe/Paris"})
    call = ToolCall.objects.get(pk=asked)
    assert call.state == "awaiting_approval"
    assert "mcp__time__get_current_time" in call.interaction["request"]["reason"]
    refused = _post(user, "mcp__time__get_current_time", {"timezone": 5})
    payload = response_of(refused)
    assert payload["outcome"] == "failed"
    assert (
        payload["supervision"]["reason"] == "Invalid argument 'timezone': must be of type string."
    )
    missing = _post(user, "mcp__time__get_current_time", {})
    assert response_of(missing)["supervision"]["reason"] == "Missing required argument 'timezone'."


def test_servers_that_cannot_serve_the_conversation_settle_failed(user, other_user):
    add_server("time", *TIME)
    add_server("mine", *TIME, owner=other_user)
    server = McpServer.objects.get(name="time")
    unknown = _post(user, "mcp__time__nope", {})
    assert "MCP server “time” has no tool “nope”" in response_of(unknown)["supervision"]["reason"]
    others = _post(user, "mcp__mine__get_current_time", {"timezone": "UTC"})
    assert response_of(others)["supervision"]["reason"] == (
        "MCP server “mine” serves only its owner's conversations, not this one's."
    )
    mcp_server_save(name="time", transport="stdio", command=TIME[0], enabled=False, server=server)
    disabled = _post(user, "mcp__time__get_current_time", {"timezone": "UTC"})
    assert response_of(disabled)["supervision"]["reason"] == "MCP server “time” is disabled."
    # The owner's own conversations use it.
    assert _state(_post(other_user, "mcp__mine__get_current_time", {"timezone": "UTC"})) == (
        "awaiting_approval"
    )


def test_a_name_of_no_registered_server_stays_a_host_tool(user):
    call_id = _post(user, "mcp__notes__lookup", {"q": 1})
    spec = tool_spec("mcp__notes__lookup")
    assert spec.host and spec.default_decision == "allow"
    assert _state(call_id) == "ready"


def test_secrets_are_sealed_and_never_shown(admin_client):
    call_command(
        "mcp_add",
        "time",
        "--env",
        "API_KEY=hunter2-value",
        "--",
        *TIME,
    )
    server = McpServer.objects.get(name="time")
    assert "hunter2-value" not in str(server.environment)
    assert secret_open(server.environment["API_KEY"]) == "hunter2-value"
    page = admin_client.get(f"/admin/tools/mcpserver/{server.pk}/change/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "API_KEY" in text and "hunter2-value" not in text
    assert server.environment["API_KEY"] not in text  # nor its sealed form


def test_mcp_add_refuses_bad_input_with_a_message():
    with pytest.raises(CommandError, match="either -- COMMAND"):
        call_command("mcp_add", "x")
    with pytest.raises(CommandError, match="single '_'"):
        call_command("mcp_add", "a__b", "--", "true")
    with pytest.raises(CommandError, match="could not list its tools: FileNotFoundError"):
        call_command("mcp_add", "gone", "--", "/nonexistent/server")
    assert McpServer.objects.get(name="gone").tools_error.startswith("MCP server “gone”")


def test_mcp_add_registers_a_streamable_http_server_by_url_with_a_sealed_header(capsys, tmp_path):
    """The tiny server refuses a request without its header: its tools listed say the header
    was sent."""
    with http_tiny_server("s3cret", tmp_path / "record.txt") as url:
        call_command("mcp_add", "web", "--url", url, "--header", "X-Test-Token=s3cret")
    printed = capsys.readouterr()
    assert "MCP server web registered (http, for every owner)." in printed.out
    assert "mcp__web__echo" in printed.out
    assert "s3cret" not in printed.out + printed.err
    server = McpServer.objects.get(name="web")
    assert (server.transport, server.url) == ("http", url)
    assert (server.command, server.arguments, server.environment) == ("", [], {})
    assert list(server.headers) == ["X-Test-Token"]
    assert "s3cret" not in str(server.headers)
    assert secret_open(server.headers["X-Test-Token"]) == "s3cret"
    assert server.tools_listed_at is not None and server.tools_error == ""
    assert tool_spec("mcp__web__echo").risk == "read"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--url", "http://127.0.0.1:9/mcp", "--", "true"], "Give either -- COMMAND"),
        (["--url", "ftp://example.com/mcp"], "A Streamable HTTP server needs an http(s) URL."),
        (["--url", "http:///mcp"], "A Streamable HTTP server needs an http(s) URL."),
        (["--url", "http://127.0.0.1:9/mcp", "--env", "A=1"], "--env is for stdio servers"),
        (["--header", "X-Token=1", "--", "true"], "--header is for HTTP servers"),
        (["--url", "http://127.0.0.1:9/mcp", "--header", "s3cret"], "has no '='"),
        (["--url", "http://127.0.0.1:9/mcp", "--header", "=s3cret"], "has no name before '='"),
        (["--url", "http://127.0.0.1:9/mcp", "--header", "Bad Name=s3cret"], "not a valid name"),
        (
            ["--url", "http://127.0.0.1:9/mcp", "--header", "X-Token=s3cret\r\nX-More: 1"],
            "the value of 'X-Token' holds a forbidden character",
        ),
    ],
    ids=[
        "command-and-url",
        "ftp",
        "no-host",
        "env",
        "header-stdio",
        "no-pair",
        "no-name",
        "bad-name",
        "crlf",
    ],
)
def test_mcp_add_refuses_bad_http_input_with_a_message(arguments, message):
    with pytest.raises(CommandError) as refused:
        call_command("mcp_add", "web", *arguments)
    assert message in str(refused.value)
    assert "s3cret" not in str(refused.value)  # a secret value is never printed back
    assert not McpServer.objects.exists()


def test_the_host_port_leaves_registered_servers_tools_to_the_workers(user):
    add_server("time", *TIME)
    host = client_for(user, scopes=["host"])
    refused = host.post_json(
        "/api/v1/host/claims", {"tools": ["mcp__time__get_current_time"], "worker": "h"}
    )
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "tools"
    allowed = host.post_json("/api/v1/host/claims", {"tools": ["mcp__notes__x"], "worker": "h"})
    assert allowed.status_code == 200 and allowed.json() == {"claims": []}


def test_toolcore_as_an_mcp_server_lists_the_registered_servers_tools_to_their_owners(
    user, other_user
):
    """Both ways at once: an MCP client of Toolcore sees the registered servers' tools offered to
    its token's user, with their description and annotations, and not another owner's server's
    nor a disabled server's."""
    from conversations.mcp.tools import published_spec, tools_list

    notes = mcp_server_save(name="notes", transport="stdio", command="notes-server", owner=user)
    off = mcp_server_save(name="off", transport="stdio", command="off-server", enabled=False)
    lookup = {
        "name": "lookup",
        "description": "Looks a note up.",
        "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
        "annotations": {"readOnlyHint": True},
    }
    mcp_tools_store(server_id=notes.pk, tools=[lookup])
    mcp_tools_store(server_id=off.pk, tools=[lookup])

    mine = {tool.name: tool for tool in tools_list(user.pk).tools}
    assert "mcp__notes__lookup" in mine and "bash" in mine
    assert mine["mcp__notes__lookup"].description == "Looks a note up."
    assert mine["mcp__notes__lookup"].annotations.read_only_hint is True
    assert mine["mcp__notes__lookup"].input_schema["properties"] == {"q": {"type": "string"}}
    assert "mcp__off__lookup" not in mine
    assert published_spec("mcp__notes__lookup", user.pk) is not None

    theirs = {tool.name for tool in tools_list(other_user.pk).tools}
    assert "mcp__notes__lookup" not in theirs and "bash" in theirs
    assert published_spec("mcp__notes__lookup", other_user.pk) is None


def test_approving_a_tool_not_annotated_read_only_needs_run_commands(user):
    """A tool its server does not annotate read-only may do anything (risk ``execute``):
    approving it needs ``tools.run_commands``, as approving ``bash`` does, a staff member's
    approval included; a read-only one does not. The check comes before any worker, so no
    server runs: its tools are stored as its listing would store them."""
    server = mcp_server_save(name="deploy", transport="stdio", command="deploy-server")
    schema = {"type": "object", "properties": {"target": {"type": "string"}}}
    mcp_tools_store(
        server_id=server.pk,
        tools=[
            {"name": "ship", "description": "Ships.", "inputSchema": schema},
            {
                "name": "status",
                "description": "Says.",
                "inputSchema": schema,
                "annotations": {"readOnlyHint": True},
            },
        ],
    )
    assert tool_spec("mcp__deploy__ship").risk == "execute"
    user.is_staff = True
    user.save()
    api = client_for(user)
    allow = {"requestId": "r1", "kind": "approval", "decision": "allow"}

    execute = _post(user, "mcp__deploy__ship", {"target": "prod"})
    assert _state(execute) == "awaiting_approval"
    refused = api.post_json(f"/api/v1/tool-calls/{execute}/resolution", allow)
    assert refused.status_code == 403, refused.content
    error = refused.json()["error"]
    assert error["code"] == "forbidden"
    assert error["message"] == (
        "Approving mcp__deploy__ship (it runs programs) needs the permission tools.run_commands."
    )
    call = ToolCall.objects.get(pk=execute)
    assert call.state == "awaiting_approval" and call.resolution is None  # nothing written

    read = _post(user, "mcp__deploy__status", {"target": "prod"})
    assert _state(read) == "awaiting_approval"
    answer = api.post_json(f"/api/v1/tool-calls/{read}/resolution", allow)
    assert answer.status_code == 200, answer.content

    grant_run_commands(user)
    answer = api.post_json(f"/api/v1/tool-calls/{execute}/resolution", allow)
    assert answer.status_code == 200, answer.content
    assert _state(execute) == "ready"


def _staff_who_may_manage_mcp_servers(user):
    """A staff member with the admin's rights over MCP servers, and not ``tools.run_commands``."""
    from django.contrib.auth.models import Permission
    from django.test import Client

    user.is_staff = True
    user.save()
    codes = ["add_mcpserver", "change_mcpserver", "view_mcpserver", "view_mcptool"]
    user.user_permissions.add(*Permission.objects.filter(codename__in=codes))
    client = Client()
    client.force_login(user)
    return client


def test_registering_a_stdio_server_in_the_admin_needs_run_commands(user, tmp_path):
    """Saving a stdio server starts its command (the listing of its tools): a staff member
    without ``tools.run_commands`` is refused with the reason, nothing saved, nothing run; an
    HTTP server needs no such permission; with it, the stdio server is saved and listed."""
    import sys

    client = _staff_who_may_manage_mcp_servers(user)
    ran = tmp_path / "ran"
    form = {
        "name": "sneaky",
        "transport": "stdio",
        "command": sys.executable,
        "arguments_text": f"-c\nopen({str(ran)!r}, 'w')",
        "enabled": "on",
        "tools-TOTAL_FORMS": "0",
        "tools-INITIAL_FORMS": "0",
    }
    refused = client.post("/admin/tools/mcpserver/add/", form)
    assert refused.status_code == 200  # the form again, with its error
    assert (
        "runs its command: it needs the permission tools.run_commands" in refused.content.decode()
    )
    assert not McpServer.objects.filter(name="sneaky").exists()
    assert not ran.exists()

    existing = mcp_server_save(name="time", transport="stdio", command=TIME[0], arguments=TIME[1:])
    change = client.post(
        "/admin/tools/mcpserver/",
        {"action": "refresh_tools", "_selected_action": [existing.pk]},
        follow=True,
    )
    assert "MCP server time: Registering or changing a stdio MCP server" in change.content.decode()
    assert not McpTool.objects.filter(server=existing).exists()  # never listed: never run

    grant_run_commands(user)
    saved = client.post("/admin/tools/mcpserver/add/", {**form, "name": "allowed"}, follow=True)
    assert saved.status_code == 200
    assert McpServer.objects.filter(name="allowed").exists()
    assert ran.exists()  # with the permission, saving ran its command (it lists nothing)


@pytest.fixture
def private_refused(settings):
    settings.TOOLCORE_MCP_ALLOW_PRIVATE = False


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://127.0.0.1:9/mcp", "127.0.0.1"),
        ("http://127.8.9.10/mcp", "127.8.9.10"),
        ("http://[::1]:9/mcp", "::1"),
        ("http://169.254.169.254/latest/meta-data", "169.254.169.254"),
        ("http://[fe80::1]/mcp", "fe80::1"),
        ("http://0.0.0.0:9/mcp", "0.0.0.0"),
        ("http://[::ffff:127.0.0.1]/mcp", "::ffff:127.0.0.1"),
        ("http://localhost:9/mcp", "localhost (127.0.0.1)"),
    ],
)
def test_an_http_server_on_the_host_s_own_addresses_is_refused(private_refused, url, shown):
    with pytest.raises(CommandError) as refused:
        call_command("mcp_add", "web", "--url", url)
    assert f"The URL's host {shown} is a loopback, link-local or unspecified address" in str(
        refused.value
    )
    assert "TOOLCORE_MCP_ALLOW_PRIVATE=on" in str(refused.value)
    assert not McpServer.objects.filter(name="web").exists()


def test_a_team_s_private_network_is_allowed(private_refused):
    from tools.runtime.mcp.addresses import url_address_check

    for url in ("http://10.0.0.5/mcp", "https://192.168.1.20:8443/mcp", "http://172.16.0.1/"):
        url_address_check(url)  # no refusal


def test_the_address_is_checked_again_at_every_connection(settings, tmp_path):
    """Registered while allowed, a server on 127.0.0.1 is refused once the setting is off:
    the refusal is checked at each connection, not only at registration."""
    from tools.runtime.mcp.services import McpUnavailable, mcp_server_refresh

    with http_tiny_server("s3cret", tmp_path / "record.txt") as url:
        call_command("mcp_add", "web", "--url", url, "--header", "X-Test-Token=s3cret")
        server = McpServer.objects.get(name="web")
        settings.TOOLCORE_MCP_ALLOW_PRIVATE = False
        with pytest.raises(McpUnavailable, match="is a loopback, link-local or unspecified"):
            mcp_server_refresh(server=server)


def test_what_an_http_url_answered_is_never_repeated(capsys):
    """A URL that is no MCP server (any internal service): the refusal says what kind of
    answer it was, never a word of the answer."""
    import http.server
    import threading

    secret = "internal-secret-page-1234"

    class Page(http.server.BaseHTTPRequestHandler):
        def _answer(self, status: int) -> None:
            body = f"<html><body>{secret}</body></html>".encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):  # noqa: N802 - the handler's name
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._answer(self.server.status)

        do_GET = do_POST  # noqa: N815

        def log_message(self, *args):
            pass

    for status in (200, 403):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
        server.status = status
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            url = f"http://127.0.0.1:{server.server_address[1]}/mcp"
            with pytest.raises(CommandError) as refused:
                call_command("mcp_add", f"page{status}", "--url", url)
        finally:
            server.shutdown()
            server.server_close()
        printed = capsys.readouterr()
        told = str(refused.value) + printed.out + printed.err
        assert "could not list its tools" in told
        assert secret not in told and "<html>" not in told
        stored = McpServer.objects.get(name=f"page{status}").tools_error
        assert stored and secret not in stored and "<html>" not in stored
