"""Helpers of the REST API tests: requests (``send``, ``post_raw``, ``asgi_get``), the checks of
an answer (``assert_error``, ``assert_unavailable``, ``compact_size``, ``payload_bytes``), a world
of one user's things (``World``, ``build_world``, ``world_state``) and every route with a valid
body (``ROUTES``, ``PATH_OBJECTS``, ``filled``), calls in the states the tests need. The building
blocks (conversations, turns, calls, settling) are in ``helpers``."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.contrib.auth.models import Permission
from django.core.handlers.asgi import ASGIHandler
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
from conversations.storage import attempt_relative, conversation_dir, data_dir
from tools.models import AsyncRun, Launch, PermissionRule
from tools.runtime.async_runs.services import async_run_start

from .helpers import assistant_calls, new_conversation, open_turn, settle, state_of

API = "/api/v1"
ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
ERROR_KEYS = {"code", "message", "field"}
PROBE_HOST = "10.1.2.3"  # a load balancer probes by IP address
# The parts of a history card or snapshot call that share the payload budget.
PAYLOAD_KEYS = ("input", "inputOmitted", "output")


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


def assert_unavailable(response, what: str = "database") -> dict[str, Any]:
    """A 503 ``unavailable`` that says what is unavailable and asks to retry after 1 s."""
    error = assert_error(response, 503, "unavailable")
    assert response["Retry-After"] == "1"
    assert f"The {what} is unavailable" in error["message"]
    return error


def send(client: Client, method: str, path: str, body: Any = None):
    """One request with any test client (a token's, a session's, none); ``body`` is sent as
    JSON for POSTs (an empty body when None). A path not under ``/api/`` is one of ``API``."""
    url = path if path.startswith("/api/") else API + path
    if method == "post":
        data = "" if body is None else json.dumps(body)
        return client.post(url, data=data, content_type="application/json")
    return getattr(client, method)(url)


def post_raw(client, url: str, raw: bytes | str, content_type: str = "application/json"):
    """A POST of ``raw`` bytes as they are (not JSON-encoded)."""
    return client.generic("POST", url, raw, content_type=content_type)


def asgi_get(
    path: str,
    host: str = "testserver",
    *,
    headers: list[tuple[bytes, bytes]] = (),
    client: tuple[str, int] = (PROBE_HOST, 40000),
    app: Any = None,
) -> tuple[int, bytes]:
    """One GET through an ASGI application as daphne hands it over, from ``client`` with the
    Host header ``host``: its status and body. ``app``: Django's ASGI handler (the async
    middleware chain daphne runs) unless given (e.g. ``config.asgi.application``)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"host", host.encode()), *headers],
        "client": client,
        "server": (host, 80),
    }

    async def run() -> tuple[int, bytes]:
        communicator = ApplicationCommunicator(app or ASGIHandler(), scope)
        await communicator.send_input({"type": "http.request", "body": b"", "more_body": False})
        start = await communicator.receive_output(10)
        body = b""
        while True:
            message = await communicator.receive_output(10)
            body += message.get("body", b"")
            if not message.get("more_body"):
                return start["status"], body

    return async_to_sync(run)()


def grant_run_commands(user) -> None:
    user.user_permissions.add(Permission.objects.get(codename="run_commands"))


def settle_host(call_id, *, result: Any = None, text: str = "done", files=()) -> ConversationEvent:
    """``settle`` a ready call ``completed`` as a host tool answers: ``result`` by default
    ``{"text": text}``."""
    result = result if result is not None else {"text": text}
    return settle(call_id, result=result, text=text, files=files)


def events_of(conversation) -> list[tuple[int, str]]:
    return list(
        ConversationEvent.objects.filter(conversation_id=conversation.pk)
        .order_by("sequence")
        .values_list("sequence", "type")
    )


def compact_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def payload_bytes(item: dict[str, Any]) -> int:
    """The compact size of the payload parts (``PAYLOAD_KEYS``) of a card or a call."""
    return compact_size({k: item[k] for k in PAYLOAD_KEYS if k in item})


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


# The objects a path parameter names (keys of ``World.ids()``), by the parameter's name; several:
# each is tried. A new parameter name fails the fuzz and matrix tests until it is added here.
PATH_OBJECTS = {
    "cid": ("cid",),
    "tid": ("tid",),
    "call_id": ("open", "settled"),
    "asset_id": ("asset",),
    "run_id": ("run",),
    "launch_id": ("launch",),
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
    # Their captures are on this disk too (a DATA_DIR shared across hosts), so their log pages
    # are read here, not asked of a host that has no worker (a 503, tests/hosts/).
    for folder in (data_dir() / run.folder, data_dir() / "launches" / str(launch.pk)):
        folder.mkdir(parents=True, exist_ok=True)
        for stream in ("output", "stdout", "stderr"):
            (folder / f"{stream}.txt").write_text("started\n")
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


# Every route of docs/subsystems/api.md's table that the routers of conversations/api/ serve, with a
# valid body.
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


def filled(template: Any, ids: dict[str, str]) -> Any:
    """A route's path or body with ``{name}`` filled from ``ids``, in strings, dicts and lists."""
    if isinstance(template, str):
        return template.format(**ids)
    if isinstance(template, dict):
        return {k: filled(v, ids) for k, v in template.items()}
    if isinstance(template, list):
        return [filled(v, ids) for v in template]
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
