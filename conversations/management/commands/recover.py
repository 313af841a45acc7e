from django.core.management.base import BaseCommand

from conversations.services.recovery import recover_all


class Command(BaseCommand):
    help = "Run one recovery sweep and print what it did."

    def handle(self, *args, **options):
        actions = recover_all()
        for action in actions:
            self.stdout.write(str(action))
        self.stdout.write(f"Recovery done: {len(actions)} action(s).")
