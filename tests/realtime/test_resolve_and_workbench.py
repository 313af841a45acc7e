"""``resolve`` over the socket (the REST rules and answers), and ``/ws/workbench/``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Permission
from django.utils import timezone

from conversations.models import ToolCall
from tests.conversations.helpers import assistant_calls, new_conversation, open_turn
from tools.models import Launch, ProcessStatus
from tools.runtime.launches.services import launch_create, launch_folder, launches_purge

from .helpers import connect, hello, published, receive, send, token_for

pytestmark = pytest.mark.django_db(transaction=True)

ALLOW = {"kind": "approval", "decision": "allow", "persist": False}


@sync_to_async
def awaiting_bash(user, *, may_run: bool = True):
    if may_run:
        user.user_permissions.add(Permission.objects.get(codename="run_commands"))
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("bash", {"command": "ls"})).call_ids
    assert ToolCall.objects.get(pk=call_id).state == "awaiting_approval"
    return str(call_id)


async def test_resolve_over_the_socket_answers_as_rest_does(user):
    call_id = await awaiting_bash(user)
    token = await token_for(user)
    socket = await connect(token)
    await hello(socket)
    frame = {"type": "resolve", "toolCallId": call_id, "requestId": "r1", **ALLOW}
    await send(socket, frame)
    answer = await receive(socket)
    assert answer == {
        "type": "resolved",
        "toolCallId": call_id,
        "requestId": "r1",
        "resolution": ALLOW,
        "resolvedBy": user.username,
    }
    assert (await sync_to_async(ToolCall.objects.get)(pk=call_id)).state == "ready"
    await send(socket, frame)  # the same request again: the recorded answer
    assert await receive(socket) == answer
    await send(socket, {**frame, "requestId": "r2", "decision": "deny"})
    conflict = await receive(socket)
    assert (conflict["type"], conflict["code"]) == ("error", "resolution_conflict")
    assert (conflict["toolCallId"], conflict["requestId"]) == (call_id, "r2")
    await socket.disconnect()


async def test_resolve_refusals_are_error_frames(user, other_user):
    theirs = await awaiting_bash(other_user)
    mine = await awaiting_bash(user, may_run=False)
    token = await token_for(user)
    socket = await connect(token)
    await hello(socket)
    await send(socket, {"type": "resolve", "toolCallId": theirs, "requestId": "r", **ALLOW})
    assert (await receive(socket))["code"] == "not_found"
    await send(socket, {"type": "resolve", "toolCallId": mine, "requestId": "r", **ALLOW})
    assert (await receive(socket))["code"] == "forbidden"  # approving bash needs run_commands
    await send(
        socket,
        {
            "type": "resolve",
            "toolCallId": mine,
            "requestId": "r",
            "kind": "input",
            "value": {"answers": {}},
        },
    )
    assert (await receive(socket))["code"] == "not_awaiting"
    await send(
        socket, {"type": "resolve", "toolCallId": mine, "requestId": "r", "kind": "approval"}
    )
    refused = await receive(socket)
    assert (refused["code"], refused["field"]) == ("validation_error", "decision")
    await socket.disconnect()


@sync_to_async
def new_launch(user, name: str) -> str:
    user.user_permissions.add(Permission.objects.get(codename="run_commands"))
    user = type(user).objects.get(pk=user.pk)  # a fresh permission cache
    return str(launch_create(owner=user, name=name, command="sleep 1").pk)


async def test_workbench_snapshot_then_changes_of_my_launches_only(user, other_user):
    mine = await new_launch(user, "dev server")
    await published()  # its own launch.changed is not what this test waits for
    token = await token_for(user)
    socket = await connect(token, path="/ws/workbench/")
    snapshot = await receive(socket)
    assert snapshot["type"] == "snapshot"
    assert [launch["id"] for launch in snapshot["launches"]] == [mine]
    await new_launch(other_user, "theirs")
    second = await new_launch(user, "watcher")
    changed = await receive(socket)
    assert changed["type"] == "launch.changed" and changed["launch"]["id"] == second
    assert changed["launch"]["name"] == "watcher"
    assert await socket.receive_nothing(timeout=0.2)
    await send(socket, {"type": "subscribe"})
    assert (await receive(socket))["type"] == "error"  # it takes no frames; it stays open
    await socket.disconnect()


async def test_workbench_first_frame_is_its_snapshot_on_every_connect(user):
    """No ``hello`` on /ws/workbench/ (the contract: a snapshot on connect); its snapshot is
    the first frame of every connection, which is what tells the page it is live and resets
    its reconnect delay (docs/realtime.md)."""
    mine = await new_launch(user, "dev server")
    await published()
    token = await token_for(user)
    for _ in range(2):  # a reconnect is a new connection: the same first frame
        socket = await connect(token, path="/ws/workbench/")
        first = await receive(socket)
        assert list(first) == ["type", "launches"] and first["type"] == "snapshot"
        assert [launch["id"] for launch in first["launches"]] == [mine]
        assert await socket.receive_nothing(timeout=0.2)  # nothing else until a change
        await socket.disconnect()


async def test_workbench_without_credentials_is_closed_4401():
    socket = await connect(path="/ws/workbench/")
    assert (await socket.receive_output(timeout=5)) == {"type": "websocket.close", "code": 4401}


@sync_to_async
def end_long_ago(launch_id: str) -> None:
    long_ago = timezone.now() - timedelta(days=40)
    Launch.objects.filter(pk=launch_id).update(
        status=ProcessStatus.EXITED, exit_code=0, finished_at=long_ago
    )
    folder = launch_folder(launch_id)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "output.txt").write_text("done\n")


async def test_purged_launches_are_removed_from_the_workbench(user):
    old = await new_launch(user, "old build")
    running = await new_launch(user, "dev server")
    await end_long_ago(old)
    await published()
    token = await token_for(user)
    socket = await connect(token, path="/ws/workbench/")
    assert {launch["id"] for launch in (await receive(socket))["launches"]} == {old, running}
    assert await sync_to_async(launches_purge)(older_than_days=30) == 1
    assert await receive(socket) == {"type": "launch.removed", "id": old}
    assert not launch_folder(old).exists()
    assert await sync_to_async(Launch.objects.filter(pk=running).exists)()
    await socket.disconnect()
