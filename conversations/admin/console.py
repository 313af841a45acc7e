"""The support console: what needs a person now, on the admin's first page.

Six read-only sections, each at most ``CONSOLE_ROWS`` rows, each row linking to its call's
page, each section linking to the change list that holds all of it:

- calls waiting on a human (approval or input), the longest waiting first;
- calls ``ready`` for longer than ``READY_UNPICKED_SECONDS`` that no worker has picked up;
- expired claims, the longest expired first;
- calls settled ``failed`` or ``indeterminate`` in the last ``RECENT_FAILURES_HOURS`` hours;
- commands that exited non-zero, were killed by a signal or timed out in the same hours (their
  calls settled ``completed``: the command ran, and did not succeed);
- async runs found ``lost`` (their watcher stopped), the newest first.

A call's waiting time runs from the last change of its activity (``ToolActivity.updated_at``):
the fold that made it ``awaiting_*`` or ``pending`` is the last write before it waits, while
the call row's own ``updated_at`` is not written by every move. Every query here reads an
index and at most ``CONSOLE_ROWS + 1`` rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from tools.catalog import tool_spec
from tools.models import AsyncRun, ProcessStatus

from ..exits import exit_text, unsuccessful_exits
from ..models import (
    CommandExit,
    ConversationEvent,
    ExecutionClaim,
    ToolActivity,
    ToolCall,
    json_text,
)
from .common import call_url, changelist_url, cut, subject_columns, subject_text
from .times import duration_text, when_html

CONSOLE_ROWS = 50  # rows shown in a section; the rest through its change list
READY_UNPICKED_SECONDS = 60  # a worker takes a ready call within a second; a poll within 5 s
RECENT_FAILURES_HOURS = 24

S = ToolCall.State
WAITING_STATES = (S.AWAITING_APPROVAL, S.AWAITING_INPUT)
FAILURE_OUTCOMES = ("failed", "indeterminate")


@dataclass
class Row:
    call_id: Any
    tool: str
    status: str  # the call's state, or its outcome once settled
    subject: str  # the command or path, cut
    since: datetime | None  # when the row's situation began
    age: str  # how long ago, in words
    conversation: str
    note: str = ""

    @property
    def url(self) -> str:
        return call_url(self.call_id)

    @property
    def since_text(self) -> str:
        return when_html(self.since)


@dataclass
class Section:
    key: str
    title: str
    empty: str
    since_label: str
    # The change lists holding the whole of it: (label, url).
    lists: list[tuple[str, str]] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    more: bool = False


def _limited(queryset: Any) -> tuple[list[Any], bool]:
    rows = list(queryset[: CONSOLE_ROWS + 1])
    return rows[:CONSOLE_ROWS], len(rows) > CONSOLE_ROWS


def _unfinished(states: tuple[str, ...]) -> Any:
    """Unfinished calls in ``states`` with ``since``: their activity's last change."""
    last_change = ToolActivity.objects.filter(tool_call_id=OuterRef("pk")).values("updated_at")
    return (
        ToolCall.objects.filter(state__in=states)
        .select_related("conversation")
        .defer("arguments", "supervision", "interaction", "resolution", "resolved_interaction")
        .annotate(
            since=Coalesce(Subquery(last_change[:1]), "created_at"),
            **subject_columns("arguments"),
        )
    )


def _call_row(call: ToolCall, now: datetime, note: str = "") -> Row:
    return Row(
        call_id=call.pk,
        tool=call.tool_name,
        status=call.state,
        subject=subject_text(call.tool_name, call),
        since=call.since,
        age=duration_text(now - call.since),
        conversation=str(call.conversation),
        note=note,
    )


def waiting_on_a_human(now: datetime) -> Section:
    rows, more = _limited(_unfinished(WAITING_STATES).order_by("since", "created_at"))
    return Section(
        key="waiting",
        title="Waiting on a human",
        empty="No call waits for an approval or an answer.",
        lists=[("all of them", changelist_url(ToolCall, state__in=",".join(WAITING_STATES)))],
        since_label="waiting since",
        rows=[_call_row(call, now) for call in rows],
        more=more,
    )


def ready_unpicked(now: datetime) -> Section:
    cutoff = now - timedelta(seconds=READY_UNPICKED_SECONDS)
    queryset = _unfinished((S.READY,)).filter(since__lte=cutoff).order_by("since", "created_at")
    rows, more = _limited(queryset)
    return Section(
        key="ready",
        title=f"Ready, not picked up for over {READY_UNPICKED_SECONDS} s",
        empty="Every ready call has been picked up.",
        lists=[("all ready calls", changelist_url(ToolCall, state__exact=S.READY))],
        since_label="ready since",
        rows=[
            _call_row(call, now, "host tool" if tool_spec(call.tool_name).host else "")
            for call in rows
        ],
        more=more,
    )


def expired_claims(now: datetime) -> Section:
    queryset = (
        ExecutionClaim.objects.filter(expires_at__lte=now)
        .select_related("call", "call__conversation")
        .defer("call__arguments", "call__supervision", "call__interaction", "call__resolution")
        .order_by("expires_at")
    )
    claims, more = _limited(queryset)
    rows = [
        Row(
            call_id=claim.call_id,
            tool=claim.call.tool_name,
            status=claim.call.state,
            subject="",
            since=claim.expires_at,
            age=duration_text(now - claim.expires_at),
            conversation=str(claim.call.conversation),
            note=f"worker {claim.worker}, generation {claim.generation}",
        )
        for claim in claims
    ]
    return Section(
        key="expired",
        title="Expired claims",
        empty="No claim has expired.",
        lists=[("all expired claims", changelist_url(ExecutionClaim, claim_expired="yes"))],
        since_label="expired at",
        rows=rows,
        more=more,
    )


def recent_failures(now: datetime) -> Section:
    """Responses ``failed`` or ``indeterminate`` of the last hours, through the index
    ``event_response_outcome`` (outcome, created_at) of responses."""
    since = now - timedelta(hours=RECENT_FAILURES_HOURS)
    queryset = (
        ConversationEvent.objects.filter(type=ConversationEvent.Type.TOOL_CALL_RESPONSE)
        .alias(outcome_text=json_text("payload__outcome"))
        .filter(outcome_text__in=FAILURE_OUTCOMES, created_at__gte=since)
        .select_related("conversation")
        .defer("payload")
        .annotate(
            outcome=json_text("payload__outcome"),
            tool=json_text("payload__toolName"),
            **subject_columns("payload__arguments"),
        )
        .order_by("-created_at")
    )
    events, more = _limited(queryset)
    rows = [
        Row(
            call_id=event.tool_call_id,
            tool=event.tool or "",
            status=event.outcome or "",
            subject=subject_text(event.tool or "", event),
            since=event.created_at,
            age=duration_text(now - event.created_at),
            conversation=str(event.conversation),
        )
        for event in events
    ]
    return Section(
        key="failures",
        title=f"Failed and indeterminate, last {RECENT_FAILURES_HOURS} h",
        empty=f"No call failed or ended indeterminate in the last {RECENT_FAILURES_HOURS} hours.",
        lists=[
            (f"all {outcome}", changelist_url(ConversationEvent, outcome=outcome))
            for outcome in FAILURE_OUTCOMES
        ],
        since_label="settled at",
        rows=rows,
        more=more,
    )


def unsuccessful_commands(now: datetime) -> Section:
    """Commands of the last hours that exited non-zero, were killed by a signal or timed out,
    newest first, through the index ``exit_succeeded_recent``. Their calls settled
    ``completed`` (so "Failed" does not list them): a person reads the exit here."""
    since = now - timedelta(hours=RECENT_FAILURES_HOURS)
    ended, more = _limited(unsuccessful_exits(since))
    rows = [
        Row(
            call_id=row.tool_call_id,
            tool="bash",
            status=exit_text(row),
            subject=cut(row.command),
            since=row.created_at,
            age=duration_text(now - row.created_at),
            conversation=str(row.conversation),
            note=f"async run {row.async_run_id}" if row.async_run_id else "",
        )
        for row in ended
    ]
    return Section(
        key="exits",
        title=f"Non-zero exits, last {RECENT_FAILURES_HOURS} h",
        empty=(
            "No command exited non-zero, was killed or timed out in the last "
            f"{RECENT_FAILURES_HOURS} hours."
        ),
        lists=[("all unsuccessful exits", changelist_url(CommandExit, succeeded__exact=0))],
        since_label="ended at",
        rows=rows,
        more=more,
    )


def lost_runs(now: datetime) -> Section:
    queryset = (
        AsyncRun.objects.filter(status=ProcessStatus.LOST)
        .select_related("conversation")
        .order_by("-started_at")
    )
    runs, more = _limited(queryset)
    rows = [
        Row(
            call_id=run.tool_call_id,
            tool="bash",
            status="lost",
            subject=cut(run.command),
            since=run.finished_at or run.started_at,
            age=duration_text(now - (run.finished_at or run.started_at)),
            conversation=str(run.conversation),
            note=f"async run {run.pk}" + (f" on {run.host}" if run.host else ""),
        )
        for run in runs
    ]
    return Section(
        key="lost",
        title="Lost async runs",
        empty="No async run has been lost.",
        lists=[("all lost runs", changelist_url(AsyncRun, status__exact=ProcessStatus.LOST))],
        since_label="found lost at",
        rows=rows,
        more=more,
    )


def support_console(now: datetime | None = None) -> list[Section]:
    """The console's sections, in the order a person works through them."""
    now = now or timezone.now()
    return [
        waiting_on_a_human(now),
        ready_unpicked(now),
        expired_claims(now),
        recent_failures(now),
        unsuccessful_commands(now),
        lost_runs(now),
    ]
