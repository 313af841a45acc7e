"""A workspace swapped for a symlink by a command (docs/security.md, "The workspace at every
use"): real approved commands run by a real worker make the swap, and every later path tool call,
command and background run of that workspace is refused without reading or running anything.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import Permission

from conversations.storage import resolve_workspace
from tests.conftest import client_for
from tests.conversations.api_helpers import API, assert_error
from tests.conversations.helpers import new_conversation
from tests.tools.worker_helpers import model_call, response_of, running_worker, wait_for
from tools.models import AsyncRun, Launch
from tools.runtime.registry import HANDLERS
from tools.sandbox import bwrap_problem
from tools.workspaces import conversation_workspace

pytestmark = pytest.mark.django_db(transaction=True)

REFUSED = "resolves outside the workspace root"
SWAP = 'cd .. && mv "$PWD" "$PWD.old" && ln -s / "$PWD"'


@pytest.fixture(autouse=True)
def unsandboxed(settings, request):
    """The swaps as a command can make them with ``TOOLCORE_SANDBOX=off``: the workspace check
    must hold without the sandbox too. In the sandbox the command cannot make them at all
    (``test_in_the_sandbox_a_command_cannot_swap_its_workspace``)."""
    if "sandboxed" not in request.keywords:
        settings.TOOLCORE_SANDBOX = "off"


def _run(user, conversation, tool: str, arguments: dict) -> dict:
    """One model call of ``tool``, approved when it asks; its response once settled."""
    _, _, call_id = model_call(user, tool, arguments, conversation)
    return wait_for(lambda: response_of(call_id), timeout=15)


def _refused(payload: dict) -> str:
    text = payload["modelContent"][0]["text"]
    assert payload["outcome"] == "failed", text
    assert "Reason: Workspace refused: " in text and REFUSED in text, text
    return text


def test_a_command_that_swaps_its_workspace_for_a_link_to_the_root_opens_nothing(user, tmp_path):
    """The issue's command, approved and run: afterwards ``read /etc/passwd`` (allowed by
    default, so never asked) is refused, and so are a command and a background run, which
    never start."""
    conversation = new_conversation(user)
    marker = tmp_path / "ran"
    with running_worker(handlers=HANDLERS):
        assert _run(user, conversation, "ls", {})["outcome"] == "completed"
        swapped = _run(user, conversation, "bash", {"command": SWAP})
        assert swapped["outcome"] == "completed"
        assert "exit code" not in swapped["modelContent"][0]["text"]  # it did what it says
        for path in ("/etc/passwd", "etc/passwd", "."):
            text = _refused(_run(user, conversation, "read", {"path": path}))
            assert "root:" not in text
        _refused(_run(user, conversation, "ls", {"path": "etc"}))
        _refused(_run(user, conversation, "grep", {"pattern": "root", "path": "etc"}))
        _refused(_run(user, conversation, "bash", {"command": f"touch {marker}"}))
        background = {"command": f"touch {marker}", "run_in_background": True}
        _refused(_run(user, conversation, "bash", background))
    assert not marker.exists()
    assert not AsyncRun.objects.exists()


def test_a_workspace_name_a_command_turned_into_a_link_is_refused(user, tmp_path):
    """A conversation made with workspace ``proj`` before the folder exists; a command of
    another conversation puts a link to ``/`` there. The conversation's calls are refused."""
    victim = new_conversation(user, workspace="proj")
    other = new_conversation(user, workspace="other")
    marker = tmp_path / "ran"
    with running_worker(handlers=HANDLERS):
        made = _run(user, other, "bash", {"command": "ln -s / ../proj && echo linked"})
        assert made["modelContent"][0]["text"] == "linked\n"
        _refused(_run(user, victim, "read", {"path": "/etc/passwd"}))
        _refused(_run(user, victim, "find", {"pattern": "passwd", "path": "etc"}))
        _refused(_run(user, victim, "bash", {"command": f"touch {marker}"}))
    assert not marker.exists()
    assert Path(resolve_workspace(user.pk, "other")).is_dir()  # the other one is untouched


def test_a_launch_whose_folder_became_a_link_does_not_start(user, settings, tmp_path):
    """A launch's ``cwd`` is checked when it is made and again when a worker starts it."""
    user.user_permissions.add(Permission.objects.get(codename="run_commands"))
    launcher = client_for(user)
    marker = tmp_path / "ran"
    body = {"name": "server", "command": f"touch {marker}", "cwd": "site"}
    created = launcher.post_json(f"{API}/launches", body)
    assert created.status_code == 201, created.content
    owner = Path(settings.TOOLCORE_WORKSPACE_ROOT) / str(user.pk)
    owner.mkdir(parents=True, exist_ok=True)
    (owner / "site").symlink_to("/")
    with running_worker(handlers=HANDLERS):
        launch = wait_for(
            lambda: Launch.objects.filter(pk=created.json()["id"]).exclude(status="running").first()
        )
    assert (launch.status, launch.exit_code, launch.pid) == ("exited", None, None)
    assert not marker.exists()


def test_an_owner_folder_swapped_for_a_link_refuses_new_workspaces_and_launches(
    user, settings, tmp_path
):
    owner = Path(settings.TOOLCORE_WORKSPACE_ROOT) / str(user.pk)
    owner.symlink_to(tmp_path)
    user.user_permissions.add(Permission.objects.get(codename="run_commands"))
    api = client_for(user)
    assert_error(
        api.post_json(f"{API}/conversations", {"workspace": "x"}),
        422,
        "validation_error",
        field="workspace",
    )
    launched = api.post_json(f"{API}/launches", {"name": "x", "command": "true", "cwd": "x"})
    assert_error(launched, 422, "validation_error", field="cwd")


@pytest.mark.sandboxed
@pytest.mark.skipif(bwrap_problem() is not None, reason=f"no usable bubblewrap: {bwrap_problem()}")
def test_in_the_sandbox_a_command_cannot_swap_its_workspace(user):
    """Its workspace is a mount of its own and its parent a tmpfs of the sandbox's own: what the
    command moves and links there is gone with the sandbox, and the path tools go on reading
    the real workspace."""
    conversation = new_conversation(user)
    with running_worker(handlers=HANDLERS):
        assert _run(user, conversation, "ls", {})["outcome"] == "completed"  # made on first use
        workspace = conversation_workspace(conversation)
        (workspace / "kept.txt").write_text("still here\n")
        assert _run(user, conversation, "bash", {"command": SWAP})["outcome"] == "completed"
        read = _run(user, conversation, "read", {"path": "kept.txt"})
        assert read["outcome"] == "completed" and "still here" in read["modelContent"][0]["text"]
    assert workspace.is_dir() and not workspace.is_symlink()
    assert not Path(f"{workspace}.old").exists()
