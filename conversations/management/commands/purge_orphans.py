from django.core.management.base import BaseCommand

from conversations.services.retention import orphans_purge


class Command(BaseCommand):
    help = "Remove files of attempts that never settled and of deleted conversations."

    def handle(self, *args, **options):
        removed = orphans_purge()
        for path in removed:
            self.stdout.write(f"removed {path}")
        self.stdout.write(f"Removed {len(removed)} orphan folder(s).")
