"""A client generated from the live OpenAPI document by a third-party generator
(``openapi-python-client``) runs the README's flow against a real daphne: what someone who has
only ``/api/v1/openapi.json`` gets (docs/subsystems/api.md, "The OpenAPI document").

The generator reads the document from the live server, into a temporary folder, with nothing
from the network (it formats its output with the venv's ``ruff``). It must not skip anything:
a schema it cannot read costs the client a class and every answer that holds one, so any
warning in its output fails the test. The flow then uses only the generated functions and
classes (no raw HTTP): create a conversation, a user message, an assistant message with a
``bash`` call, approve it, the turn barrier, the event log, the snapshot, the history, and the
call's assets downloaded whole and by range. The site's embedded tool worker runs the call.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import subprocess
import sys
import uuid
from http import HTTPStatus
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from tests.realtime.daphne_helpers import site

pytestmark = pytest.mark.e2e

PACKAGE = "toolcore_client"
GENERATE_SECONDS = 60
BARRIER_ROUNDS = 6  # of `wait=5` each: the worker runs `ls -a` in well under a second
# Above the barrier's wait (httpx's own default, 5 s, would cut a wait of 5 s short).
REQUEST_SECONDS = 30


def _generate(url: str, folder: Path) -> subprocess.CompletedProcess:
    """``openapi-python-client generate --url …`` into ``folder/toolcore_client``, with the
    venv's tools on the PATH (its post hooks run ``ruff``) and no proxy (the URL is local)."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return subprocess.run(
        [sys.executable, "-m", "openapi_python_client", "generate", "--url", url]
        + ["--output-path", str(folder / PACKAGE), "--meta", "none"],
        cwd=folder,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=GENERATE_SECONDS,
    )


@pytest.fixture
def live(tmp_path):
    """A site served by one daphne with its embedded tool worker.

    Its set-up takes several seconds (a daphne started, and in each worker the site template
    once): the one test here needs a real server, its document and its log pages."""
    with site(tmp_path / "site", TOOLCORE_WORKERS="1") as made:
        made.server = made.daphne()
        yield made
    errors = [line for server in made.daphnes for line in server.errors()]
    assert not errors, "daphne logged errors:\n" + "\n".join(errors)


@pytest.fixture
def generated(live, tmp_path):
    """The client package generated from the live document, imported; forgotten afterwards.

    About five seconds: the generator is a process of its own (openapi-python-client), run once
    for the module's one test."""
    folder = tmp_path / "client"
    folder.mkdir()
    done = _generate(f"{live.server.http_url}/api/v1/openapi.json", folder)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "Warning" not in output and "WARNING" not in output, output
    assert "Skipping" not in output and "Unable to" not in output, output
    assert (folder / PACKAGE / "api" / "conversations" / "create_conversation.py").exists()
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(folder))
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


def _api(package: ModuleType, tag: str, operation: str) -> ModuleType:
    return importlib.import_module(f"{package.__name__}.api.{tag}.{operation}")


def _client(package: ModuleType, live, **headers: str):
    """The generated ``AuthenticatedClient`` of the site's token. A client of its own for other
    headers: the generated ``with_headers`` also changes the original's connection."""
    return package.AuthenticatedClient(
        base_url=live.server.http_url,
        token=live.token,
        headers=headers,
        raise_on_unexpected_status=True,
        timeout=httpx.Timeout(REQUEST_SECONDS),
        httpx_args={"trust_env": False},  # no proxy from the environment: the site is local
    )


def test_the_readme_flow_through_a_generated_client(live, generated):
    models = importlib.import_module(f"{PACKAGE}.models")
    conversations = {
        name: _api(generated, "conversations", name)
        for name in (
            "create_conversation",
            "post_message",
            "wait_turn_results",
            "list_events",
            "get_snapshot",
            "get_history",
        )
    }
    calls = {
        name: _api(generated, "tool_calls", name)
        for name in ("get_tool_call", "resolve_tool_call", "get_tool_call_details")
    }
    get_asset = _api(generated, "assets", "get_asset")
    client = _client(generated, live)

    # A conversation, a user message, the assistant's bash call.
    conversation = conversations["create_conversation"].sync(
        client=client, body=models.ConversationIn(title="first")
    )
    assert isinstance(conversation, models.ConversationOut)
    assert isinstance(conversation.id, uuid.UUID)
    cid = conversation.id
    opened = conversations["post_message"].sync(
        cid,
        client=client,
        body=models.MessageIn(
            message_id="m1",
            role=models.MessageInRole.USER,
            content=[models.TextBlock(type_="text", text="list files")],
        ),
    )
    assert isinstance(opened.event, models.UserMessageEventOut)
    assert isinstance(opened.turn_id, uuid.UUID)
    tid = opened.turn_id
    asked = conversations["post_message"].sync(
        cid,
        client=client,
        body=models.MessageIn(
            message_id="m2",
            role=models.MessageInRole.ASSISTANT,
            turn_id=tid,
            content=[
                models.ToolCallBlock(
                    type_="tool_call",
                    id="call_1",
                    name="bash",
                    arguments=models.ToolCallBlockArguments.from_dict({"command": "ls -a"}),
                )
            ],
        ),
    )
    assert isinstance(asked.event, models.AssistantMessageEventOut)
    (block,) = asked.event.payload.content
    assert isinstance(block, models.ToolCallBlockOut)
    assert block.arguments.to_dict() == {"command": "ls -a"}
    (created,) = asked.tool_calls
    assert created.tool_name == "bash"

    # bash asks first: the call waits for an approval, and says why.
    call = calls["get_tool_call"].sync(created.id, client=client)
    assert isinstance(call, models.UnfinishedCallOut)
    assert call.state == models.UnfinishedCallOutState.AWAITING_APPROVAL
    assert isinstance(call.interaction, models.ApprovalInteractionOut)
    assert call.interaction.request.reason
    assert call.interaction.request.suggested_rules[0].pattern == "ls -a"
    assert isinstance(call.supervision, models.SupervisionOut)
    assert call.supervision.decision == models.SupervisionOutDecision.ASK
    resolved = calls["resolve_tool_call"].sync(
        created.id,
        client=client,
        body=models.ApprovalIn(
            request_id="approve-1",
            kind="approval",
            decision=models.ApprovalInDecision.ALLOW,
        ),
    )
    assert isinstance(resolved, models.ResolutionOut)
    assert isinstance(resolved.resolution, models.ApprovalResolutionOut)
    assert resolved.resolution.decision == models.ApprovalResolutionOutDecision.ALLOW

    # The turn barrier: pending until the worker settled the call, then settled.
    for _ in range(BARRIER_ROUNDS):
        answer = conversations["wait_turn_results"].sync(cid, tid, client=client, wait=5)
        if isinstance(answer, models.TurnSettledOut):
            break
        assert isinstance(answer, models.TurnPendingOut), answer
    assert isinstance(answer, models.TurnSettledOut), answer
    (result,) = answer.results
    assert result.tool_call_id == created.id
    assert result.outcome == models.ToolResultOutOutcome.COMPLETED
    (content,) = result.model_content
    assert isinstance(content, models.TextBlockOut) and ".." in content.text
    assert answer.queue == []

    # The event log: each event its own class, its payload typed.
    page = conversations["list_events"].sync(cid, client=client, after=0, limit=100)
    assert [type(e) for e in page.events] == [
        models.UserMessageEventOut,
        models.AssistantMessageEventOut,
        models.ToolCallResponseEventOut,
    ]
    response = page.events[2].payload
    assert isinstance(response, models.ToolCallResponsePayloadOut)
    assert response.tool_call_id == created.id
    assert isinstance(response.interaction, models.ApprovalInteractionOut)
    assert isinstance(response.resolution, models.ApprovalResolutionOut)
    assert response.resolved_by == live.username
    assert response.model_content[0].text == content.text
    assert isinstance(response.user_projection, models.UserProjectionOut)
    assert response.asset_ids and all(isinstance(a, uuid.UUID) for a in response.asset_ids)

    # The snapshot and the history: the call's card, typed.
    snapshot = conversations["get_snapshot"].sync(cid, client=client)
    assert isinstance(snapshot, models.SnapshotOut)
    assert snapshot.open_turn.id == tid and snapshot.calls == []
    (card,) = snapshot.tools
    assert isinstance(card, models.ToolStateOut) and card.tool_call_id == created.id
    assert card.status == models.ToolStateOutStatusType0.COMPLETED
    assert isinstance(card.output, models.BoundedOutputOut) and ".." in card.output.text
    history = conversations["get_history"].sync(cid, client=client, limit=20)
    assert [type(item) for item in history.items] == [
        models.HistoryToolOut,
        models.HistoryMessageOut,
        models.HistoryMessageOut,
    ]
    assert isinstance(history.items[1].event, models.AssistantMessageEventOut)

    # The assets: listed by the call's details, downloaded whole and by range.
    details = calls["get_tool_call_details"].sync(created.id, client=client)
    assert isinstance(details.tool_update, models.ToolStateOut)
    assets = {asset.path.rsplit("/", 1)[-1]: asset for asset in details.assets}
    assert set(response.asset_ids) == {asset.id for asset in details.assets}
    output = assets["output.txt"]
    whole = get_asset.sync(output.id, client=client)
    data = whole.payload.read()
    assert hashlib.sha256(data).hexdigest() == output.sha256 and b".." in data
    ranged = get_asset.sync_detailed(output.id, client=_client(generated, live, Range="bytes=0-1"))
    assert ranged.status_code == HTTPStatus.PARTIAL_CONTENT
    assert ranged.parsed.payload.read() == data[:2]

    # An error answers the error body's class.
    missing = calls["get_tool_call"].sync(uuid.uuid4(), client=client)
    assert isinstance(missing, models.ErrorOut) and missing.error.code == "not_found"
