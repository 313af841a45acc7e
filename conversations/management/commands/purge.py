from django.conf import settings
from django.core.management.base import BaseCommand

from conversations.services.retention import conversations_purge


class Command(BaseCommand):
    help = "Delete ended conversations older than TOOLCORE_RETENTION_DAYS (events and files too)."

    def handle(self, *args, **options):
        days = settings.TOOLCORE_RETENTION_DAYS
        if days is None:
            self.stdout.write("TOOLCORE_RETENTION_DAYS is not set: nothing is deleted.")
            return
        count = conversations_purge(older_than_days=days)
        self.stdout.write(f"Deleted {count} conversation(s) older than {days} day(s).")
