from axes.utils import reset as axes_reset
from django.core.management.base import BaseCommand

from conversations.api.throttle import login_failures, token_reset


class Command(BaseCommand):
    help = (
        "Lift the lockout of client addresses: forget their failed logins (pages and admin) and "
        "their failed token checks (REST and websockets), and print what was forgotten."
    )

    def add_arguments(self, parser):
        parser.add_argument("addresses", nargs="+", metavar="ADDRESS", help="e.g. 203.0.113.7")

    def handle(self, *args, **options):
        for address in options["addresses"]:
            logins = login_failures(address)
            axes_reset(ip=address)
            tokens = "its failed token checks" if token_reset(address) else "no failed token check"
            self.stdout.write(f"{address}: {logins} failed login(s) and {tokens} forgotten.")
