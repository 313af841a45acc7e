"""Path traversal and symlink escapes in every path argument (docs/subsystems/path_tools.md):
each path tool with each way out of the workspace, table-driven, on real files; and the API
arguments that name a folder (a conversation's ``workspace``, a launch's ``cwd``).

Nothing outside is ever read or listed: a path argument that leads out is refused naming the
path; a glob or pattern argument that points out matches nothing outside."""

from __future__ import annotations

from pathlib import Path

import pytest

from conversations.storage import conversation_dir
from tests.conversations.api_helpers import API, assert_error, grant_run_commands
from tests.tools.file_helpers import call_context
from tools.runtime import registry
from tools.runtime.base import ToolError
from tools.runtime.paths import workspace_ready

SECRET = "top-secret-line"

# How each tool takes a path argument: the arguments besides it.
PATH_TOOLS = {
    "read": {},
    "grep": {"pattern": SECRET},
    "find": {"pattern": "*"},
    "ls": {},
}


@pytest.fixture
def ws(tmp_path) -> Path:
    workspace = workspace_ready(call_context("ls", {}))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET + "\n")
    (workspace / "ok.txt").write_text("inside\n")
    (workspace / "sub").mkdir()
    (workspace / "leak.txt").symlink_to(outside / "secret.txt")  # a file link out
    (workspace / "leakdir").symlink_to(outside)  # a folder link out
    (workspace / "hop").symlink_to(workspace / "leakdir")  # a link to a link out
    (workspace / "sub" / "up").symlink_to("../../../outside")  # relative, climbing out
    (workspace / "loop").symlink_to(workspace / "loop")
    other = conversation_dir("00000000-0000-0000-0000-00000000000b")  # another conversation's
    other.mkdir(parents=True)
    (other / "result.json").write_text(SECRET)
    return workspace


def escapes(ws: Path) -> list[str]:
    outside = ws.parents[2] / "outside"  # tmp_path/outside, beside the workspace root
    assert outside.is_dir(), outside
    climb = "../" * (len(ws.relative_to(ws.parents[2]).parts))
    return [
        f"{climb}outside/secret.txt",
        f"{climb}outside",
        "..",
        "../..",
        "sub/../../",
        "./sub/../../../outside/secret.txt",
        str(outside / "secret.txt"),
        str(outside),
        "/etc/passwd",
        "/",
        "leak.txt",
        "leakdir",
        "leakdir/secret.txt",
        "hop/secret.txt",
        "sub/up",
        "sub/up/secret.txt",
        "loop",
        "ok.txt\x00/../../outside/secret.txt",
        "\x00",
        str(conversation_dir("00000000-0000-0000-0000-00000000000b") / "result.json"),
    ]


async def _run(tool: str, ws: Path, **arguments):
    ctx = call_context(tool, {**PATH_TOOLS[tool], **arguments}, workspace=ws)
    return await registry.handler_for(tool)(ctx)


@pytest.mark.parametrize("tool", sorted(PATH_TOOLS))
async def test_every_path_tool_refuses_every_way_out(ws, tool):
    assert set(PATH_TOOLS) >= {
        name
        for name in registry.HANDLERS
        if name in ("read", "grep", "find", "ls", "write", "edit")
    }, "a new path tool: add it to PATH_TOOLS"
    for raw in escapes(ws):
        try:
            result = await _run(tool, ws, path=raw)
        except ToolError as refused:
            assert refused.field in ("path", None), (raw, refused.field)
            assert SECRET not in refused.message
            continue
        raise AssertionError(f"{tool} path={raw!r} was not refused: {result.items[:5]}")


@pytest.mark.parametrize(
    ("tool", "argument"),
    [("grep", "glob"), ("find", "pattern")],
)
async def test_a_glob_argument_pointing_out_matches_nothing_outside(ws, tool, argument):
    for glob in ("../*", "../../*", "**/../../*", "/*", "/etc/*", "*/secret.txt", "**/*", "*"):
        result = await _run(tool, ws, **{argument: glob})
        text = "\n".join(map(str, result.items))
        assert SECRET not in text and "secret.txt" not in text, (glob, result.items)
        assert "passwd" not in text and "outside/" not in text, (glob, result.items)


async def test_a_walk_never_follows_a_link_out(ws):
    for tool in ("grep", "find"):
        result = await _run(tool, ws)
        text = "\n".join(map(str, result.items))
        assert SECRET not in text and "secret.txt" not in text, (tool, result.items)
    listing = await _run("ls", ws)
    assert "leakdir@" in listing.items  # named as a link, never entered


def test_registry_names_the_path_tools():
    assert {"read", "grep", "find", "ls"} <= set(registry.HANDLERS)


# --- API arguments that name a folder --------------------------------------------------------

FOLDER_ESCAPES = [
    "..",
    "../x",
    "a/../../x",
    "/",
    "/etc",
    "/tmp",
    "~root/../..",
    "link-out",
    "link-out/x",
]


@pytest.mark.django_db
@pytest.mark.parametrize("raw", FOLDER_ESCAPES)
def test_a_workspace_or_a_cwd_outside_the_owners_root_is_422(api, user, settings, tmp_path, raw):
    root = Path(settings.TOOLCORE_WORKSPACE_ROOT) / str(user.pk)
    root.mkdir(parents=True, exist_ok=True)
    (root / "link-out").symlink_to(tmp_path)
    grant_run_commands(user)
    created = api.post_json(f"{API}/conversations", {"workspace": raw})
    assert_error(created, 422, "validation_error", field="workspace")
    launched = api.post_json(f"{API}/launches", {"name": "x", "command": "true", "cwd": raw})
    assert_error(launched, 422, "validation_error", field="cwd")


@pytest.mark.django_db
def test_a_nul_byte_in_a_folder_never_reaches_the_file_system(api, user):
    """Text entering the server has U+0000 replaced (docs/architecture.md): the folder is then
    an ordinary name inside the root, never a path cut short at the NUL."""
    created = api.post_json(f"{API}/conversations", {"workspace": "a\x00/../../.."})
    assert created.status_code in (201, 422), created.content
    if created.status_code == 201:
        assert "\x00" not in created.json()["workspace"]
