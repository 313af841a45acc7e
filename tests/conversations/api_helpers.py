"""Helpers of the REST API tests: the error-body check, a world of one user's things, calls in
the states the tests need."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from conversations.models import (
    Asset,
    Conversation,
    ConversationEvent,
    ExecutionClaim,
    ToolActivity,
    ToolCall,
    Turn,
)
from conversations.services.claims import claim_acquire
from conversations.services.settlement import ClaimGuard, call_settle
from conversations.storage import attempt_relative, conversation_dir
from tools.models import AsyncRun, Launch, PermissionRule
from tools.runtime.async_runs.services import async_run_start

from .helpers import assistant_calls, new_conversation, open_turn

API = "/api/v1"
ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
ERROR_KEYS = {"code", "message", "field"}


# --- helpers ---------------------------------------------------------------------------------


def assert_error(response, status: int, code: str, *, field: Any = ...) -> dict[str, Any]:
    """The error body: exactly ``{"error": {"code", "message", "field"?}}``, JSON."""
    assert response.status_code == status, (response.status_code, response.content[:500])
    assert response["Content-Type"] == "application/json"
    body = json.loads(response.content)
    assert set(body) == {"error"}, body
    error = body["error"]
    assert {"code", "message"} <= set(error) <= ERROR_KEYS, error
    assert isinstance(error["message"], str) and error["message"]
    assert error["code"] == code, error
    if "field" in error:
        assert isinstance(error["field"], str) and error["field"]
    if field is not ...:
        assert error.get("field") == field, error
    return error


def send(client: Client, method: str, path: str, body: Any = None):
    """One request; ``body`` is sent as JSON for POSTs (an empty body when None)."""
    url = path if path.startswith("/api/") else API + path
    if method == "post":
        data = "" if body is None else json.dumps(body)
        return client.post(url, data=data, content_type="application/json")
    return getattr(client, method)(url)


def grant_run_commands(user) -> None:
    user.user_permissions.add(Permission.objects.get(codename="run_commands"))


def settle_host(call_id, *, result: Any = None, text: str = "done", files=()) -> ConversationEvent:
    """Claim a ready call as worker ``w`` and settle it ``completed``."""
    claim = claim_acquire(call_id=call_id, worker="w")
    assert claim is not None
    return call_settle(
        call_id=call_id,
        outcome="completed",
        guard=ClaimGuard(claim.token, claim.generation),
        result=result if result is not None else {"text": text},
        text=text,
        files=files,
    )


def events_of(conversation) -> list[tuple[int, str]]:
    return list(
        ConversationEvent.objects.filter(conversation_id=conversation.pk)
        .order_by("sequence")
        .values_list("sequence", "type")
    )


def state_of(call_id) -> str | None:
    return ToolCall.objects.filter(pk=call_id).values_list("state", flat=True).first()


def outcome_of(call_id) -> str | None:
    payload = (
        ConversationEvent.objects.filter(tool_call_id=call_id)
        .values_list("payload", flat=True)
        .first()
    )
    return None if payload is None else payload["outcome"]


def compact_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


# --- a conversation of user A with a bit of everything -----------------------------------------


@dataclass
class World:
    conversation: Conversation
    turn_id: str
    settled_id: str
    open_id: str
    asset_id: str
    run_id: str
    launch_id: str

    def ids(self) -> dict[str, str]:
        return {
            "cid": str(self.conversation.pk),
            "tid": self.turn_id,
            "settled": self.settled_id,
            "open": self.open_id,
            "asset": self.asset_id,
            "run": self.run_id,
            "launch": self.launch_id,
        }


def build_world(owner) -> World:
    conversation = new_conversation(owner, title="A's")
    turn_id = open_turn(conversation)
    posted = assistant_calls(
        conversation, turn_id, ("notes", {"q": "x"}), ("bash", {"command": "ls -la"})
    )
    host_id, bash_id = posted.call_ids
    assert state_of(bash_id) == "awaiting_approval"
    event = settle_host(host_id, result={"lines": "one\ntwo"}, text="one\ntwo")
    asset_id = event.payload["assetIds"][0]
    run = async_run_start(
        run_id=uuid.uuid4(),
        conversation_id=conversation.pk,
        tool_call_id=host_id,
        command="make watch",
        cwd="/ws",
        folder=attempt_relative(conversation.pk, host_id, 1),
        host="elsewhere",
        pid=1,
        pgid=1,
        process_start=1,
    )
    launch = Launch.objects.create(  # a launch a worker on another host watches
        owner=owner, name="dev", command="make serve", host="elsewhere", started_at=timezone.now()
    )
    return World(
        conversation, turn_id, str(host_id), str(bash_id), asset_id, str(run.pk), str(launch.pk)
    )


def world_state(world: World) -> dict[str, Any]:
    cid = world.conversation.pk
    folder = conversation_dir(cid)
    return {
        "conversation": list(
            Conversation.objects.filter(pk=cid).values_list("title", "last_sequence")
        ),
        "events": list(
            ConversationEvent.objects.filter(conversation_id=cid)
            .order_by("sequence")
            .values_list("sequence", "type", "tool_call_id")
        ),
        "turns": list(Turn.objects.filter(conversation_id=cid).values_list("id", "status")),
        "calls": list(
            ToolCall.objects.filter(conversation_id=cid)
            .order_by("id")
            .values_list("id", "state", "generation", "resolution_request_id")
        ),
        "assets": list(Asset.objects.filter(conversation_id=cid).values_list("id", "sha256")),
        "activity": list(
            ToolActivity.objects.filter(conversation_id=cid).order_by("id").values_list("id", "rev")
        ),
        "rules": PermissionRule.objects.count(),
        "runs": list(AsyncRun.objects.filter(conversation_id=cid).values_list("id", "status")),
        "launches": list(Launch.objects.values_list("id", "status", "heartbeat_at")),
        "files": sorted(str(p.relative_to(folder)) for p in folder.rglob("*")),
    }


# Every route of docs/subsystems/api.md's table that conversations/api.py serves, with a valid body.
ROUTES: list[tuple[str, str, Any]] = [
    ("get", "/conversations/{cid}", None),
    ("delete", "/conversations/{cid}", None),
    (
        "post",
        "/conversations/{cid}/messages",
        {"messageId": "b-1", "role": "user", "content": [{"type": "text", "text": "hi"}]},
    ),
    (
        "post",
        "/conversations/{cid}/messages",
        {"messageId": "b-2", "role": "assistant", "turnId": "{tid}", "content": []},
    ),
    (
        "post",
        "/conversations/{cid}/commands",
        {"inputId": "b-in", "command": "ls", "includeInContext": True},
    ),
    ("get", "/conversations/{cid}/events", None),
    ("get", "/conversations/{cid}/snapshot", None),
    ("get", "/conversations/{cid}/history", None),
    ("get", "/conversations/{cid}/history?limit=2", None),
    ("post", "/conversations/{cid}/live", {"turnId": "{tid}", "kind": "text", "delta": "hi"}),
    ("get", "/conversations/{cid}/events?after=1&limit=5", None),
    ("get", "/conversations/{cid}/turns/{tid}/results?wait=0", None),
    ("post", "/conversations/{cid}/queue/ack", {"upTo": 3}),
    ("post", "/conversations/{cid}/turns/{tid}/cancel", None),
    ("post", "/conversations/{cid}/turns/{tid}/end", {"reason": "stopped"}),
    ("get", "/tool-calls/{open}", None),
    ("get", "/tool-calls/{settled}", None),
    (
        "post",
        "/tool-calls/{open}/resolution",
        {"requestId": "b-r", "kind": "approval", "decision": "deny"},
    ),
    (
        "post",
        "/tool-calls/{settled}/resolution",
        {"requestId": "b-r", "kind": "approval", "decision": "allow"},
    ),
    ("post", "/tool-calls/{open}/cancel", None),
    ("post", "/tool-calls/{settled}/cancel", None),
    ("get", "/tool-calls/{open}/details", None),
    ("get", "/tool-calls/{settled}/details", None),
    ("get", "/assets/{asset}", None),
    ("get", "/assets/{asset}/lines", None),
    ("get", "/assets/{asset}/lines?offset=0&limit=10", None),
    (
        "post",
        "/tool-calls/{open}/updates",
        {"token": str(uuid.UUID(int=1)), "generation": 1, "update": {}},
    ),
    (
        "post",
        "/tool-calls/{open}/settle",
        {"token": str(uuid.UUID(int=1)), "generation": 1, "outcome": "completed", "content": []},
    ),
    ("get", "/async-runs/{run}", None),
    ("get", "/async-runs/{run}/log", None),
    ("post", "/async-runs/{run}/kill", None),
    ("get", "/launches/{launch}", None),
    ("get", "/launches/{launch}/log?limit=5", None),
    ("post", "/launches/{launch}/stop", None),
]


def _fill(template: Any, ids: dict[str, str]) -> Any:
    if isinstance(template, str):
        return template.format(**ids)
    if isinstance(template, dict):
        return {k: _fill(v, ids) for k, v in template.items()}
    return template


def bash_awaiting_approval(user):
    """A model's ``bash`` call awaiting approval (its default decision is ``ask``): the
    conversation, the call id and its resolution URL."""
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("bash", {"command": "ls"})).call_ids
    return conversation, call_id, f"{API}/tool-calls/{call_id}/resolution"


QUESTIONS = [
    {"id": "q1", "question": "Proceed?", "options": ["yes", "no"]},
    {"id": "q2", "question": "Which files?", "options": ["a", "b", "c"], "multiple": True},
]


def awaiting_input_call(user) -> str:
    """An ``ask_user`` call: its handler (run by the server at once) moved it ``running`` →
    ``awaiting_input`` with the questions and released its claim."""
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(
        conversation, turn_id, ("ask_user", {"questions": QUESTIONS})
    ).call_ids
    call = ToolCall.objects.get(pk=call_id)
    assert call.state == "awaiting_input"
    assert call.interaction == {"kind": "input", "request": {"questions": QUESTIONS}}
    assert call.generation == 1 and not ExecutionClaim.objects.filter(call_id=call_id).exists()
    return str(call_id)
