from django.core.management.base import BaseCommand, CommandError
from django.db import InterfaceError, OperationalError

from conversations import metrics
from conversations.services.recovery import recover_all


class Command(BaseCommand):
    help = "Run one recovery sweep and print what it did."

    def handle(self, *args, **options):
        try:
            actions = recover_all()
        except (OperationalError, InterfaceError) as exc:
            # Rows that fail are each handled by the sweep; only an outage ends it.
            metrics.outage_counted("database", "recovery")
            raise CommandError(f"Recovery stopped: the database is unavailable ({exc}).") from exc
        for action in actions:
            self.stdout.write(str(action))
        self.stdout.write(f"Recovery done: {len(actions)} action(s).")
