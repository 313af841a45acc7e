"""Helpers of the support admin's tests: URLs, messages, clients with given permissions, and
calls in the states the console and the call page show (commands settled or sent to the
background, calls waiting, runs lost). Claiming and settling a call is ``helpers.settle``."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from conversations.models import ConversationEvent, ToolActivity, ToolCall
from conversations.services.claims import claim_acquire
from conversations.services.settlement import ClaimGuard, call_settle
from conversations.storage import attempt_dir, attempt_relative
from tools.models import AsyncRun
from tools.runtime.async_runs.services import async_run_start, async_runs_lost

from ..factories import UserFactory
from .helpers import assistant_calls, open_turn

# A time as the admin shows it: seconds and zone.
WHEN = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")


def admin_url(model, view: str, *args) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


def call_page_url(call_id) -> str:
    return reverse("admin:conversations_toolcall_change", args=[call_id])


def operate_url(call_id, operation: str) -> str:
    return reverse("admin:conversations_toolcall_operate", args=[call_id, operation])


def sent_messages(response) -> list[str]:
    return [str(m.message) for m in get_messages(response.wsgi_request)]


def operate(client, call_id, operation: str) -> list[tuple[str, str]]:
    """Press a call page's button: the page it lands on (the call's) and the messages it
    shows, as ``(level, text)``."""
    response = client.post(operate_url(call_id, operation), follow=True)
    assert response.redirect_chain == [(call_page_url(call_id), 302)], response.redirect_chain
    return [(m.level_tag, str(m.message)) for m in response.context["messages"]]


def operations_section(page) -> str:
    """The call page's operations, as HTML."""
    html = page.content.decode()
    return html[html.index('id="call-operations-module"') : html.index('id="call-arguments"')]


def client_of(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def staff_with(*codenames: str, username: str | None = None):
    """A staff member (not a superuser) with exactly these permissions."""
    extra = {"username": username} if username else {}
    user = UserFactory(is_staff=True, **extra)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


# --- Calls in given states -----------------------------------------------------------------------


def calls(conversation, *blocks: tuple[str, dict[str, Any]]) -> list[str]:
    """Tool calls of one assistant message in the conversation's open turn (supervised)."""
    posted = assistant_calls(conversation, open_turn(conversation), *blocks)
    return [str(call_id) for call_id in posted.call_ids]


def settle_command(
    call_id,
    *,
    exit_code: int | None = 0,
    signal: str | None = None,
    timed_out: bool = False,
    timeout_seconds: float | None = None,
    output: str = "ran\n",
) -> ConversationEvent:
    """Claim a ready ``bash`` call and settle it as its handler does once the command ended:
    its captured ``output.txt`` in the attempt's folder, and how the process ended."""
    claim = claim_acquire(call_id=call_id, worker="w")
    assert claim is not None
    call = ToolCall.objects.get(pk=call_id)
    folder = attempt_dir(call.conversation_id, call_id, claim.generation)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "output.txt").write_text(output)
    process = {
        "exit_code": exit_code,
        "signal": signal,
        "timed_out": timed_out,
        "timeout_seconds": timeout_seconds,
        "not_stored_bytes": 0,
    }
    result = {"exitCode": exit_code, "signal": signal, "timedOut": timed_out}
    return call_settle(
        call_id=call_id,
        outcome="completed",
        guard=ClaimGuard(claim.token, claim.generation),
        result=result,
        process=process,
    )


def background_command(conversation, call_id) -> AsyncRun:
    """Claim a ready ``bash`` call and settle it as a promotion to the background does: an
    async run (its capture files empty so far) and the response that names it."""
    claim = claim_acquire(call_id=call_id, worker="w")
    assert claim is not None
    folder = attempt_relative(conversation.pk, call_id, claim.generation)
    attempt_dir(conversation.pk, call_id, claim.generation).mkdir(parents=True, exist_ok=True)
    run = async_run_start(
        run_id=uuid.uuid4(),
        conversation_id=conversation.pk,
        tool_call_id=call_id,
        command="make watch",
        cwd="/ws",
        folder=folder,
        host="h1",
        pid=4242,
        pgid=4242,
        process_start=123,
    )
    call_settle(
        call_id=call_id,
        outcome="completed",
        guard=ClaimGuard(claim.token, claim.generation),
        text=f"Running in background as async run {run.pk}.",
        async_run_id=run.pk,
    )
    return run


def age(call_id, *, minutes: float) -> None:
    """The call has waited this long in its state: its activity last changed then (the
    console's measure of waiting)."""
    ToolActivity.objects.filter(tool_call_id=call_id).update(
        updated_at=timezone.now() - timedelta(minutes=minutes)
    )


def lost_run(conversation, call_id) -> AsyncRun:
    """An async run whose watcher stopped, found ``lost`` by the service recovery runs."""
    run = async_run_start(
        run_id=uuid.uuid4(),
        conversation_id=conversation.pk,
        tool_call_id=call_id,
        command="make watch",
        cwd="/ws",
        folder=attempt_relative(conversation.pk, call_id, 1),
        host="elsewhere",
        pid=1,
        pgid=1,
        process_start=1,
    )
    AsyncRun.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))
    assert [r.pk for r in async_runs_lost()] == [run.pk]
    run.refresh_from_db()
    return run
