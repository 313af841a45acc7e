"""``manage.py run_commands grant|revoke USERNAME…`` and ``run_commands list``: who may run
programs (``tools.run_commands``: typing a ``!command``, approving ``bash`` and host tools,
starting launches)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from conversations.grants import (
    RUN_COMMANDS,
    run_commands_grant,
    run_commands_holders,
    run_commands_revoke,
    run_commands_sources,
)


class Command(BaseCommand):
    help = (
        f"Grant or revoke the permission {RUN_COMMANDS} (type commands, approve tools that run "
        "programs, start launches) by username, or list who holds it. Granting or revoking "
        "again changes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("action", choices=("grant", "revoke", "list"))
        parser.add_argument("usernames", nargs="*", metavar="USERNAME")

    def handle(self, *args, **options):
        action, names = options["action"], options["usernames"]
        if action == "list":
            if names:
                raise CommandError("list takes no USERNAME.")
            self._list()
            return
        if not names:
            raise CommandError(f"{action}: give at least one USERNAME.")
        users = self._users(names)
        with transaction.atomic():
            for user in users:
                if action == "grant":
                    self._grant(user)
                else:
                    self._revoke(user)

    def _users(self, names: list[str]) -> list:
        """Every user named, in the order given; none changed unless all exist."""
        User = get_user_model()
        found = {
            user.get_username(): user
            for user in User.objects.filter(**{f"{User.USERNAME_FIELD}__in": names})
        }
        missing = [name for name in dict.fromkeys(names) if name not in found]
        if missing:
            listed = ", ".join(repr(name) for name in missing)
            raise CommandError(f"No user named {listed}: nothing changed.")
        return [found[name] for name in dict.fromkeys(names)]

    def _grant(self, user) -> None:
        name = user.get_username()
        if run_commands_grant(user=user):
            self.stdout.write(f"Granted {RUN_COMMANDS} to {name}.")
        else:
            self.stdout.write(f"{name} already holds {RUN_COMMANDS}: nothing changed.")
        if not user.is_active:
            self.stdout.write(f"{name} is inactive: it applies once the account is active again.")

    def _revoke(self, user) -> None:
        name = user.get_username()
        if run_commands_revoke(user=user):
            self.stdout.write(f"Revoked {RUN_COMMANDS} from {name}.")
        else:
            self.stdout.write(f"{name} held no direct grant of {RUN_COMMANDS}: nothing changed.")
        still = run_commands_sources(user)
        if still:
            self.stdout.write(
                f"{name} may still run commands ({', '.join(still)}): change that in the admin."
            )

    def _list(self) -> None:
        holders = run_commands_holders()
        if not holders:
            self.stdout.write(
                f"Nobody holds {RUN_COMMANDS}. Grant it: manage.py run_commands grant USERNAME"
            )
            return
        for holder in holders:
            inactive = " (inactive)" if not holder.is_active else ""
            self.stdout.write(f"{holder.username}: {', '.join(holder.sources)}{inactive}")
