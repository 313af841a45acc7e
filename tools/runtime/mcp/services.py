"""The MCP servers' rows: registering and changing a server, storing the tools it lists, and
what a worker reads to run a call (docs/mcp.md). The only writers of ``McpServer`` and
``McpTool``; each change moves the server's ``version``, which the processes' catalogs watch
(``specs.py``), and drops this process's catalog after its commit.

Secret values (environment variables, header values) are sealed before they are stored
(``secrets.py``) and never logged: log lines name the server only.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from django.db import transaction
from django.db.models import F
from django.utils import timezone
from jsonschema import SchemaError
from jsonschema.validators import validator_for

from conversations.errors import ValidationFailed
from conversations.models import ToolCall
from tools.catalog import (
    MCP_PREFIX,
    MCP_SERVER_NAME,
    ToolProvider,
    mcp_tool_parts,
    tool_provider_register,
)
from tools.models import McpServer, McpTool

from .addresses import AddressRefused, url_address_check
from .secrets import SecretUnreadable, secret_seal, secrets_open
from .server_config import ServerConfig
from .specs import CATALOG

logger = logging.getLogger(__name__)

SERVER_NAME = re.compile(rf"^{MCP_SERVER_NAME}$")
SERVER_NAME_MAX = 64
TOOL_NAME_MAX = 128
# A header or variable name: what HTTP and a process environment accept.
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEADER = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


class McpUnavailable(Exception):
    """A server a call or a listing cannot use; the message says why, naming the server."""


def _changed() -> None:
    """This process's catalog reads the servers again: now (this transaction sees its own
    change) and after the commit (what other threads read meanwhile was the old rows)."""
    CATALOG.invalidate()
    transaction.on_commit(CATALOG.invalidate)


def _check_name(name: str) -> None:
    if not SERVER_NAME.match(name) or len(name) > SERVER_NAME_MAX:
        raise ValidationFailed(
            "A server's name is 1 to 64 letters, digits and '-', joined by single '_' "
            "(no '__', no '_' at either end): it is part of its tools' names mcp__<server>__<tool>.",
            field="name",
        )


def _sealed(
    current: Mapping[str, str], set_values: Mapping[str, str], remove: Iterable[str]
) -> dict[str, str]:
    """``current`` (names to sealed values) less ``remove``, with ``set_values`` sealed."""
    names = dict(current)
    for name in remove:
        names.pop(name, None)
    for name, value in set_values.items():
        names[name] = secret_seal(value)
    return names


def mcp_server_check(
    *, name: str, transport: str, command: str = "", url: str = "", arguments: Sequence[str] = ()
) -> None:
    """``ValidationFailed`` naming the field when these cannot make a server (the admin's form
    checks with it before saving)."""
    _check_name(name)
    if transport == McpServer.Transport.STDIO:
        if not command.strip():
            raise ValidationFailed("A stdio server needs a command.", field="command")
    elif transport == McpServer.Transport.HTTP:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValidationFailed("A Streamable HTTP server needs an http(s) URL.", field="url")
        try:
            url_address_check(url)
        except AddressRefused as exc:
            raise ValidationFailed(str(exc), field="url") from None
    else:
        raise ValidationFailed("The transport is stdio or http.", field="transport")
    if any(not isinstance(a, str) or "\x00" in a for a in arguments):
        raise ValidationFailed("Arguments are strings without NUL.", field="arguments")


def secret_names_check(field: str, values: Mapping[str, str]) -> None:
    """``ValidationFailed`` for a name that is no environment variable (``field``
    ``environment``) or header name (``headers``), or a value it cannot carry."""
    pattern = _VARIABLE if field == "environment" else _HEADER
    for name, value in values.items():
        if not pattern.match(name):
            raise ValidationFailed(f"{field}: '{name[:64]}' is not a valid name.", field=field)
        if "\x00" in value or (field == "headers" and ("\r" in value or "\n" in value)):
            raise ValidationFailed(
                f"{field}: the value of '{name}' holds a forbidden character.", field=field
            )


def mcp_server_save(
    *,
    name: str,
    transport: str,
    command: str = "",
    arguments: Sequence[str] = (),
    url: str = "",
    environment: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    remove_environment: Iterable[str] = (),
    remove_headers: Iterable[str] = (),
    enabled: bool = True,
    owner: Any = None,
    server: McpServer | None = None,
) -> McpServer:
    """Register a server (``server`` None) or change one, in one transaction. ``environment``
    and ``headers`` set those names' values (sealed), ``remove_*`` drop names; values not named
    are kept as they are. ``ValidationFailed`` naming the field for a bad name, command or URL."""
    mcp_server_check(name=name, transport=transport, command=command, url=url, arguments=arguments)
    secret_names_check("environment", environment or {})
    secret_names_check("headers", headers or {})
    # A server keeps only what its transport uses.
    if transport == McpServer.Transport.STDIO:
        url, headers, remove_headers = "", {}, list((server.headers if server else {}).keys())
    else:
        command, arguments, environment = "", (), {}
        remove_environment = list((server.environment if server else {}).keys())
    with transaction.atomic():
        if server is None:
            if McpServer.objects.filter(name=name).exists():
                raise ValidationFailed(
                    f"An MCP server named '{name}' exists already.", field="name"
                )
            server = McpServer(name=name)
        else:
            server = McpServer.objects.select_for_update().get(pk=server.pk)
            if name != server.name and McpServer.objects.filter(name=name).exists():
                raise ValidationFailed(
                    f"An MCP server named '{name}' exists already.", field="name"
                )
        server.name = name
        server.transport = transport
        server.command = command
        server.arguments = list(arguments)
        server.url = url
        server.environment = _sealed(server.environment, environment or {}, remove_environment)
        server.headers = _sealed(server.headers, headers or {}, remove_headers)
        server.enabled = enabled
        server.owner = owner
        server.version = (server.version or 0) + 1
        server.save()
        _changed()
    logger.info("MCP server saved", extra={"mcp_server": server.name})
    return server


def mcp_server_delete(*, server: McpServer) -> None:
    """Forget a server and its tools. Its calls still unfinished no longer reach a worker: a
    call made ready before stays ``ready`` (a host tool's name now) until cancelled; disable a
    server first to have them settle ``failed``."""
    with transaction.atomic():
        McpServer.objects.filter(pk=server.pk).delete()
        _changed()
    logger.info("MCP server deleted", extra={"mcp_server": server.name})


def _checked_tool(row: dict[str, Any]) -> str | None:
    """Why a listed tool cannot join the catalog, or None."""
    name = row.get("name")
    if not isinstance(name, str) or not name or len(name) > TOOL_NAME_MAX:
        return "a name of 1 to 128 characters"
    schema = row.get("inputSchema")
    if not isinstance(schema, dict):
        return f"tool “{name}”: an input schema that is an object"
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        return f"tool “{name}”: an input schema that is valid JSON Schema ({exc.message[:200]})"
    return None


def mcp_tools_store(*, server_id: int, tools: Sequence[dict[str, Any]]) -> list[str]:
    """Replace the server's tool rows with ``tools`` as it just listed them, in one transaction
    (its ``version`` moves only when they changed). A tool that cannot join the catalog (no
    name, a schema that is not JSON Schema) is left out and named in ``tools_error``. Answers
    the names stored."""
    now = timezone.now()
    kept: dict[str, dict[str, Any]] = {}
    refused = []
    for row in tools:
        problem = _checked_tool(row)
        if problem is None:
            kept[row["name"]] = row
        else:
            refused.append(problem)
    with transaction.atomic():
        server = McpServer.objects.select_for_update().filter(pk=server_id).first()
        if server is None:
            return []
        before = {
            t.name: (t.description, t.input_schema, t.annotations)
            for t in McpTool.objects.filter(server_id=server_id)
        }
        after = {
            n: (r["description"], r["inputSchema"], r.get("annotations") or {})
            for n, r in kept.items()
        }
        if before != after:
            McpTool.objects.filter(server_id=server_id).delete()
            McpTool.objects.bulk_create(
                McpTool(
                    server_id=server_id,
                    name=n,
                    description=d,
                    input_schema=s,
                    annotations=a,
                    refreshed_at=now,
                )
                for n, (d, s, a) in after.items()
            )
        else:
            McpTool.objects.filter(server_id=server_id).update(refreshed_at=now)
        error = "" if not refused else "Left out, as they need " + "; ".join(refused)
        McpServer.objects.filter(pk=server_id).update(
            tools_listed_at=now,
            tools_error=error[:1000],
            version=F("version") + (1 if before != after else 0),
        )
        _changed()
    logger.info(
        "MCP server listed %d tools%s",
        len(kept),
        "" if before == after else " (changed)",
        extra={"mcp_server": server.name},
    )
    return sorted(kept)


def mcp_tools_failed(*, server_id: int, error: str) -> None:
    """Record why listing the server's tools failed (its rows stay as they were)."""
    McpServer.objects.filter(pk=server_id).update(tools_error=error[:1000])


def server_config(server: McpServer) -> ServerConfig:
    """What connecting to ``server`` needs, its secrets opened; ``McpUnavailable`` when a
    secret cannot be opened (``SECRET_KEY`` changed without a fallback)."""
    try:
        environment = secrets_open(server.environment)
        headers = secrets_open(server.headers)
    except SecretUnreadable:
        raise McpUnavailable(
            f"MCP server “{server.name}”: a stored secret cannot be opened with this SECRET_KEY; "
            "set its environment variables and headers again."
        ) from None
    return ServerConfig(
        id=server.pk,
        name=server.name,
        transport=server.transport,
        command=server.command,
        arguments=tuple(server.arguments),
        url=server.url,
        environment=environment,
        headers=headers,
    )


def mcp_server_refresh(*, server: McpServer) -> list[str]:
    """Connect to ``server``, list its tools and store them (``mcp_add``, the admin's save and
    its "refresh tools" action). ``McpUnavailable`` saying why when it cannot be reached; the
    reason is kept on the row."""
    from .connection import error_text, tools_list_once  # the SDK: only where it connects

    try:
        tools = tools_list_once(server_config(server))
    except McpUnavailable as exc:
        mcp_tools_failed(server_id=server.pk, error=str(exc))
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of the server's is reported
        # What an HTTP URL answered is not repeated: the URL may be any service's.
        detail = error_text(exc, quoted=server.transport != McpServer.Transport.HTTP)
        reason = f"MCP server “{server.name}” could not list its tools: {detail}"
        mcp_tools_failed(server_id=server.pk, error=reason)
        logger.warning("MCP server could not list its tools", extra={"mcp_server": server.name})
        raise McpUnavailable(reason) from None
    return mcp_tools_store(server_id=server.pk, tools=tools)


def mcp_server_for_call(*, name: str, owner_id: Any) -> ServerConfig:
    """The server a worker's call of ``mcp__<name>__…`` goes to, as it is now; ``McpUnavailable``
    when it was deleted or disabled since the call was supervised, or serves another owner."""
    server = McpServer.objects.filter(name=name).first()
    if server is None:
        raise McpUnavailable(f"MCP server “{name}” is not registered any more.")
    if not server.enabled:
        raise McpUnavailable(f"MCP server “{name}” is disabled.")
    if server.owner_id is not None and server.owner_id != owner_id:
        raise McpUnavailable(
            f"MCP server “{name}” serves only its owner's conversations, not this one's."
        )
    return server_config(server)


def mcp_ready_tools() -> list[str]:
    """The names of the ``ready`` calls of registered servers' tools: what a worker claims
    besides its core tools (one query on the unfinished calls, none when no server exists)."""
    servers = CATALOG.server_names()
    if not servers:
        return []
    names = (
        ToolCall.objects.filter(state=ToolCall.State.READY, tool_name__startswith=MCP_PREFIX)
        .order_by()
        .values_list("tool_name", flat=True)
        .distinct()
    )
    return [n for n in names if (parts := mcp_tool_parts(n)) is not None and parts[0] in servers]


def register() -> None:
    """Put the servers' tools in the catalog (``ToolsConfig.ready``, every process)."""
    tool_provider_register(
        ToolProvider(prefix=MCP_PREFIX, spec=CATALOG.spec, listing=CATALOG.listing)
    )
