"""Path confinement: the workspace and the conversation's own files, symlinks followed first."""

from __future__ import annotations

import os
import re
import stat
import uuid
from pathlib import Path

import pytest

from conversations.storage import conversation_dir
from tools.runtime.base import ToolError
from tools.runtime.paths import (
    PATH_QUOTE_BYTES,
    Confinement,
    resolve_path,
    workspace_ready,
)

from .file_helpers import call_context


@pytest.fixture
def ctx():
    return call_context("read", {"path": "a.txt"})


@pytest.fixture
def ws(ctx) -> Path:
    return workspace_ready(ctx)


@pytest.fixture
def outside(tmp_path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text("secret\n")
    return folder


def _resolve(ctx, raw):
    return resolve_path(raw, workspace=ctx.workspace, managed_root=ctx.managed_root)


def _refusal(ctx, raw) -> str:
    with pytest.raises(ToolError) as refused:
        _resolve(ctx, raw)
    assert refused.value.field == "path"
    return refused.value.message


def test_the_workspace_is_created_on_first_use_private_with_its_parents(ctx):
    assert not ctx.workspace.exists() and not ctx.workspace.parent.exists()
    assert workspace_ready(ctx) == ctx.workspace
    assert stat.S_IMODE(ctx.workspace.stat().st_mode) == 0o700
    assert workspace_ready(ctx) == ctx.workspace  # the second use finds it


def test_a_workspace_that_is_a_file_is_a_clear_error(ctx):
    ctx.workspace.parent.mkdir(parents=True)
    ctx.workspace.write_text("")
    with pytest.raises(ToolError, match="not a directory"):
        workspace_ready(ctx)


def test_relative_paths_resolve_in_the_workspace(ctx, ws):
    (ws / "src").mkdir()
    assert _resolve(ctx, "src/a.py") == ws.resolve() / "src" / "a.py"
    assert _resolve(ctx, "./src/../b.txt") == ws.resolve() / "b.txt"
    assert _resolve(ctx, None) == ws.resolve()
    assert _resolve(ctx, str(ws / "src")) == ws.resolve() / "src"


@pytest.mark.parametrize("raw", ["..", "../x", "src/../../x", "../" * 30 + "etc/passwd"])
def test_climbing_out_is_refused_and_named(ctx, ws, raw):
    message = _refusal(ctx, raw)
    assert message.startswith(f"Path refused: {raw} resolves outside the workspace")
    assert str(ws.resolve()) in message


def test_absolute_paths_outside_are_refused(ctx, ws, outside):
    assert "/etc/passwd resolves outside" in _refusal(ctx, "/etc/passwd")
    assert _refusal(ctx, str(outside / "secret.txt"))
    assert _refusal(ctx, "/")


def test_a_long_refused_path_is_quoted_cut(ctx, ws):
    raw = "../" + "d" * 5000
    message = _refusal(ctx, raw)
    quoted = message.removeprefix("Path refused: ").split(" resolves outside")[0]
    assert quoted.endswith("…") and len(quoted.encode()) <= PATH_QUOTE_BYTES
    assert len(message.encode()) < 1024


def test_nul_bytes_and_empty_paths_are_refused(ctx, ws):
    assert _refusal(ctx, "a\x00b") == "Path refused: it contains a NUL byte."
    assert _refusal(ctx, "") == "Path refused: it is empty."


def test_a_symlink_in_the_workspace_pointing_outside_is_refused(ctx, ws, outside):
    (ws / "to-file").symlink_to(outside / "secret.txt")
    (ws / "to-dir").symlink_to(outside)
    assert "to-file resolves outside" in _refusal(ctx, "to-file")
    assert "to-dir resolves outside" in _refusal(ctx, "to-dir")
    assert "to-dir/secret.txt resolves outside" in _refusal(ctx, "to-dir/secret.txt")
    assert _refusal(ctx, str(ws / "to-dir" / "secret.txt"))


def test_a_symlink_that_stays_inside_resolves_to_its_target(ctx, ws):
    (ws / "real").mkdir()
    (ws / "link").symlink_to(ws / "real")
    assert _resolve(ctx, "link/a.py") == ws.resolve() / "real" / "a.py"


def test_a_symlink_loop_is_refused(ctx, ws):
    (ws / "a").symlink_to(ws / "b")
    (ws / "b").symlink_to(ws / "a")
    assert "symlink loop" in _refusal(ctx, "a")
    # The lenient resolution would leave "a/../../x" unresolved and seemingly inside.
    assert "symlink loop" in _refusal(ctx, "a/../../../etc/passwd")


def test_the_managed_files_are_readable_by_absolute_path(ctx, ws):
    managed = ctx.managed_root / "tool-calls" / "k1" / "g1"
    managed.mkdir(parents=True)
    (managed / "output.txt").write_text("ok\n")
    assert _resolve(ctx, str(managed / "output.txt")) == managed.resolve() / "output.txt"


def test_another_conversations_managed_files_are_refused(ctx, ws):
    other = conversation_dir(uuid.uuid4()) / "tool-calls" / "k" / "g1" / "output.txt"
    other.parent.mkdir(parents=True)
    other.write_text("theirs\n")
    assert "resolves outside" in _refusal(ctx, str(other))
    # A sibling whose name starts with this conversation's id is another folder too.
    twin = Path(str(ctx.managed_root) + "0") / "x.txt"
    twin.parent.mkdir(parents=True)
    twin.write_text("")
    assert "resolves outside" in _refusal(ctx, str(twin))
    # And the data directory above the conversation's folder.
    assert "resolves outside" in _refusal(ctx, str(ctx.managed_root.parent))


def test_a_workspace_reached_through_a_symlinked_root_still_matches(ctx, tmp_path, settings):
    """The workspace root itself may be a symlink the operator made: only folders below it
    must not be."""
    real_root = tmp_path / "real-root"
    real_root.mkdir()
    alias = tmp_path / "alias-root"
    alias.symlink_to(real_root)
    settings.TOOLCORE_WORKSPACE_ROOT = alias
    aliased = call_context("read", {}, workspace=alias / "1" / "ws")
    ws = workspace_ready(aliased)
    assert ws == real_root / "1" / "ws" and ws.is_dir()
    assert _resolve(aliased, str(ws / "a.txt")) == real_root / "1" / "ws" / "a.txt"
    assert _resolve(aliased, str(alias / "1" / "ws" / "a.txt")) == ws / "a.txt"


def test_an_opened_descriptor_outside_is_refused(ctx, ws, outside):
    confinement = Confinement.of(workspace=ctx.workspace, managed_root=ctx.managed_root)
    fd = os.open(outside / "secret.txt", os.O_RDONLY)
    try:
        with pytest.raises(ToolError, match="moved outside the workspace while opened"):
            confinement.check_opened(fd, str(ws / "secret.txt"))
    finally:
        os.close(fd)


def test_open_refuses_a_final_symlink_even_one_left_after_the_check(ctx, ws, outside):
    confinement = Confinement.of(workspace=ctx.workspace, managed_root=ctx.managed_root)
    real = confinement.resolve("later.txt")  # checked while it did not exist
    (ws / "later.txt").symlink_to(outside / "secret.txt")  # then swapped in
    with pytest.raises(ToolError, match="is a symlink that did not resolve"):
        confinement.open(real)


def test_shown_paths_are_workspace_relative_or_absolute(ctx, ws):
    confinement = Confinement.of(workspace=ctx.workspace, managed_root=ctx.managed_root)
    assert confinement.shown(str(ws.resolve())) == "."
    assert confinement.shown(str(ws.resolve() / "src" / "a.py")) == "src/a.py"
    managed = str(ctx.managed_root / "x.txt")
    assert confinement.shown(managed) == managed
    assert confinement.shown(str(ws.resolve() / "a\nb")) == "a\\nb"


# --- the workspace, checked at every use -----------------------------------------------------

WORKSPACE_REFUSED = re.compile(r"^Workspace refused: .+ resolves outside the workspace root\b")


def _workspace_refusal(ctx) -> str:
    with pytest.raises(ToolError) as refused:
        workspace_ready(ctx)
    assert WORKSPACE_REFUSED.match(refused.value.message), refused.value.message
    return refused.value.message


def test_a_workspace_swapped_for_a_symlink_is_refused_at_its_next_use(ctx, ws):
    """What ``cd .. && mv "$PWD" "$PWD.old" && ln -s / "$PWD"`` run in the workspace leaves."""
    ws.rename(ws.with_name(ws.name + ".old"))
    ws.symlink_to("/")
    assert str(ctx.workspace) in _workspace_refusal(ctx)
    with pytest.raises(ToolError, match=WORKSPACE_REFUSED):
        Confinement.ready(ctx)


def test_an_owner_folder_swapped_for_a_symlink_is_refused(ctx, ws):
    """A command can climb to the owner's folder and swap that one instead."""
    owner = ws.parent
    owner.rename(owner.with_name(owner.name + ".old"))
    owner.symlink_to("/")
    _workspace_refusal(ctx)
    assert not Path("/", ws.name).exists()  # nothing was created through the link


def test_a_workspace_that_became_a_symlink_before_its_first_use_is_refused(ctx, tmp_path):
    """A conversation made with a workspace name that a command then made a symlink, even
    one to a folder inside the owner's root."""
    sibling = ctx.workspace.parent / "sibling"
    sibling.mkdir(parents=True)
    ctx.workspace.symlink_to(sibling)
    _workspace_refusal(ctx)
    ctx.workspace.unlink()
    ctx.workspace.symlink_to("/")
    _workspace_refusal(ctx)


def test_a_workspace_outside_its_owners_folder_is_refused(ctx, settings):
    elsewhere = call_context("read", {}, workspace=Path(settings.TOOLCORE_WORKSPACE_ROOT) / "2")
    message = _workspace_refusal(elsewhere)
    assert "not below your workspace root" in message
