"""The call page: one page per call id, unfinished or settled (read-only selectors).

An unfinished call is read from its ``ToolCall`` row and its claim; a settled one, whose row and
claim are gone, from its ``tool_call_response`` event. Both give a ``Summary`` (the band at the
top of the page), the timeline (``timeline.py``) and the buttons that apply to the call now.
Start and finish times come from the call's activity (``startedAt``, ``finishedAt``), which
outlives the call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils import timezone

from tools.catalog import tool_spec
from tools.models import AsyncRun, ProcessStatus

from ..exits import exit_of, exit_text
from ..grants import may_run_commands
from ..models import Asset, ConversationEvent, ExecutionClaim, ToolActivity, ToolCall
from ..selectors import call_response
from .common import as_uuid, call_subject, link, pretty
from .timeline import call_timeline, claim_summary, response_timeline
from .times import DASH, between, duration_text, when_html

S = ToolCall.State

# An attempt's files live in ``…/tool-calls/<call id>/g<generation>/`` (storage.py).
_GENERATION_FOLDER = re.compile(r"/g(\d+)/")

NO_WORKER = "— (not run by a worker)"


@dataclass(frozen=True)
class Button:
    operation: str  # a key of operations.CALL_OPERATIONS
    label: str
    style: str = ""  # "default" (the expected next step) or "danger"
    note: str = ""


@dataclass
class Summary:
    call_id: Any
    tool: str
    settled: bool
    status: str  # the state while unfinished, the outcome once settled
    subject: str
    origin: str
    conversation: str  # a link
    owner: str  # the conversation's owner: a link to their admin page when the viewer may open it
    turn: Any
    worker: str
    attempt: Any
    generation: Any
    created: str
    started: str
    finished: str
    duration: str
    duration_label: str
    resolved_by: str = DASH
    # How its command ended (``Exit 3``), empty for a call that ran none; ``exit_succeeded``
    # is None then, else whether it exited 0 without a signal or a timeout.
    process: str = ""
    exit_succeeded: bool | None = None
    claim: dict[str, Any] | None = None
    arguments: str = ""
    supervision: str = ""
    buttons: list[Button] = field(default_factory=list)

    @property
    def title(self) -> str:
        return f"Call {self.call_id} ({self.tool}, {self.status.replace('_', ' ')})"


def _activity_times(call_id: Any) -> tuple[Any, Any, Any, str]:
    """(created, startedAt, finishedAt, worker) of the call's activity; Nones and "" when it
    has none."""
    activity = (
        ToolActivity.objects.filter(tool_call_id=call_id)
        .only("created_at", "state_json", "worker")
        .first()
    )
    if activity is None:
        return None, None, None, ""
    state = activity.state_json if isinstance(activity.state_json, dict) else {}
    return activity.created_at, state.get("startedAt"), state.get("finishedAt"), activity.worker


def _owner(owner: Any, viewer: Any) -> str:
    """The owner's username, linked to their admin page when ``viewer`` may view users."""
    if owner is None:
        return DASH
    opts = owner._meta
    may_view = any(
        viewer.has_perm(f"{opts.app_label}.{action}_{opts.model_name}")
        for action in ("view", "change")
    )
    return link(owner, owner.get_username()) if may_view else owner.get_username()


def _buttons(call: ToolCall, claim: dict[str, Any] | None, viewer: Any) -> list[Button]:
    """The operations that can apply to the call in its state now; Approve says what it needs
    only to a ``viewer`` who lacks it."""
    buttons = []
    if call.state == S.AWAITING_APPROVAL:
        lacks = tool_spec(call.tool_name).risk == "execute" and not may_run_commands(viewer)
        note = "needs the permission tools.run_commands" if lacks else ""
        buttons += [Button("approve", "Approve", "default", note), Button("deny", "Deny")]
    if call.state == S.RUNNING:
        if claim is None or claim["expired"]:
            buttons.append(Button("release", "Release expired claim", "default"))
        else:
            note = f"the claim is live ({claim['lease_left']} s left)"
            buttons.append(Button("release", "Release expired claim", "", note))
    else:
        buttons.append(Button("recover", "Run recovery for this call"))
    buttons.append(Button("cancel", "Cancel call", "danger"))
    return buttons


def unfinished_summary(call: ToolCall, *, viewer: Any, now: datetime | None = None) -> Summary:
    now = now or timezone.now()
    claim = claim_summary(ExecutionClaim.objects.filter(call_id=call.pk).first())
    created, started, _, _ = _activity_times(call.pk)
    if started is None and claim is not None:
        started = claim["acquired_at"]
    return Summary(
        call_id=call.pk,
        tool=call.tool_name,
        settled=False,
        status=call.state,
        subject=call_subject(call.tool_name, call.arguments),
        origin=call.origin,
        conversation=link(call.conversation),
        owner=_owner(call.conversation.owner, viewer),
        turn=call.turn.ordinal,
        worker=claim["worker"] if claim else "— (no claim)",
        attempt=call.attempt,
        generation=call.generation,
        created=when_html(created or call.created_at),
        started=when_html(started),
        finished="— (unfinished)",
        duration=duration_text(between(started, now)) if started else DASH,
        duration_label="running for" if call.state == S.RUNNING else "since started",
        resolved_by=call.resolved_by.get_username() if call.resolved_by else DASH,
        claim=claim,
        arguments=pretty(call.arguments),
        supervision=pretty(call.supervision),
        buttons=_buttons(call, claim, viewer),
    )


def settled_generation(event: ConversationEvent) -> Any:
    """The generation of the attempt that settled, from its files' folder; a dash without any."""
    paths = Asset.objects.filter(event_id=event.pk).values_list("path", flat=True)[:1]
    for path in paths:
        found = _GENERATION_FOLDER.search(f"/{path}")
        if found:
            return int(found.group(1))
    return DASH


def command_end(call_id: Any, async_run_id: Any) -> tuple[str, bool | None]:
    """How a settled call's command ended, in words, and whether it succeeded; ``("", None)``
    for a call that ran no command (or whose end was not recorded). A command gone to the
    background says so until its run ends."""
    ended = exit_of(call_id)
    if ended is not None:
        run = f" (async run {ended.async_run_id})" if ended.async_run_id else ""
        return f"{exit_text(ended)}{run}", ended.succeeded
    if not async_run_id:
        return "", None
    status = AsyncRun.objects.filter(pk=async_run_id).values_list("status", flat=True).first()
    if status == ProcessStatus.RUNNING:
        return f"— (running in the background as async run {async_run_id})", None
    if status == ProcessStatus.LOST:
        return f"unknown: async run {async_run_id} was lost", None
    return "", None


def settled_summary(event: ConversationEvent, *, viewer: Any) -> Summary:
    payload = event.payload if isinstance(event.payload, dict) else {}
    tool = str(payload.get("toolName", ""))
    created, started, finished, worker = _activity_times(event.tool_call_id)
    finished = finished or event.created_at
    process, succeeded = command_end(event.tool_call_id, payload.get("asyncRunId"))
    return Summary(
        call_id=event.tool_call_id,
        tool=tool,
        settled=True,
        status=str(payload.get("outcome", "")),
        subject=call_subject(tool, payload.get("arguments")),
        origin=str(payload.get("origin", "")),
        conversation=link(event.conversation),
        owner=_owner(event.conversation.owner, viewer),
        turn=event.turn.ordinal if event.turn_id else DASH,
        worker=worker or NO_WORKER,
        attempt=payload.get("attempts", DASH),
        generation=settled_generation(event),
        created=when_html(created),
        started=when_html(started) if started else "— (did not run)",
        finished=when_html(finished),
        duration=duration_text(between(started, finished)) if started else DASH,
        duration_label="duration",
        resolved_by=payload.get("resolvedBy") or DASH,
        process=process,
        exit_succeeded=succeeded,
        arguments=pretty(payload.get("arguments")),
        supervision=pretty(payload.get("supervision")),
    )


@dataclass
class CallPage:
    summary: Summary
    timeline: dict[str, Any]
    call: ToolCall | None  # the row, while unfinished
    response: ConversationEvent | None  # the response, once settled


def call_page(object_id: Any, *, viewer: Any) -> CallPage | None:
    """The page of the call ``object_id`` names, unfinished or settled, as ``viewer`` (the
    staff member asking) sees it; None when no call (and no response) has that id."""
    call_id = as_uuid(object_id)
    if call_id is None:
        return None
    call = (
        ToolCall.objects.select_related(
            "conversation__owner", "turn", "assistant_event", "resolved_by"
        )
        .filter(pk=call_id)
        .first()
    )
    if call is not None:
        summary = unfinished_summary(call, viewer=viewer)
        return CallPage(summary, call_timeline(call), call, None)
    event = call_response(call_id).select_related("conversation__owner", "turn").first()
    if event is None:
        return None
    return CallPage(settled_summary(event, viewer=viewer), response_timeline(event), None, event)


def is_call(call_id: Any) -> bool:
    """Whether ``call_id`` names a call, unfinished (its row) or settled (its response)."""
    return ToolCall.objects.filter(pk=call_id).exists() or call_response(call_id).exists()
