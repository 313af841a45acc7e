"""``manage.py mcp_add NAME -- COMMAND ARGS…`` (a stdio server) or ``manage.py mcp_add NAME
--url URL [--header K=V]`` (Streamable HTTP): register an MCP server whose tools join the
catalog as ``mcp__NAME__<tool>``, then list its tools (docs/mcp.md). Secret values (``--env``,
``--header``) are stored sealed and never printed."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from conversations.errors import ValidationFailed
from tools.models import McpServer
from tools.runtime.mcp.services import McpUnavailable, mcp_server_refresh, mcp_server_save


def _pair(raw: str) -> tuple[str, str]:
    """``NAME=VALUE`` as a pair. A refused one is not echoed: without its ``=`` it may be a
    secret value given alone (``--header "Authorization: Bearer …"``)."""
    name, sep, value = raw.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError("must be NAME=VALUE; this one has no '='.")
    if not name:
        raise argparse.ArgumentTypeError("must be NAME=VALUE; this one has no name before '='.")
    return name, value


class Command(BaseCommand):
    help = (
        "Register an MCP server: NAME -- COMMAND ARGS... (stdio) or NAME --url URL (Streamable "
        "HTTP), then list its tools."
    )

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> Any:
        """Everything after the first ``--`` is the stdio server's command, whatever it looks
        like (argparse would read its options as ours)."""
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.usage = "%(prog)s NAME [options] (-- COMMAND [ARGS...] | --url URL)"
        parse = parser.parse_args

        def parse_args(args: Any = None, namespace: Any = None) -> Any:
            args = list(sys.argv[2:] if args is None else args)
            command: list[str] = []
            if "--" in args:
                split = args.index("--")
                args, command = args[:split], args[split + 1 :]
            options = parse(args, namespace)
            options.command = command
            return options

        parser.parse_args = parse_args
        return parser

    def add_arguments(self, parser):
        parser.add_argument("name", help="Part of its tools' names: mcp__NAME__<tool>.")
        parser.add_argument("--url", default="", help="A Streamable HTTP server's URL.")
        parser.add_argument(
            "--env",
            type=_pair,
            action="append",
            default=[],
            metavar="K=V",
            help="An environment variable of a stdio server (a secret: stored sealed).",
        )
        parser.add_argument(
            "--header",
            type=_pair,
            action="append",
            default=[],
            metavar="K=V",
            help="A header sent to an HTTP server (a secret: stored sealed).",
        )
        parser.add_argument(
            "--owner", metavar="USERNAME", help="Serve only this user's conversations."
        )
        parser.add_argument(
            "--disabled", action="store_true", help="Register it disabled (no call runs)."
        )

    def handle(self, *args, **options):
        url, command = options["url"], options["command"]
        if bool(url) == bool(command):
            raise CommandError("Give either -- COMMAND ARGS... (stdio) or --url URL (HTTP).")
        if url and options["env"]:
            raise CommandError("--env is for stdio servers; an HTTP server takes --header.")
        if command and options["header"]:
            raise CommandError("--header is for HTTP servers; a stdio server takes --env.")
        owner = None
        if options["owner"]:
            User = get_user_model()
            owner = User.objects.filter(**{User.USERNAME_FIELD: options["owner"]}).first()
            if owner is None:
                raise CommandError(f"No user named {options['owner']!r}.")
        try:
            server = mcp_server_save(
                name=options["name"],
                transport=McpServer.Transport.HTTP if url else McpServer.Transport.STDIO,
                command=command[0] if command else "",
                arguments=command[1:],
                url=url,
                environment=dict(options["env"]),
                headers=dict(options["header"]),
                enabled=not options["disabled"],
                owner=owner,
            )
        except ValidationFailed as exc:
            raise CommandError(exc.message) from None
        scope = f"for {owner.get_username()}" if owner else "for every owner"
        self.stdout.write(f"MCP server {server.name} registered ({server.transport}, {scope}).")
        try:
            names = mcp_server_refresh(server=server)
        except McpUnavailable as exc:
            raise CommandError(
                f"{exc}. It stays registered: list its tools again with the admin's action "
                "“Refresh tools”."
            ) from None
        listed = ", ".join(f"mcp__{server.name}__{n}" for n in names) or "none"
        self.stdout.write(f"{len(names)} tool(s): {listed}")
