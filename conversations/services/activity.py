"""``ToolActivity``: the folded ``tool.updated`` state of each call, written only through the fold.

The state is split in two columns: ``state_json`` holds the small fields and ``payload_json``
the bounded ``input`` and ``output`` (with ``payload_bytes``, their compact UTF-8 size), so
frame budgeting reads sizes without loading payloads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Max
from django.utils import timezone

from projections.fold import FINAL_STATUSES, apply_tool_update
from projections.wire import bound_tool_input

from ..fields import dumps
from ..models import ToolActivity, ToolCall
from ..shapes import iso
from .publish import Message, conversation_group

PAYLOAD_KEYS = ("input", "inputOmitted", "output")
_MUTABLE = ["rev", "state_json", "payload_json", "payload_bytes", "is_final", "updated_at"]


def split_state(state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    small = {k: v for k, v in state.items() if k not in PAYLOAD_KEYS}
    payload = {k: state[k] for k in PAYLOAD_KEYS if k in state}
    return small, payload


def activity_state(activity: ToolActivity) -> dict[str, Any]:
    """The whole folded state of one call, with its ``rev``."""
    return {**activity.state_json, **activity.payload_json, "rev": activity.rev}


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


def _publish(activity: ToolActivity, update: dict[str, Any], messages: list[Message]) -> None:
    _publish_update(activity.conversation_id, activity.rev, update, messages)


def _publish_update(
    conversation_id: Any, rev: int, update: dict[str, Any], messages: list[Message]
) -> None:
    messages.append(
        (
            conversation_group(conversation_id),
            {
                "type": "tool.updated",
                "conversationId": str(conversation_id),
                "update": {**update, "rev": rev},
            },
        )
    )


def next_ordinal(conversation_id: Any) -> int:
    """The ordinal the conversation's next activity gets. Called with the conversation locked."""
    last = ToolActivity.objects.filter(conversation_id=conversation_id).aggregate(m=Max("ordinal"))[
        "m"
    ]
    return (last or 0) + 1


def activity_create(
    *,
    call: ToolCall,
    title: str | None,
    kind: str,
    messages: list[Message],
    ordinal: int | None = None,
) -> ToolActivity:
    """The first state of a new call (``pending``). Called with the conversation locked;
    ``ordinal`` when the caller numbers several calls at once (one query instead of one each)."""
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
        rev=1,
    )
    _store(activity, apply_tool_update(None, update))
    activity.save()
    _publish(activity, update, messages)
    return activity


def activity_apply(
    *, tool_call_id: Any, update: dict[str, Any], messages: list[Message]
) -> ToolActivity | None:
    """Fold ``update`` into the call's activity (row locked) and publish it with ``rev + 1``.

    An update that changes nothing (e.g. to a call already final) is not published.
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
    after = apply_tool_update(before, update)
    if after == before:
        return activity
    activity.rev += 1
    _store(activity, after)
    activity.save(update_fields=_MUTABLE)
    _publish(activity, update, messages)
    return activity


_CAS_SQL = (
    f"UPDATE {ToolActivity._meta.db_table} SET rev = rev + 1, state_json = %s, payload_json = %s, "
    f"payload_bytes = %s, is_final = %s, updated_at = %s WHERE tool_call_id = %s AND rev = %s"
)


@dataclass(frozen=True)
class FoldWrite:
    """The compare-and-set write of a folded state: valid only while the row's rev is ``rev``."""

    rev: int
    state_json: str
    payload_json: str
    payload_bytes: int
    is_final: bool


def fold_write(rev: int, state: dict[str, Any], update: dict[str, Any]) -> FoldWrite | None:
    """The write that folds ``update`` into ``state`` (read at ``rev``); None if it changes
    nothing."""
    after = apply_tool_update(state, update)
    if after == state:
        return None
    small, _, payload_text, is_final = _columns(after)
    return FoldWrite(rev, dumps(small), payload_text, len(payload_text.encode("utf-8")), is_final)


def activity_published(
    conversation_id: Any, rev: int, update: dict[str, Any], messages: list[Message]
) -> None:
    """Add the ``tool.updated`` publication of ``update`` folded at ``rev``."""
    _publish_update(conversation_id, rev, update, messages)


def activity_fold(
    *,
    tool_call_id: Any,
    conversation_id: Any,
    known: tuple[int | None, dict[str, Any] | None],
    update: dict[str, Any],
    messages: list[Message],
) -> None:
    """``activity_apply`` for a caller that already read the state (``known`` = rev, state):
    a compare-and-set on ``rev`` instead of a locking read; a lost race folds again, locked."""
    rev, state = known
    if rev is None or state is None:
        activity_apply(tool_call_id=tool_call_id, update=update, messages=messages)
        return
    write = fold_write(rev, state, update)
    if write is None:
        return
    field = ToolActivity._meta.get_field
    with connection.cursor() as cursor:
        cursor.execute(
            _CAS_SQL,
            [
                write.state_json,
                write.payload_json,
                write.payload_bytes,
                write.is_final,
                field("updated_at").get_db_prep_value(timezone.now(), connection),
                field("tool_call_id").get_db_prep_value(tool_call_id, connection),
                write.rev,
            ],
        )
        changed = cursor.rowcount
    if not changed:
        activity_apply(tool_call_id=tool_call_id, update=update, messages=messages)
        return
    _publish_update(conversation_id, rev + 1, update, messages)


def status_update(call: ToolCall, status: str, **extra: Any) -> dict[str, Any]:
    update: dict[str, Any] = {
        "toolCallId": str(call.id),
        "turnId": str(call.turn_id),
        "status": status,
    }
    if status == "in_progress":
        update["startedAt"] = iso(timezone.now())
    update.update(extra)
    return update
