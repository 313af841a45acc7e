"""Posting messages and user ``!command``s: turns open, unfinished calls are created."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.db import IntegrityError

from projections.units import clean_json, clean_text

from ..errors import CommandConflict, MessageConflict, TurnNotOpen, TurnOpen
from ..grants import run_commands_require
from ..models import Conversation, ConversationEvent, ToolCall, Turn
from ..selectors import call_response, call_responses
from ..shapes import event_wire, settled_call_wire
from . import publish
from ._in_transaction import call_create
from .activity import next_ordinal
from .calls import command_call_id, model_call_id
from .events import conversation_lock, event_append
from .message_limits import commands_read, message_check
from .supervision import calls_supervise
from .turns import turn_create, turn_open_find

E = ConversationEvent.Type


@dataclass
class Posted:
    """The answer to a post: ``created`` is False for a repeat answered from the record."""

    created: bool
    body: dict[str, Any]
    call_ids: list[UUID] = field(default_factory=list)


def _tool_blocks(content: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    return [(i, b) for i, b in enumerate(content) if b.get("type") == "tool_call"]


def _message_body(event: ConversationEvent) -> dict[str, Any]:
    """The answer of a message post, recomputed from its event (call ids are derived)."""
    calls = []
    if event.type == E.ASSISTANT_MESSAGE:
        for index, block in _tool_blocks(event.payload["content"]):
            call_id = model_call_id(event.conversation_id, event.message_id or "", index)
            calls.append(
                {
                    "id": str(call_id),
                    "providerCallId": block.get("id", ""),
                    "contentIndex": index,
                    "toolName": block.get("name", ""),
                    "state": "supervising",
                }
            )
    return {"event": event_wire(event), "turnId": str(event.turn_id), "toolCalls": calls}


def _commands_read(conversation_id: UUID | str, content: list[dict[str, Any]]) -> None:
    """Read the message's commands before its transaction (``commands_read``), charged to the
    conversation's owner."""
    calls = [(b.get("name", ""), b.get("arguments", {})) for _, b in _tool_blocks(content)]
    if not calls:
        return
    owner = Conversation.objects.filter(pk=conversation_id).values_list("owner_id", flat=True)
    commands_read(owner_id=owner.first(), calls=calls)


def _recorded_answer(
    conversation_id: UUID | str, message_id: str, event_type: str, content: list[dict[str, Any]]
) -> Posted | None:
    """The recorded answer of a repeated ``messageId`` (same role and content), None when the
    message is new; ``message_conflict`` when it was recorded with other content."""
    recorded = ConversationEvent.objects.filter(
        conversation_id=conversation_id, message_id=message_id
    ).first()
    if recorded is None:
        return None
    if recorded.type != event_type or recorded.payload.get("content") != content:
        raise MessageConflict(
            f"Message {message_id} was recorded with other content.", field="messageId"
        )
    return Posted(created=False, body=_message_body(recorded))


def _append(
    conversation: Any, turn: Turn, event_type: str, message_id: str, content: list[dict[str, Any]]
) -> Posted:
    """Append the message to ``turn`` and create and supervise its calls, in the caller's
    transaction (the conversation locked)."""
    event = event_append(
        conversation_id=conversation.pk,
        type=event_type,
        payload={"messageId": message_id, "content": content},
        turn_id=turn.id,
        message_id=message_id,
    )
    calls = _create_calls(event, content) if event_type == E.ASSISTANT_MESSAGE else []
    for call in calls:
        call.conversation = conversation  # supervision reads its workspace
    calls_supervise(calls=calls)
    return Posted(created=True, body=_message_body(event), call_ids=[call.id for call in calls])


def _posted_once(
    post: Any,
    conversation_id: UUID | str,
    message_id: str,
    event_type: str,
    content: list[dict[str, Any]],
) -> Posted:
    """``post()`` (one transaction); when two posts of one ``messageId`` raced past the check,
    the loser answers from the record (the unique ``(conversation, message_id)``)."""
    try:
        return post()
    except IntegrityError:
        answer = _recorded_answer(conversation_id, message_id, event_type, content)
        if answer is None:
            raise
        return answer


def message_post(
    *,
    conversation_id: UUID | str,
    message_id: str,
    role: str,
    content: list[dict[str, Any]],
    turn_id: UUID | str | None = None,
) -> Posted:
    """Append a user or assistant message; idempotent by ``messageId``.

    A user message opens a turn (``turn_open`` while one is open). An assistant message needs
    the open ``turnId`` and creates one unfinished call per ``tool_call`` block, supervised in
    the same transaction: a database failure anywhere leaves nothing written, and the client's
    retry (same ``messageId``) does the whole work. Calls made ready go to their runners after
    the commit.
    """
    content = clean_json(content)  # type: ignore[assignment]
    message_id = clean_text(message_id)
    event_type = E.USER_MESSAGE if role == "user" else E.ASSISTANT_MESSAGE
    message_check(message_id=message_id, event_type=event_type, content=content)
    if event_type == E.ASSISTANT_MESSAGE:
        _commands_read(conversation_id, content)

    def post() -> Posted:
        with publish.atomic():
            conversation = conversation_lock(conversation_id)
            recorded = _recorded_answer(conversation_id, message_id, event_type, content)
            if recorded is not None:
                return recorded
            open_turn = turn_open_find(conversation_id)
            if event_type == E.USER_MESSAGE:
                if open_turn is not None:
                    raise TurnOpen(f"Turn {open_turn.id} is still open.", field="role")
                turn = turn_create(conversation_id=conversation_id, origin=Turn.Origin.USER)
            else:
                if open_turn is None or str(open_turn.id) != str(turn_id):
                    raise TurnNotOpen("The turnId does not name the open turn.", field="turnId")
                turn = open_turn
            return _append(conversation, turn, event_type, message_id, content)

    return _posted_once(post, conversation_id, message_id, event_type, content)


def mcp_call_post(
    *,
    conversation_id: UUID | str,
    message_id: str,
    provider_call_id: str,
    tool_name: str,
    arguments: dict[str, Any],
) -> Posted:
    """One MCP ``tools/call`` (docs/mcp.md): an assistant message holding its one ``tool_call``
    block, created and supervised as any model call is (``message_post``); idempotent by
    ``messageId``.

    The message goes into the conversation's open MCP turn, or opens one (``origin = mcp``):
    calls an MCP client makes side by side share a turn, which ends when its last call
    settles (settlement). A turn of another origin open (a user or a command on the pages) is
    ``turn_open``: the conversation is busy.
    """
    block = {"type": "tool_call", "id": provider_call_id, "name": tool_name}
    content: list[dict[str, Any]] = clean_json([{**block, "arguments": arguments}])  # type: ignore[assignment]
    message_id = clean_text(message_id)
    event_type = E.ASSISTANT_MESSAGE
    message_check(message_id=message_id, event_type=event_type, content=content)
    _commands_read(conversation_id, content)

    def post() -> Posted:
        with publish.atomic():
            conversation = conversation_lock(conversation_id)
            recorded = _recorded_answer(conversation_id, message_id, event_type, content)
            if recorded is not None:
                return recorded
            turn = turn_open_find(conversation_id)
            if turn is None:
                turn = turn_create(conversation_id=conversation_id, origin=Turn.Origin.MCP)
            elif turn.origin != Turn.Origin.MCP:
                raise TurnOpen(
                    f"Turn {turn.id} ({turn.origin}) is open in this conversation; MCP calls can "
                    "be made once it ends."
                )
            return _append(conversation, turn, event_type, message_id, content)

    return _posted_once(post, conversation_id, message_id, event_type, content)


def _create_calls(event: ConversationEvent, content: list[dict[str, Any]]) -> list[ToolCall]:
    blocks = _tool_blocks(content)
    if not blocks:
        return []  # a text-only message: no query for calls or their ordinals
    ids = {
        index: model_call_id(event.conversation_id, event.message_id or "", index)
        for index, _ in blocks
    }
    answered = set(call_responses(ids.values()).values_list("tool_call_id", flat=True))
    created = []
    ordinal = next_ordinal(event.conversation_id)
    for index, block in blocks:
        if ids[index] in answered:
            continue
        call = call_create(
            ordinal=ordinal + len(created),
            call_id=ids[index],
            conversation_id=event.conversation_id,
            turn_id=event.turn_id,
            tool_name=block["name"],
            arguments=block.get("arguments", {}),
            origin=ToolCall.Origin.MODEL,
            assistant_event_id=event.pk,
            provider_call_id=block.get("id", ""),
            content_index=index,
            after_sequence=event.sequence,  # the card follows the message that asked for it
        )
        created.append(call)
    return created


def _command_body(turn: Turn, *, repeated: bool = False) -> dict[str, Any]:
    """The answer of a ``!command``: the call as created; repeated once the call settled, the
    settled call with its response (docs/subsystems/lifecycle.md, "User commands")."""
    call_id = command_call_id(turn.conversation_id, turn.input_id or "")
    if repeated:
        response = call_response(call_id).first()
        if response is not None:
            return {"turnId": str(turn.id), "toolCall": settled_call_wire(response)}
    return {
        "turnId": str(turn.id),
        "toolCall": {
            "id": str(call_id),
            "providerCallId": "",
            "contentIndex": None,
            "toolName": "bash",
            "state": "supervising",
        },
    }


def command_post(
    *,
    conversation_id: UUID | str,
    user: Any,
    input_id: str,
    command: str,
    include_in_context: bool = True,
) -> Posted:
    """A user ``!command``: its own turn (``origin = command``) and one ``bash`` call.

    Typing a command needs ``tools.run_commands`` (``Forbidden``, nothing written), checked
    before anything else: the caller has already checked that ``user`` owns the conversation,
    so another owner's id still answers 404 first. Deduplicated by ``inputId``: the same
    command again answers the recorded body; another command is ``command_conflict``. The call
    is supervised in the same transaction, as a message's calls are (``message_post``).
    """
    run_commands_require(user=user, doing="Typing a command")
    input_id, command = clean_text(input_id), clean_text(command)
    commands_read(owner_id=user.pk, calls=[("bash", {"command": command})])
    with publish.atomic():
        conversation = conversation_lock(conversation_id)
        recorded = Turn.objects.filter(conversation_id=conversation_id, input_id=input_id).first()
        if recorded is not None:
            if recorded.command != command:
                raise CommandConflict(
                    f"Input {input_id} was recorded with another command.", field="inputId"
                )
            return Posted(created=False, body=_command_body(recorded, repeated=True))
        open_turn = turn_open_find(conversation_id)
        if open_turn is not None:
            raise TurnOpen(f"Turn {open_turn.id} is still open.")
        turn = turn_create(
            conversation_id=conversation_id,
            origin=Turn.Origin.COMMAND,
            input_id=input_id,
            command=command,
            include_in_context=include_in_context,
        )
        call = call_create(
            call_id=command_call_id(conversation_id, input_id),
            conversation_id=conversation_id,
            turn_id=turn.id,
            tool_name="bash",
            arguments={"command": command},
            origin=ToolCall.Origin.USER,
            title=command.split("\n", 1)[0],
            after_sequence=conversation.last_sequence,  # its turn begins after the last event
        )
        call.conversation = conversation
        calls_supervise(calls=[call])
    return Posted(created=True, body=_command_body(turn), call_ids=[call.id])
