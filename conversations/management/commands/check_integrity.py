"""``python manage.py check_integrity``: the invariant check (docs/reliability.md)."""

from django.core.management.base import BaseCommand

from conversations.integrity import Report, integrity_check

# What each check counts, for its summary line.
COUNTED = {
    "sequences": "conversations",
    "responses": "responses",
    "open calls": "unfinished calls",
    "claims": "claims",
    "assets": "assets",
    "orphans": "orphan folders",
}


class Command(BaseCommand):
    help = (
        "Check the invariants of the durable state (sequences, responses, open calls, claims, "
        "asset files, orphan attempt folders): one line per breach, then a summary. Exits 1 on "
        "any breach, 0 when clean."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--no-hash",
            action="store_true",
            help="Check asset files' presence and size only, without reading them.",
        )

    def handle(self, *args, **options):
        report = Report()
        for breach in integrity_check(hashes=not options["no_hash"], report=report):
            self.stdout.write(str(breach))
        for name, tally in report.tallies.items():
            counted = "" if name == "orphans" else f" in {tally.seen} {COUNTED[name]}"
            self.stdout.write(f"{name}: {tally.breaches} breach(es){counted}")
        if report.breaches:
            self.stdout.write(f"Integrity check failed: {report.breaches} breach(es).")
            raise SystemExit(1)
        self.stdout.write("Integrity check passed: no breach.")
