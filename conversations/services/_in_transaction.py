"""The steps that move an unfinished call, taken inside the caller's open transaction
(docs/subsystems/lifecycle.md, "Moving a call").

Call these with the transaction open: inside the ``publish.atomic()`` block of a service, the
one that owns the transaction (every other module of ``conversations/services/`` is such an
entry point). None of them opens, commits or waits for a transaction of its own; what they
publish goes out after the caller's commit, and what the runtime is to do after it is given
to ``publish.then``. Only ``conversations.services`` imports this module (an import-linter
contract, pyproject.toml).

- ``call_create``: (new) → ``supervising``.
- ``call_transition``: every other move of an unfinished call. Checked against the table
  (``transitions.MOVES``), a compare-and-set on the state and generation read, published
  (``tool_call.changed``, and the activity's new status) and, when it makes the call ready,
  announced to the runtime.
- ``call_made_ready``: a move to ``ready``, and the call handed to its tool's runner once the
  transaction committed.
- ``call_transition_publish``: what ``call_transition`` publishes, for the calls the claim
  batch moved in SQL (``claims.claim_acquire_batch``, which checks that move against the
  table once for the batch).

Settling, the way out of the unfinished states, is ``settlement.call_settle``.
"""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

from projections.fold import status_for_state
from tools.catalog import tool_spec

from ..models import ExecutionClaim, ToolCall
from . import publish
from .activity import activity_create, status_fold
from .calls import publish_call_changed
from .runners import READY, REVOKED, announce, call_ready_run
from .transitions import check_move

S = ToolCall.State
# The activity shows a waiting call's interaction: folded when the call enters or leaves one.
_AWAITING = frozenset({S.AWAITING_APPROVAL, S.AWAITING_INPUT})


def call_create(
    *,
    call_id: uuid.UUID,
    conversation_id: Any,
    turn_id: Any,
    tool_name: str,
    arguments: Any,
    origin: str,
    assistant_event_id: int | None = None,
    provider_call_id: str = "",
    content_index: int | None = None,
    title: str | None = None,
    ordinal: int | None = None,
    after_sequence: int | None = None,
) -> ToolCall:
    """A new unfinished call in ``supervising``, with its first activity state, published
    after the commit.

    Called with the conversation locked, in the transaction that created its message or turn;
    ``after_sequence``: the conversation's last sequence, when the caller knows it.
    """
    call = ToolCall.objects.create(
        id=call_id,
        conversation_id=conversation_id,
        turn_id=turn_id,
        assistant_event_id=assistant_event_id,
        provider_call_id=provider_call_id,
        content_index=content_index,
        origin=origin,
        tool_name=tool_name,
        arguments=arguments,
        state=S.SUPERVISING,
    )
    activity_create(
        call=call,
        title=title,
        kind=tool_spec(tool_name).kind,
        ordinal=ordinal,
        after_sequence=after_sequence,
    )
    publish_call_changed(call)
    return call


def call_transition(
    call: ToolCall,
    to: str,
    *,
    claim: ExecutionClaim | None = None,
    revoke: bool = False,
    locked: bool = False,
    **fields: Any,
) -> bool:
    """Move ``call`` from the state it was read in to ``to``, or change nothing: the one way an
    unfinished call changes state. True when it moved.

    ``InvalidTransition`` when the table (``transitions.MOVES``) has no such move. Otherwise a
    compare-and-set on the state and ``generation`` read: False when someone else moved or
    settled the call first (nothing is written, published or announced). Moved, ``call`` holds
    the row as written; ``tool_call.changed`` is published after the commit and the activity is
    folded to the status it now shows (with the interaction when the call enters or leaves an
    awaiting state); a move to ``ready`` is announced to the runtime (``READY``). A call made
    ready also goes to its runner: ``call_made_ready``.

    ``fields``: the other columns the move writes. ``claim``: entering ``running``, the claim
    taken (not saved yet), inserted after the move: the call row, then its claim, every
    writer's lock order. ``revoke``: leaving ``running`` without its holder (recovery), the
    claim is deleted and its holder told to stop (``REVOKED``). ``locked``: the caller read
    ``call`` with its row locked, so the written fields are set on it instead of read again.
    """
    from_state = call.state
    check_move(from_state, to)
    moved = ToolCall.objects.filter(
        pk=call.pk, state=from_state, generation=call.generation
    ).update(state=to, **fields)
    if not moved:
        return False
    if claim is not None:
        claim.save(force_insert=True)
    if revoke:
        ExecutionClaim.objects.filter(call_id=call.pk).delete()
    if locked and not any(hasattr(value, "resolve_expression") for value in fields.values()):
        call.state = to
        for name, value in fields.items():
            setattr(call, name, value)
    else:
        call.refresh_from_db()
    if claim is not None:
        call.claim = claim
    call_transition_publish(call, from_state=from_state)
    if revoke:
        announce(REVOKED, call.pk)  # a holder still running it stops
    if to == S.READY:
        announce(READY, call.tool_name)
    return True


def call_made_ready(call: ToolCall, **fields: Any) -> bool:
    """``call`` becomes ``ready`` (``call_transition``: checked, compare-and-set, published,
    announced) and, once the transaction committed and its publications went out, is handed to
    its tool's runner, if the tool has one (``ask_user`` runs at once, in this process). False
    when someone else moved or settled it first. ``fields`` as ``call_transition``'s."""
    if not call_transition(call, S.READY, **fields):
        return False
    publish.then(partial(call_ready_run, call_id=call.pk, tool_name=call.tool_name))
    return True


def call_transition_publish(call: ToolCall, *, from_state: str) -> None:
    """What a move of ``call`` from ``from_state`` to its state publishes after the commit:
    ``tool_call.changed`` with the call as it is now, and the activity folded to the status the
    call now shows, when that changed (with its interaction when the call enters or leaves an
    awaiting state; a ``running`` call's claim names the worker, kept on the activity)."""
    publish_call_changed(call)
    status = status_for_state(call.state)
    if status == status_for_state(from_state):
        return  # supervising and ready both show pending: no new activity state
    extra = {"interaction": call.interaction} if {from_state, call.state} & _AWAITING else {}
    worker = call.claim.worker if call.state == S.RUNNING else None
    status_fold(call, status, worker=worker, **extra)
