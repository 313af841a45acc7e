from django.conf import settings
from django.core.management.base import BaseCommand

from conversations.services.mcp_sessions import mcp_sessions_purge
from conversations.services.participants import purge_participants
from conversations.services.retention import conversations_purge


class Command(BaseCommand):
    help = (
        "Delete ended conversations and ended workbench launches older than "
        "TOOLCORE_RETENTION_DAYS (events, files and logs too)."
    )

    def handle(self, *args, **options):
        days = settings.TOOLCORE_RETENTION_DAYS
        if days is None:
            self.stdout.write("TOOLCORE_RETENTION_DAYS is not set: nothing is deleted.")
            return
        count = conversations_purge(older_than_days=days)
        self.stdout.write(f"Deleted {count} conversation(s) older than {days} day(s).")
        count = mcp_sessions_purge(older_than_days=days)
        self.stdout.write(f"Deleted {count} MCP session(s) not used for {days} day(s).")
        # What the runtime keeps besides (ended workbench launches): its purge participants.
        for participant in purge_participants():
            count = participant.purge(older_than_days=days)
            self.stdout.write(f"Deleted {count} {participant.noun} older than {days} day(s).")
