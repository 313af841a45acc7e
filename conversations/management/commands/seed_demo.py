"""``seed_demo``: a demo user, a token and a conversation with something real in it. Idempotent.

Each run leaves exactly one live demo token: it revokes the earlier ones (marked by their name)
as it makes the new one. A password changed since seeding is kept and not printed. ``--reset``
replaces the demo conversation with a fresh one (``make run`` passes it, so the README's
walkthrough can be done again after every start); the user's other conversations stay.
"""

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from conversations.api.auth import token_create, token_revoke
from conversations.grants import run_commands_grant
from conversations.models import ApiToken, Conversation, ToolCall
from conversations.services.claims import claim_acquire
from conversations.services.conversations import conversation_create, conversation_delete
from conversations.services.messages import message_post
from conversations.services.settlement import ClaimGuard, call_settle
from conversations.storage import resolve_workspace

DEMO_USERNAME = "demo"
DEMO_PASSWORD = "demo-password"
DEMO_TITLE = "Demo: calls the worker runs, and one awaiting approval"
# The demo conversation of earlier releases: found again, not made twice.
EARLIER_TITLES = ("Demo: a settled call and one awaiting approval",)
DEMO_TOKEN_NAME = "demo (make run)"
# One workspace for every demo conversation: a reset writes the demo's files again over the
# previous ones instead of leaving a folder behind at each start.
DEMO_WORKSPACE = "demo"


class Command(BaseCommand):
    help = "Create the demo user (staff, password printed), a fresh token and a demo conversation."

    def add_arguments(self, parser):
        parser.add_argument(
            "--no-token", action="store_true", help="Leave the demo token as it is."
        )
        parser.add_argument(
            "--reset",
            action="store_true",
            help="Delete the demo conversation and make a fresh one (its calls not run yet).",
        )
        parser.add_argument(
            "--force",
            action="store_true",
            help="Run with DEBUG off too (the demo user is a superuser with a known password).",
        )

    def handle(self, *args, **options):
        if not settings.DEBUG and not options["force"]:
            raise CommandError(
                "DEBUG is off: the demo user is a superuser with a known password. "
                "Run with DEBUG=1 (make run does), or pass --force."
            )
        User = get_user_model()
        with transaction.atomic():
            user, created = User.objects.get_or_create(
                username=DEMO_USERNAME, defaults={"is_staff": True, "is_superuser": True}
            )
            if created:
                user.set_password(DEMO_PASSWORD)
                user.save()
            run_commands_grant(user=user)
        demos = Conversation.objects.filter(owner=user, title__in=(DEMO_TITLE, *EARLIER_TITLES))
        if options["reset"]:
            deleted = 0
            for conversation_id in list(demos.values_list("pk", flat=True)):
                conversation_delete(conversation_id=conversation_id)
                deleted += 1
            self.stdout.write(f"Reset: deleted {deleted} demo conversation(s).")
        conversation = demos.first()
        if conversation is None:
            conversation = self._conversation(user)
        if user.check_password(DEMO_PASSWORD):
            self.stdout.write(
                f"Admin login: {DEMO_USERNAME} / {DEMO_PASSWORD} (the demo password; created {created})"
            )
        else:
            self.stdout.write(
                f"Admin login: {DEMO_USERNAME} (password changed from the demo one; not shown)"
            )
        self.stdout.write(f"Demo conversation: {conversation.pk}")
        if not options["no_token"]:
            revoked, secret = self._token(user)
            self.stdout.write(f"Revoked {revoked} earlier demo token(s).")
            self.stdout.write(f"Demo token: {secret}")

    def _token(self, user) -> tuple[int, str]:
        """A new demo token, the earlier ones revoked in the same transaction."""
        with transaction.atomic():
            earlier = ApiToken.objects.filter(
                user=user, name=DEMO_TOKEN_NAME, revoked_at__isnull=True
            ).values_list("pk", flat=True)
            revoked = sum(token_revoke(token_id=pk) for pk in list(earlier))
            _, secret = token_create(user=user, name=DEMO_TOKEN_NAME)
        return revoked, secret

    def _conversation(self, user):
        conversation = conversation_create(owner=user, title=DEMO_TITLE, workspace=DEMO_WORKSPACE)
        workspace = resolve_workspace(user.pk, conversation.workspace)
        for name, text in DEMO_FILES.items():
            path = workspace / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        first = message_post(
            conversation_id=conversation.pk,
            message_id="demo-user-1",
            role="user",
            content=[{"type": "text", "text": "What is in this project, and does it run?"}],
        )
        turn_id = first.body["turnId"]
        calls = [
            ("demo-call-1", "notes_lookup", {"query": "project layout"}),
            ("demo-call-2", "ls", {"path": "."}),
            ("demo-call-3", "read", {"path": "notes.md"}),
            ("demo-call-4", "grep", {"pattern": "TODO", "path": "."}),
            ("demo-call-5", "bash", {"command": "python3 src/app.py"}),
        ]
        posted = message_post(
            conversation_id=conversation.pk,
            message_id="demo-assistant-1",
            role="assistant",
            turn_id=turn_id,
            content=[
                {"type": "text", "text": "Let me look around first, then run it."},
                *(
                    {"type": "tool_call", "id": pid, "name": name, "arguments": arguments}
                    for pid, name, arguments in calls
                ),
            ],
        )
        # The host tool is ready: settle it as a host would, so one response exists. The path
        # tools run in the server's worker once it starts; bash waits for an approval.
        host_call = ToolCall.objects.get(pk=posted.call_ids[0])
        claim = claim_acquire(call_id=host_call.pk, worker="seed_demo")
        if claim is not None:
            text = "notes.md\nsrc/app.py\n"
            call_settle(
                call_id=host_call.pk,
                outcome="completed",
                guard=ClaimGuard(claim.token, claim.generation),
                result={"content": [{"type": "text", "text": text}]},
                text=text,
            )
        return conversation


DEMO_FILES = {
    "notes.md": "# Demo project\n\nA tiny app for the Toolcore demo.\n\nTODO: add tests\n",
    "src/app.py": 'print("hello from the demo app")  # TODO: read a config file\n',
}
