"""REST endpoints of conversations: their messages and commands, events, snapshot, history,
live pieces, turns and queue. Thin: parse, check access, call one service or selector, shape
the answer. The calls' endpoints are ``calls.py``, the assets' ``assets.py``.

The docstrings of the views are the operations' descriptions on the OpenAPI page: they are
written for someone who has only that page.
"""

from __future__ import annotations

from typing import Any

from django.db import connections
from django.http import HttpRequest, HttpResponse
from ninja import Query, Router

from .. import selectors
from ..barrier import turn_results_wait
from ..detached import detached
from ..services.cancel import turn_cancel, turn_end
from ..services.conversations import conversation_create, conversation_delete
from ..services.messages import command_post, message_post
from ..services.queue import queue_ack
from ..shapes import conversation_wire
from ..snapshots import history_page, live_publish, snapshot_read
from .auth import AsyncAuth
from .responses import json_response
from .schemas.common import PathId
from .schemas.conversations import (
    READ_ERRORS,
    WRITE_ERRORS,
    CommandIn,
    CommandOut,
    ConversationIn,
    ConversationOut,
    ConversationPage,
    EventsPageOut,
    MessageIn,
    MessageOut,
    QueueAckIn,
    QueueAckOut,
    TurnCancelOut,
    TurnEndIn,
    TurnEndOut,
    TurnResultsOut,
    errors,
)
from .schemas.snapshot import HistoryPageOut, LiveIn, LiveOut, SnapshotOut

router = Router(tags=["conversations"])

Limit = Query(50, ge=1, le=100)


@router.post(
    "/conversations",
    operation_id="create_conversation",
    summary="Create a conversation",
    response={201: ConversationOut, **errors(400, 401, 403, 413, 422)},
)
def create_conversation(
    request: HttpRequest, payload: ConversationIn | None = None
) -> HttpResponse:
    """Creates a conversation owned by the caller and answers it (201).

    Both fields are optional, and so is the body itself. `workspace` is a directory below the
    owner's workspace root (default: the conversation's id), created on first use; a path that
    resolves outside the owner's root is 422 naming `workspace`. Not idempotent: each call
    creates a new conversation.
    """
    payload = payload or ConversationIn()
    conversation = conversation_create(
        owner=request.auth, title=payload.title or "", workspace=payload.workspace
    )
    return json_response(conversation_wire(conversation), 201)


@router.get(
    "/conversations",
    operation_id="list_conversations",
    summary="List conversations",
    response={200: ConversationPage, **errors(401, 422)},
)
def list_conversations(
    request: HttpRequest, cursor: str | None = None, limit: int = Limit
) -> HttpResponse:
    """The caller's conversations, newest first, `limit` (1…100, default 50) per page.

    Pass the answer's `nextCursor` as `cursor` to get the next page; it is null on the last
    page. A `limit` outside 1…100 or a cursor this server did not issue is 422.
    """
    return json_response(selectors.conversations_page(request.auth, cursor=cursor, limit=limit))


@router.get(
    "/conversations/{cid}",
    operation_id="get_conversation",
    summary="Get a conversation",
    response={200: ConversationOut, **errors(*READ_ERRORS)},
)
def get_conversation(request: HttpRequest, cid: PathId) -> HttpResponse:
    """One conversation with its `lastSequence` (the sequence of its newest event).

    Another user's conversation answers 404, exactly like a missing one.
    """
    return json_response(conversation_wire(selectors.conversation_for(request.auth, cid)))


@router.delete(
    "/conversations/{cid}",
    operation_id="delete_conversation",
    summary="Delete a conversation",
    response={204: None, **errors(401, 403, 404)},
)
def delete_conversation(request: HttpRequest, cid: PathId) -> HttpResponse:
    """Cancels what is still open (unfinished calls settle as a cancel settles them), then
    deletes the conversation, its events and its files. Answers 204 with no body.

    Deleting again answers 404.
    """
    conversation = selectors.conversation_for(request.auth, cid)
    conversation_delete(conversation_id=conversation.pk)
    response = HttpResponse(status=204)
    del response["Content-Type"]  # no body, so no type
    return response


@router.post(
    "/conversations/{cid}/messages",
    operation_id="post_message",
    summary="Post a user or assistant message",
    response={200: MessageOut, 201: MessageOut, **errors(*WRITE_ERRORS, 409)},
)
def post_message(request: HttpRequest, cid: PathId, payload: MessageIn) -> HttpResponse:
    """Appends a `user_message` or `assistant_message` event and answers it with the tool
    calls it created (201).

    - A **user** message opens a turn; while a turn is open it is 409 `turn_open`.
    - An **assistant** message names the open turn in `turnId` (else 409 `turn_not_open`).
      Each `tool_call` block becomes an unfinished call, listed in `toolCalls` as created
      (state `supervising`); the permission check then moves it on, e.g. to
      `awaiting_approval` (follow it with `GET /tool-calls/{id}`). At most 128 `tool_call`
      blocks per message (422 naming `content`).
    - **Idempotent by `messageId`**, the client's own key, recognised before the turn
      checks: the same `messageId` with the same content again answers 200 with the body
      recorded the first time (even once the turn ended); other content is 409
      `message_conflict`.
    - The stored event may be at most 512 KiB (524,288 bytes of compact JSON, the budget of
      a replay page): a bigger message is 413 `payload_too_large`, and nothing is written.
    """
    conversation = selectors.conversation_for(request.auth, cid)
    posted = message_post(
        conversation_id=conversation.pk,
        message_id=payload.messageId,
        role=payload.role,
        turn_id=payload.turnId,
        content=[block.model_dump() for block in payload.content],
    )
    return json_response(posted.body, 201 if posted.created else 200)


@router.post(
    "/conversations/{cid}/commands",
    operation_id="post_command",
    summary="Run a user !command",
    response={200: CommandOut, 201: CommandOut, **errors(*WRITE_ERRORS, 409)},
)
def post_command(request: HttpRequest, cid: PathId, payload: CommandIn) -> HttpResponse:
    """A command typed by the user (`!ls`): opens a turn of its own with one `bash` call and
    answers it (201). The call is supervised like any other `bash` call.

    **Needs the permission `tools.run_commands`**, like approving a tool that runs programs
    and starting a launch: without it the answer is 403 `forbidden` and nothing is written
    (no turn, no call, no event). Another user's or a missing conversation answers 404
    first, with or without the permission.

    **Idempotent by `inputId`**, the client's own key: the same `inputId` and command again
    answers 200 with the same body (once the call settled, `toolCall` is the settled call);
    another command is 409 `command_conflict`. While a turn is open it is 409 `turn_open`.
    `includeInContext` says whether a client building the model's next request includes it.
    """
    conversation = selectors.conversation_for(request.auth, cid)
    posted = command_post(
        conversation_id=conversation.pk,
        user=request.auth,
        input_id=payload.inputId,
        command=payload.command,
        include_in_context=payload.includeInContext,
    )
    return json_response(posted.body, 201 if posted.created else 200)


@router.get(
    "/conversations/{cid}/events",
    operation_id="list_events",
    summary="Replay durable events",
    response={200: EventsPageOut, **errors(*READ_ERRORS, 409, 422)},
)
def list_events(
    request: HttpRequest,
    cid: PathId,
    after: int = Query(0, ge=0),
    limit: int = Query(100, ge=1, le=100),
) -> HttpResponse:
    """The events with `sequence > after`, ascending: at most `limit` (1…100, default 100) and
    at most 512 KiB of events per page (the first event always goes in).

    Pass `nextAfter` as `after` for the next page; it is null once the page reaches
    `lastSequence`. Sequences are gapless, so a client that applied every page holds the whole
    log. `after` beyond `lastSequence` is 409 `cursor_ahead`.
    """
    body = selectors.events_page_json(request.auth, cid, after=after, limit=limit)
    return HttpResponse(body, content_type="application/json")


@router.get(
    "/conversations/{cid}/snapshot",
    operation_id="get_snapshot",
    summary="Read a conversation's current state",
    response={200: SnapshotOut, **errors(*READ_ERRORS)},
)
def get_snapshot(request: HttpRequest, cid: PathId) -> HttpResponse:
    """The state a client needs to show the conversation now, read consistently in one
    transaction: `lastSequence` is exactly the last event it reflects, so replaying
    `GET …/events?after=lastSequence` on top of it loses and repeats nothing.

    - `openTurn`: the open turn `{id, ordinal, origin, createdAt}`, or null.
    - `calls`: the unfinished calls, oldest first, with `state` and `interaction` (what an
      approval or a question waits for); `arguments` are bounded to 4 KiB of JSON (null with
      `argumentsOmitted: true` when nothing fits): `GET /tool-calls/{id}` has them whole.
    - `tools`: the `tool.updated` states (cards, with `rev`) of the unfinished calls and of the
      latest turn's calls, newest first, at most 100. Their payloads (`input`, `output`) share
      256 KiB, newest first; older cards carry `payloadOmitted: {bytes}` instead.
    - `queue`: async-run notices not acknowledged yet; `asyncRuns`: the running async runs.

    The answer is at most 896 KiB (917,504 bytes) of JSON. `calls` (256 KiB), `queue`
    (128 KiB) and `asyncRuns` (64 KiB) have budgets of their own; a list cut to its budget is
    counted in `omitted` (present only then).
    """
    return json_response(snapshot_read(request.auth, cid))


@router.get(
    "/conversations/{cid}/history",
    operation_id="get_history",
    summary="Page through messages and tool cards",
    response={200: HistoryPageOut, **errors(*READ_ERRORS, 422)},
)
def get_history(
    request: HttpRequest, cid: PathId, before: str | None = None, limit: int = Limit
) -> HttpResponse:
    """The conversation as a transcript, newest first: `{"type": "message", "event"}` for
    each `user_message` and `assistant_message`, and `{"type": "tool", …}` for each tool call's
    card (its `tool.updated` state with `rev`), in conversation order: a call's card comes
    right after the assistant message that asked for it, a `!command`'s where its turn began.

    At most `limit` items (1…100, default 50; outside is 422) and 896 KiB of JSON a page. The
    cards' payloads share 256 KiB, newest first: older cards carry `payloadOmitted: {bytes}`
    instead of `input` and `output` (read them with `GET /tool-calls/{id}/details`). Pass
    `nextCursor` as `before` for the older page; it is null at the beginning of the
    conversation. A cursor this server did not issue is 422 naming `before`.
    """
    page = history_page(request.auth, cid, before=before or None, limit=limit)
    return json_response(page)


@router.post(
    "/conversations/{cid}/live",
    operation_id="post_live",
    summary="Stream a piece of the assistant's reply",
    response={202: LiveOut, **errors(*WRITE_ERRORS, 409)},
)
def post_live(request: HttpRequest, cid: PathId, payload: LiveIn) -> HttpResponse:
    """Publishes `{"type": "conversation.live", "conversationId", "turnId", "kind", "delta",
    "providerCallId"?}` to the conversation's websocket subscribers at once, while the
    assistant's reply streams and before its message is posted. **Nothing is stored**: a
    client that was not connected never sees it, and the posted message is what lasts.

    `kind` is `text` (assistant text) or `arguments` (a fragment of a tool call's arguments;
    then `providerCallId`, the `id` of its future `tool_call` block, is required; with `text`
    it is refused). `delta` is a non-empty string of at most 16,384 bytes of JSON (422 naming
    the field). `turnId` must be the open turn (else 409 `turn_not_open`). Answers 202
    `{"published": true}`: handed to the channel layer, not a delivery receipt.
    """
    live_publish(
        request.auth,
        cid,
        turn_id=payload.turnId,
        kind=payload.kind,
        delta=payload.delta,
        provider_call_id=payload.providerCallId,
    )
    return json_response({"published": True}, 202)


def _barrier_scope(user: Any, cid: str, tid: str) -> tuple[Any, Any]:
    try:
        conversation = selectors.conversation_for(user, cid)
        return conversation.pk, selectors.turn_for(conversation, tid).pk
    finally:
        connections.close_all()


@router.get(
    "/conversations/{cid}/turns/{tid}/results",
    operation_id="wait_turn_results",
    auth=AsyncAuth(),
    summary="Wait for a turn's tool results (the turn barrier)",
    response={200: TurnResultsOut, **errors(*READ_ERRORS, 422)},
)
async def turn_results(
    request: HttpRequest, cid: PathId, tid: PathId, wait: float = Query(0, ge=0, le=60)
) -> HttpResponse:
    """Answers as soon as the turn has no unfinished call, waiting at most `wait` seconds
    (0…60, default 0: answer at once). Always 200, in one of two shapes:

    - `{"settled": true, "results": [...], "queue": [...]}`: every call settled. `results`
      are the latest assistant message's calls in `contentIndex` order, with the
      `modelContent` to send back to the model (a command turn's results hold its one call,
      with `includeInContext`); `queue` holds async-run notices not acknowledged yet.
    - `{"settled": false, "pending": [{"toolCallId", "state"}]}`: calls were still
      unfinished when the wait ended, e.g. one `awaiting_approval` (resolve it with
      `POST /tool-calls/{id}/resolution`) or `ready` for execution. Ask again.

    The wait holds no server thread or database connection. Read-only: any number of clients
    may wait on one turn.
    """
    conversation_id, turn_id = await detached(_barrier_scope)(request.auth, cid, tid)
    answer = await turn_results_wait(conversation_id=conversation_id, turn_id=turn_id, wait=wait)
    return json_response(answer)


@router.post(
    "/conversations/{cid}/queue/ack",
    operation_id="ack_queue",
    summary="Acknowledge queue notices",
    response={200: QueueAckOut, **errors(*WRITE_ERRORS)},
)
def ack_queue(request: HttpRequest, cid: PathId, payload: QueueAckIn) -> HttpResponse:
    """Marks the async-run notices with `sequence <= upTo` delivered and answers the notices
    still waiting. Idempotent: acknowledging again changes nothing (`acknowledged: 0`).
    """
    conversation = selectors.conversation_for(request.auth, cid)
    return json_response(queue_ack(conversation_id=conversation.pk, up_to=payload.upTo))


@router.post(
    "/conversations/{cid}/turns/{tid}/cancel",
    operation_id="cancel_turn",
    summary="Cancel a turn's open calls",
    response={200: TurnCancelOut, **errors(401, 403, 404, 409, 413)},
)
def cancel_turn(request: HttpRequest, cid: PathId, tid: PathId) -> HttpResponse:
    """Settles every unfinished call of the turn and leaves the turn open. A `running` call
    settles `indeterminate` (its effect could not be confirmed) unless its handler stopped it
    before any effect; every other call settles `cancelled` (`denied` where permission was
    refused). Answers each call's outcome; again, `results` is empty.
    """
    conversation = selectors.conversation_for(request.auth, cid)
    turn = selectors.turn_for(conversation, tid)
    return json_response(turn_cancel(conversation_id=conversation.pk, turn_id=turn.pk))


@router.post(
    "/conversations/{cid}/turns/{tid}/end",
    operation_id="end_turn",
    summary="End a turn",
    response={200: TurnEndOut, **errors(*WRITE_ERRORS, 409)},
)
def end_turn(
    request: HttpRequest, cid: PathId, tid: PathId, payload: TurnEndIn | None = None
) -> HttpResponse:
    """Settles what is still open (as a cancel does), then appends one `turn_ended` event with
    `reason` (`completed` by default, or `stopped`). The body is optional.

    Idempotent: a turn already ended answers the same 200 and appends nothing.
    """
    conversation = selectors.conversation_for(request.auth, cid)
    turn = selectors.turn_for(conversation, tid)
    reason = payload.reason if payload is not None else "completed"
    return json_response(turn_end(conversation_id=conversation.pk, turn_id=turn.pk, reason=reason))
