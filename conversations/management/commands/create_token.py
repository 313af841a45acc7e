from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from conversations.auth import token_create
from conversations.models import ApiToken


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

    def handle(self, *args, **options):
        User = get_user_model()
        try:
            user = User.objects.get(**{User.USERNAME_FIELD: options["username"]})
        except User.DoesNotExist as exc:
            raise CommandError(f"No user named {options['username']!r}.") from exc
        row, secret = token_create(user=user, name=options["name"], scopes=options["scope"])
        scopes = ",".join(row.scopes) or "none"
        self.stdout.write(
            f"Token {row.pk} for {user.get_username()} (scopes: {scopes}); it is shown once."
        )
        self.stdout.write(f"Token: {secret}")
