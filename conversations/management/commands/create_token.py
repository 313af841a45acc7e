import argparse
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from conversations.api.auth import token_create
from conversations.models import ApiToken

# A hundred years: past it the date would overflow, and no one means it.
MAX_EXPIRES_DAYS = 36500


def _days(raw: str) -> int:
    try:
        days = int(raw)
    except ValueError:
        days = 0
    if not 1 <= days <= MAX_EXPIRES_DAYS:
        raise argparse.ArgumentTypeError(
            f"must be a whole number of days from 1 to {MAX_EXPIRES_DAYS}, not {raw!r}"
        )
    return days


class Command(BaseCommand):
    help = "Create an API token for USERNAME and print it once, as the last word of the last line."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="A label for the token.")
        parser.add_argument(
            "--scope",
            action="append",
            default=[],
            choices=[s.value for s in ApiToken.Scope],
            help="host: the token may claim host calls of every owner.",
        )
        parser.add_argument(
            "--expires",
            type=_days,
            metavar="DAYS",
            help="The token stops working DAYS days from now (default: never).",
        )

    def handle(self, *args, **options):
        User = get_user_model()
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: options["username"]})
        except User.DoesNotExist as exc:
            raise CommandError(f"No user named {options['username']!r}.") from exc
        days = options["expires"]
        expires_at = timezone.now() + timedelta(days=days) if days else None
        row, secret = token_create(
            user=user, name=options["name"], scopes=options["scope"], expires_at=expires_at
        )
        scopes = ",".join(row.scopes) or "none"
        expiry = f"expires {expires_at:%Y-%m-%d %H:%M} UTC" if expires_at else "never expires"
        self.stdout.write(
            f"Token {row.pk} for {user.get_username()} (scopes: {scopes}; {expiry});"
            " it is shown once."
        )
        self.stdout.write(f"Token: {secret}")
