"""``ToolActivity``: the folded ``tool.updated`` state of each call, written only through the fold.

The state is split in two columns: ``state_json`` holds the small fields and ``payload_json``
the bounded ``input`` and ``output`` (with ``payload_bytes``, their compact UTF-8 size), so
frame budgeting reads sizes without loading payloads. Every write publishes the update with the
row's new ``rev`` after commit (docs/subsystems/activity.md).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Max
from django.utils import timezone

from projections.fold import FINAL_STATUSES, apply_tool_update, status_for_state
from projections.tool_input import bound_tool_input
from projections.tool_output import bound_tool_output
from projections.tracker import track_append, track_replace

from ..fields import dumps
from ..models import Conversation, ToolActivity, ToolCall
from ..shapes import activity_state, iso
from ..sql.common import FoldWrite
from .publish import publish_tool_updated

PAYLOAD_KEYS = ("input", "inputOmitted", "output")
_MUTABLE = ["rev", "state_json", "payload_json", "payload_bytes", "is_final", "updated_at"]
_RAW = ["raw_length", "raw_sha1"]  # the per-turn tracker's memory of a host's output


def split_state(state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    small = {k: v for k, v in state.items() if k not in PAYLOAD_KEYS}
    payload = {k: state[k] for k in PAYLOAD_KEYS if k in state}
    return small, payload


def _columns(state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], str, bool]:
    """The small state, the payload, the payload's compact JSON text (its UTF-8 size is
    ``payload_bytes``) and ``is_final`` of a folded state."""
    small, payload = split_state(state)
    small.pop("rev", None)
    return small, payload, dumps(payload), small.get("status") in FINAL_STATUSES


def _store(activity: ToolActivity, state: dict[str, Any]) -> None:
    small, payload, payload_text, is_final = _columns(state)
    activity.state_json, activity.payload_json, activity.is_final = small, payload, is_final
    activity.payload_bytes = len(payload_text.encode("utf-8"))


def next_ordinal(conversation_id: Any) -> int:
    """The ordinal the conversation's next activity gets. Called with the conversation locked."""
    last = ToolActivity.objects.filter(conversation_id=conversation_id).aggregate(m=Max("ordinal"))
    return (last["m"] or 0) + 1


def activity_create(
    *,
    call: ToolCall,
    title: str | None,
    kind: str,
    ordinal: int | None = None,
    after_sequence: int | None = None,
) -> ToolActivity:
    """The first state of a new call (``pending``). Called with the conversation locked;
    ``ordinal`` when the caller numbers several calls at once (one query instead of one each),
    ``after_sequence`` when it knows the conversation's last sequence (its message's), which
    places the card in history (docs/subsystems/api.md, "History")."""
    if after_sequence is None:
        after_sequence = (
            Conversation.objects.filter(pk=call.conversation_id)
            .values_list("last_sequence", flat=True)
            .get()
        )
    update: dict[str, Any] = {
        "toolCallId": str(call.id),
        "turnId": str(call.turn_id),
        "toolName": call.tool_name[:256],
        "kind": kind,
        "status": "pending",
    }
    if title:
        update["title"] = title[:256]
    bounded = bound_tool_input(call.arguments, tool_name=call.tool_name, kind=kind)
    if bounded is None:
        update["inputOmitted"] = True
    else:
        update["input"] = bounded
    activity = ToolActivity(
        tool_call_id=call.id,
        conversation_id=call.conversation_id,
        turn_id=call.turn_id,
        ordinal=ordinal if ordinal is not None else next_ordinal(call.conversation_id),
        after_sequence=after_sequence,
        rev=1,
    )
    _store(activity, apply_tool_update(None, update))
    activity.save()
    publish_tool_updated(activity.conversation_id, activity.rev, update)
    return activity


def fold_plan(rev: int, state: dict[str, Any], update: dict[str, Any]) -> FoldWrite | None:
    """The compare-and-set write that folds ``update`` into ``state`` (read at ``rev``), for a
    caller that writes it in its own statement; None if the update changes nothing."""
    after = apply_tool_update(state, update)
    if after == state:
        return None
    small, _, payload_text, is_final = _columns(after)
    return FoldWrite(rev, dumps(small), payload_text, len(payload_text.encode("utf-8")), is_final)


def settled_fold(
    call: Any,
    outcome: str,
    *,
    finished_at: datetime,
    started_at: datetime | None = None,
    text: str | None = None,
) -> tuple[dict[str, Any], FoldWrite | None]:
    """The final ``tool.updated`` of ``call`` (settlement's read of it) settling with
    ``outcome``, and its ``fold_plan`` against the activity read with the call (None when
    there was none, or the update changes nothing). The update: the outcome's status,
    ``finishedAt``, ``startedAt`` when the run began unannounced, and the bounded ``output``
    of ``text`` when there is one."""
    started = {} if started_at is None else {"startedAt": iso(started_at)}
    update = status_update(call, status_for_state(outcome), **started, finishedAt=iso(finished_at))
    if text is not None:
        update["output"] = bound_tool_output(text)
    known = call.activity_rev is not None and call.activity_state is not None
    return update, fold_plan(call.activity_rev, call.activity_state, update) if known else None


def _track(activity: ToolActivity, update: dict[str, Any]) -> dict[str, Any]:
    """A host's update with its output through the per-turn tracker, whose memory is the row's
    (``raw_length``, ``raw_sha1`` and the bounded output held): ``output`` (a plain string,
    the whole output so far) becomes an ``outputDelta`` of the new part when it extends what
    was sent, else the whole bounded output; ``outputDelta`` is appended. The row's memory is
    updated in place; the fields the tracker answers replace the host's."""
    whole, delta = update.get("output"), update.get("outputDelta")
    if not isinstance(whole, str) and delta is None:
        return update
    memory = {
        "rawLength": activity.raw_length,
        "rawSha1": activity.raw_sha1,
        "output": activity.payload_json.get("output"),
    }
    rest = {k: v for k, v in update.items() if k not in ("output", "outputDelta")}
    if isinstance(whole, str):
        memory, fields = track_replace(memory, whole)
    else:
        memory, fields = track_append(memory, delta)
    activity.raw_length, activity.raw_sha1 = memory["rawLength"], memory["rawSha1"]
    return {**rest, **(fields or {})}


def activity_fold(
    *,
    tool_call_id: Any,
    update: dict[str, Any],
    tracked: bool = False,
    worker: str | None = None,
) -> ToolActivity | None:
    """Fold ``update`` into the call's activity and publish it with the new ``rev`` after
    commit: the one way an activity changes after its creation, but for the fold settlement
    writes in its own statement (``fold_plan``; settlement publishes that one itself).

    The row is locked, folded and saved; an update that changes nothing is not published. None
    when the call has no activity.

    ``tracked``: the update comes from a host (the host tool port). Its output goes through the
    per-turn tracker with the row's memory (``_track``), in this same locked read, so the next
    update may reach any process; what is folded and published is what the tracker answers.

    ``worker``: the worker that claimed the call, kept on the row (the claim goes at
    settlement; the admin's call page still names the worker of a settled call).
    """
    activity = (
        ToolActivity.objects.select_for_update()
        .filter(tool_call_id=tool_call_id)
        .order_by()
        .first()
    )
    if activity is None:
        return None
    before = activity_state(activity)
    before.pop("rev")
    raw = (activity.raw_length, activity.raw_sha1)
    if tracked and not activity.is_final:
        update = _track(activity, update)
    remembered = (activity.raw_length, activity.raw_sha1) != raw
    kept = [*(_RAW if remembered else ()), *(("worker",) if worker is not None else ())]
    if worker is not None:
        activity.worker = worker
    after = apply_tool_update(before, update)
    if after == before:
        if kept:  # the tracker's memory or the worker changed, the state did not: no new rev
            activity.save(update_fields=[*kept, "updated_at"])
        return activity
    activity.rev += 1
    _store(activity, after)
    activity.save(update_fields=[*_MUTABLE, *kept])
    publish_tool_updated(activity.conversation_id, activity.rev, update)
    return activity


def status_fold(
    call: ToolCall, status: str, *, worker: str | None = None, **extra: Any
) -> ToolActivity | None:
    """Fold ``call``'s activity to ``status`` (``status_update`` with ``extra``) and publish it:
    ``activity_fold`` of a move of the call (``worker`` as there)."""
    return activity_fold(
        tool_call_id=call.pk, update=status_update(call, status, **extra), worker=worker
    )


def status_update(call: Any, status: str, **extra: Any) -> dict[str, Any]:
    """A ``tool.updated`` moving ``call`` (a row, or settlement's read of one) to ``status``."""
    update: dict[str, Any] = {
        "toolCallId": str(call.id),
        "turnId": str(call.turn_id),
        "status": status,
    }
    if status == "in_progress":
        update["startedAt"] = iso(timezone.now())
    update.update(extra)
    return update
