"""The catalog as MCP tools (``tools/list``): each tool's JSON Schema, a title and a description,
and annotations derived from the catalog (docs/mcp.md, "Tools"):

- ``readOnlyHint``: a tool of risk ``read`` (it changes nothing);
- ``destructiveHint``: a tool of risk ``execute`` (it runs or stops programs, which may change
  or delete anything the workspace's user may);
- ``openWorldHint``: true for ``bash`` (a command may reach the network and any program) and for
  tools the catalog does not declare itself (their host decides what they touch); false for the
  path tools and the async-run tools, which see only the conversation's workspace and runs.

Suspending tools (``ask_user``) are not published: the MCP client is the agent's own host, with
its own user to ask; a question put through Toolcore would wait for someone on Toolcore's pages,
unseen by the client's user.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

from tools.catalog import ToolSpec, catalog_tools

# What the catalog leaves to its readers: a title and a line on what each tool does.
_TEXTS: dict[str, tuple[str, str]] = {
    "bash": (
        "Run a shell command",
        "Run a bash command in the conversation's workspace, in a process group of its own, its "
        "output captured. `timeout` in seconds (default 120). A command still running after a "
        "while, or started with `run_in_background`, goes on as an async run: read its output "
        "with async_bash_logs, stop it with async_bash_kill. A command no permission rule "
        "allows waits for a person's approval.",
    ),
    "read": (
        "Read a file",
        "Read a text file of the workspace by lines: `offset` is the first line (1-based), "
        "`limit` at most 2000 lines.",
    ),
    "grep": (
        "Search file contents",
        "Search the files under `path` (default: the workspace) for a regular expression "
        "(Python syntax); `glob` filters the file names, `ignore_case` as it says.",
    ),
    "find": (
        "Find files",
        "Find the files under `path` (default: the workspace) whose path matches the glob "
        "`pattern`.",
    ),
    "ls": ("List a directory", "List a directory of the workspace (default: its root)."),
    "async_bash_logs": (
        "Read a background command's output",
        "Page the output of an async run (a bash command gone to the background) by lines: "
        "`offset` 0-based (default: the last lines), `limit` at most 500, `stream` output, "
        "stdout or stderr.",
    ),
    "async_bash_kill": (
        "Stop a background command",
        "Kill the process group of an async run and answer how it ended.",
    ),
}


def published(spec: ToolSpec, owner_id: Any) -> bool:
    """Whether ``tools/list`` lists the tool to ``owner_id``'s sessions and ``tools/call`` takes
    it: not a suspending tool, nor a registered MCP server's tool that cannot serve the owner's
    conversations (another owner's server, one disabled)."""
    return not spec.suspending and spec.refused_for(owner_id) is None


def published_spec(name: str, owner_id: Any) -> ToolSpec | None:
    """The published tool ``name``; reads the database (the MCP servers' tools): call it off
    the event loop."""
    return next((s for s in catalog_tools() if s.name == name and published(s, owner_id)), None)


def annotations_of(spec: ToolSpec, title: str) -> types.ToolAnnotations:
    read_only = spec.risk == "read"
    return types.ToolAnnotations(
        title=title,
        read_only_hint=read_only,
        # Meaningful only for a tool that changes something (the MCP spec).
        destructive_hint=None if read_only else spec.risk == "execute",
        open_world_hint=spec.subject == "command" or not spec.core,
    )


def mcp_tool(spec: ToolSpec) -> types.Tool:
    title, description = _TEXTS.get(spec.name, (spec.name, spec.description or None))
    schema: dict[str, Any] = dict(spec.schema)
    return types.Tool(
        name=spec.name,
        title=title,
        description=description,
        input_schema=schema,
        annotations=annotations_of(spec, title),
    )


def tools_list(owner_id: Any) -> types.ListToolsResult:
    """Every tool of the catalog published to ``owner_id``, in the catalog's order: the core
    tools, then the registered MCP servers' (``mcp__<server>__<tool>``). Reads the database:
    call it off the event loop."""
    return types.ListToolsResult(
        tools=[mcp_tool(s) for s in catalog_tools() if published(s, owner_id)]
    )
