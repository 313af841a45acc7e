"""Two "hosts" on one machine with no shared directory (docs/deployment.md, "Pinned
workspaces"; ``make two-hosts``): each has a daphne and a ``runworker_tools`` of its own, its
own ``DATA_DIR``, workspace root and ``TOOLCORE_HOST_NAME``; PostgreSQL, Redis and the asset
store (SeaweedFS's S3, started by the suite) are shared.

- A conversation's calls run on the host its first call ran on, and only there.
- Live output and async-run log pages of a run on one host are served by either daphne (the
  log page asked of the run's host over the channel layer); so is every asset of a call settled
  on one host (the object store): whole, a range, a page of lines.
- ``kill -9`` of one host's worker: its running call settles as on one host (``indeterminate``
  once the lease ran out), its log pages answer 503 while no worker of it lives, and after
  ``TOOLCORE_HOST_GRACE`` its conversations are released: the next call fails naming the host,
  the one after runs on the other host.
- A restart in order of one host's worker (a deploy) loses nothing: the other host's sweeps
  meanwhile leave its conversations pinned, and their next call runs there, in the workspace
  the earlier calls left.

Real processes, black-box: HTTP and websockets, and ``manage.py shell`` for the pins.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TEST_BUCKET
from tests.isolation import own_redis_database
from tests.realtime.daphne_helpers import (
    Rest,
    Site,
    receive,
    redis_url,
    subscribe,
    uses_postgresql,
    ws_connect,
)

pytestmark = pytest.mark.hosts

LEASE = 3  # seconds: renewed every second
# Seconds without a sign of life before a host's conversations are released: room for a
# worker's restart on a loaded machine.
GRACE = 20
HOSTS = ("host-a", "host-b")


def _host_env(root: Path, name: str) -> dict[str, str]:
    """What makes ``name`` a host of its own: its folders and its name."""
    for folder in ("data", "workspaces"):
        (root / name / folder).mkdir(parents=True)
    return {
        "DATA_DIR": str(root / name / "data"),
        "TOOLCORE_WORKSPACE_ROOT": str(root / name / "workspaces"),
        "TOOLCORE_HOST_NAME": name,
        "TOOLCORE_SHARED_WORKSPACES": "0",
        "TOOLCORE_CLAIM_LEASE": str(LEASE),
        "TOOLCORE_HOST_GRACE": str(GRACE),
    }


@pytest.fixture
def two_hosts(tmp_path, request):
    if not (uses_postgresql() and redis_url()):
        pytest.skip(
            "two hosts share one PostgreSQL database and one Redis and nothing else: set "
            "DATABASE_URL=postgres://… and REDIS_URL=redis://… (make two-hosts)"
        )
    # No shared disk: the assets go to the object store both hosts reach.
    store = request.getfixturevalue("seaweed")
    made = Site(tmp_path / "shared")
    made.env["REDIS_URL"] = own_redis_database("hosts")
    made.env.update(store.environ())
    made.env["TOOLCORE_ASSET_STORAGE"] = f"s3://{TEST_BUCKET}/two-hosts-{uuid.uuid4().hex}"
    made.env["TOOLCORE_S3_ENDPOINT_URL"] = store.endpoint_url
    try:
        made.create()
        made.manage(
            "shell",
            "-c",
            "from tools.models import PermissionRule\n"
            "PermissionRule.objects.create(tool_name='bash', pattern='*', decision='allow', "
            "reason='the two-host suite')",
        )
        hosts = {}
        for name in HOSTS:
            env = _host_env(tmp_path, name)
            hosts[name] = {
                "root": tmp_path / name,
                "daphne": made.daphne(**env),
                "worker": made.tool_worker(**env),
            }
            hosts[name]["rest"] = Rest(hosts[name]["daphne"].port, made.token)
        _until_both_hosts_beat(made)
        yield made, hosts
        # The one error expected: the 503 of a log page whose host has no worker (Django logs
        # every 5xx).
        expected = "Service Unavailable: /api/v1/async-runs/"
        errors = [line for line in made.errors() if expected not in line]
        assert not errors, "a process logged errors:\n" + "\n".join(errors[:20])
    finally:
        made.close()


def _until_both_hosts_beat(made: Site) -> None:
    """Each host's worker has its heartbeat: a host with none counts as gone (recovery would
    release a conversation pinned to a host whose worker is still starting)."""
    made.manage(
        "shell",
        "-c",
        "import time\n"
        "from tools.models import WorkerHeartbeat\n"
        "deadline = time.monotonic() + 60\n"
        "running = WorkerHeartbeat.objects.filter(stopped_at__isnull=True)\n"
        f"while not set(running.values_list('host', flat=True)) >= {set(HOSTS)!r}:\n"
        "    assert time.monotonic() < deadline, 'a worker never beat'\n"
        "    time.sleep(0.2)",
    )


def _call(rest: Rest, cid: str, turn_id: str, key: str, **arguments: Any) -> str:
    body = {
        "messageId": f"m-{key}",
        "role": "assistant",
        "turnId": turn_id,
        "content": [{"type": "tool_call", "id": key, "name": "bash", "arguments": arguments}],
    }
    return rest.call("POST", f"/conversations/{cid}/messages", body)["toolCalls"][0]["id"]


def _response(rest: Rest, cid: str, call_id: str, timeout: float = 30) -> dict[str, Any]:
    """The payload of the call's ``tool_call_response``, once there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        after = 0
        while after is not None:
            page = rest.call("GET", f"/conversations/{cid}/events?after={after}")
            for event in page["events"]:
                if event["type"] == "tool_call_response" and event["toolCallId"] == call_id:
                    return event["payload"]
            after = page["nextAfter"]
        time.sleep(0.2)
    state = rest.call("GET", f"/tool-calls/{call_id}")
    raise AssertionError(f"call {call_id} did not settle in {timeout} s: {state}")


def _text(payload: dict[str, Any]) -> str:
    return "\n".join(part.get("text", "") for part in payload["modelContent"])


def _pins(made: Site) -> dict[str, str]:
    out = made.manage(
        "shell",
        "-c",
        "import json\nfrom conversations.models import Conversation\n"
        "print(json.dumps({str(i): h for i, h in Conversation.objects.values_list('id', 'host')}))",
    )
    return json.loads(out.strip().splitlines()[-1])


def _conversation(rest: Rest) -> tuple[str, str]:
    cid = rest.conversation_create()
    return cid, rest.turn_open(cid)


def _ran_on(payload: dict[str, Any], hosts: dict[str, Any]) -> str:
    """The host whose workspace root the command's ``pwd`` printed."""
    text = _text(payload)
    found = [name for name, host in hosts.items() if str(host["root"] / "workspaces") in text]
    assert len(found) == 1, text
    return found[0]


def _log(port: int, token: str, process: str) -> tuple[int, Any]:
    """The first page of ``process``'s log (``/async-runs/ID`` or ``/launches/ID``)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1{process}/log?offset=0&limit=500",
        headers={"Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_conversations_run_on_their_host_and_either_daphne_serves_their_output(two_hosts):
    made, hosts = two_hosts
    a, b = hosts["host-a"], hosts["host-b"]
    # Pinning: each conversation's first call pins it to the host that ran it, whichever
    # that was; every later call runs there, whichever daphne took the message.
    conversations = [_conversation(a["rest"] if n % 2 else b["rest"]) for n in range(6)]
    first = {}
    for n, (cid, turn_id) in enumerate(conversations):
        call = _call(a["rest"], cid, turn_id, f"first-{n}", command="pwd; touch here.txt")
        first[cid] = _ran_on(_response(a["rest"], cid, call), hosts)
    pins = _pins(made)
    assert {cid: pins[cid] for cid, _ in conversations} == first
    for n, (cid, turn_id) in enumerate(conversations):
        via = hosts[HOSTS[n % 2]]["rest"]
        call = _call(via, cid, turn_id, f"again-{n}", command="pwd; ls")
        payload = _response(via, cid, call)
        assert _ran_on(payload, hosts) == first[cid]
        assert "here.txt" in _text(payload)  # the file the first call left
    # Each host's files on its own disk only.
    for cid, _ in conversations:
        other = "host-b" if first[cid] == "host-a" else "host-a"
        assert not list((hosts[other]["root"] / "workspaces").rglob(f"{cid}/here.txt"))

    # Conversations pinned to each host (set, so both hosts are exercised).
    on_a, on_b = _conversation(a["rest"]), _conversation(a["rest"])
    made.manage(
        "shell",
        "-c",
        "from conversations.models import Conversation\n"
        f"Conversation.objects.filter(pk='{on_a[0]}').update(host='host-a')\n"
        f"Conversation.objects.filter(pk='{on_b[0]}').update(host='host-b')",
    )
    asyncio.run(_live_output_through_the_other_daphne(made, hosts, on_b))
    _log_pages_from_either_daphne(made, hosts, on_a)
    _assets_from_either_daphne(made, hosts, on_b)


async def _live_output_through_the_other_daphne(made: Site, hosts: dict, on_b) -> None:
    """A command running on host-b, watched through host-a's daphne: its live output comes
    before its end."""
    cid, turn_id = on_b
    ws = await ws_connect(hosts["host-a"]["daphne"], made.token)
    try:
        await subscribe(ws, cid, None)
        call = await asyncio.to_thread(
            _call,
            hosts["host-a"]["rest"],
            cid,
            turn_id,
            "live",
            command="pwd; printf 'tick-%s\\n' one; sleep 2; printf 'tick-%s\\n' two",
        )
        seen: list[str] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            frame = json.dumps(await receive(ws, timeout=30))
            seen.append(frame)
            if "tick-two" in frame:
                break
        live = [f for f in seen if "tick-one" in f and "tick-two" not in f]
        assert live, seen[-5:]
    finally:
        await ws.close()
    payload = await asyncio.to_thread(_response, hosts["host-a"]["rest"], cid, call)
    assert _ran_on(payload, hosts) == "host-b"


def _log_pages_from_either_daphne(made: Site, hosts: dict, on_a) -> None:
    """An async run and a launch on host-a: their log pages read by host-b's daphne are those
    host-a's daphne reads from its disk."""
    cid, turn_id = on_a
    rest = hosts["host-b"]["rest"]
    call = _call(
        rest,
        cid,
        turn_id,
        "background",
        command="seq 1 300; sleep 20",
        run_in_background=True,
    )
    run_id = _response(rest, cid, call)["asyncRunId"]
    assert run_id
    _same_page_from_either_daphne(made, hosts, f"/async-runs/{run_id}")
    # The capture is on host-a's disk only: no shared directory.
    assert list((hosts["host-a"]["root"] / "data" / "conversations" / cid).rglob("output.txt"))
    assert not (hosts["host-b"]["root"] / "data" / "conversations" / cid).exists()
    rest.call("POST", f"/async-runs/{run_id}/kill")

    # A launch in that conversation's workspace is pinned with it: host-a's worker runs it,
    # and its log pages too are the same through either daphne.
    workspace = rest.call("GET", f"/conversations/{cid}")["workspace"]
    launch = rest.call(
        "POST", "/launches", {"name": "ticks", "command": "seq 1 300; sleep 20", "cwd": workspace}
    )
    _same_page_from_either_daphne(made, hosts, f"/launches/{launch['id']}")
    launches = hosts["host-a"]["root"] / "data" / "launches" / launch["id"]
    assert (launches / "output.txt").exists()
    assert not (hosts["host-b"]["root"] / "data" / "launches").exists()
    rest.call("POST", f"/launches/{launch['id']}/stop")


def _same_page_from_either_daphne(made: Site, hosts: dict, process: str) -> None:
    """``process`` prints 1 to 300 on host-a: host-b's daphne reads its page (asked of
    host-a's worker over the channel layer) as host-a's daphne reads it from its disk."""
    deadline = time.monotonic() + 20
    while True:
        status, page = _log(hosts["host-b"]["daphne"].port, made.token, process)
        assert status == 200, page
        if page["totalLines"] == 300 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert page["lines"][:3] == ["1", "2", "3"] and page["totalLines"] == 300
    status, same = _log(hosts["host-a"]["daphne"].port, made.token, process)
    assert (status, same) == (200, page)


def _get(port: int, token: str, path: str, **headers: str) -> tuple[int, bytes]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1{path}",
        headers={"Authorization": f"Bearer {token}", **headers},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _assets_from_either_daphne(made: Site, hosts: dict, on_b) -> None:
    """A call settled on host-b: its output asset, whole, a range and a page of lines, is the
    same through either daphne, though neither host's disk holds it for the other."""
    cid, turn_id = on_b
    rest = hosts["host-a"]["rest"]
    call = _call(rest, cid, turn_id, "assets", command="seq 1 5000")
    payload = _response(rest, cid, call)
    assert _ran_on_host_b(made, cid)
    expected = "".join(f"{n}\n" for n in range(1, 5001)).encode()
    answers = {}
    for name in HOSTS:
        port = hosts[name]["daphne"].port
        found = []
        for asset_id in payload["assetIds"]:
            status, body = _get(port, made.token, f"/assets/{asset_id}")
            assert status == 200, body[:200]
            if body == expected:
                found.append(asset_id)
        # The command's output (and its stdout, the same bytes here).
        assert found, f"no asset holds the output through {name}'s daphne"
        output = found[0]
        ranged = _get(port, made.token, f"/assets/{output}", Range="bytes=10-19")
        lines = _get(port, made.token, f"/assets/{output}/lines?offset=4000&limit=3")
        answers[name] = (ranged, json.loads(lines[1])["lines"])
    assert answers["host-a"] == answers["host-b"]
    (status, ranged), lines = answers["host-a"]
    assert (status, ranged) == (206, expected[10:20])
    assert lines == ["4001", "4002", "4003"]


def _ran_on_host_b(made: Site, cid: str) -> bool:
    return _pins(made)[cid] == "host-b"


def test_a_host_whose_worker_died_settles_its_calls_and_is_released_after_the_grace(two_hosts):
    made, hosts = two_hosts
    a, b = hosts["host-a"], hosts["host-b"]
    cid, turn_id = _conversation(a["rest"])
    _pin(made, cid, "host-b")
    background = _call(
        a["rest"], cid, turn_id, "bg", command="echo lines; sleep 15", run_in_background=True
    )
    answered = _response(a["rest"], cid, background)
    assert "asyncRunId" in answered, answered
    run_id = answered["asyncRunId"]
    running = _call(a["rest"], cid, turn_id, "running", command="pwd; sleep 15")
    deadline = time.monotonic() + 20
    while a["rest"].call("GET", f"/tool-calls/{running}")["state"] != "running":
        assert time.monotonic() < deadline, "the call never ran"
        time.sleep(0.1)
    b["worker"].kill()
    killed_at = time.monotonic()

    # Its running call settles as on one host: indeterminate, once the lease ran out.
    assert _response(a["rest"], cid, running)["outcome"] == "indeterminate"
    # Its run's log page: no worker of host-b answers.
    status, body = _log(a["daphne"].port, made.token, f"/async-runs/{run_id}")
    assert (status, body["error"]["code"]) == (503, "unavailable"), body
    assert "host-b" in body["error"]["message"]

    # After the grace, the conversation is released: the next call fails naming host-b...
    lost = _call(a["rest"], cid, turn_id, "after", command="pwd")
    payload = _response(a["rest"], cid, lost, timeout=GRACE + 4 * LEASE + 20)
    assert time.monotonic() - killed_at >= GRACE
    assert payload["outcome"] == "failed"
    assert "'host-b'" in _text(payload) and "files are lost" in _text(payload)
    # ...and the one after runs on host-a, in a new workspace.
    again = _call(a["rest"], cid, turn_id, "fresh", command="pwd")
    assert _ran_on(_response(a["rest"], cid, again), hosts) == "host-a"
    assert _pins(made)[cid] == "host-a"


def test_a_host_whose_worker_restarts_in_order_keeps_its_conversations(two_hosts):
    made, hosts = two_hosts
    a, b = hosts["host-a"], hosts["host-b"]
    cid, turn_id = _conversation(a["rest"])
    _pin(made, cid, "host-b")
    first = _call(a["rest"], cid, turn_id, "before", command="pwd; touch kept.txt")
    assert _ran_on(_response(a["rest"], cid, first), hosts) == "host-b"
    b["worker"].stop()  # SIGTERM: it stops in order, as a deploy stops it
    time.sleep(LEASE + 1)  # host-a's worker sweeps once a lease
    assert _pin_of(made, cid) == ("host-b", "")  # not released
    b["worker"].start()
    after = _call(a["rest"], cid, turn_id, "after", command="pwd; ls")
    payload = _response(a["rest"], cid, after)
    assert payload["outcome"] == "completed", payload
    assert _ran_on(payload, hosts) == "host-b" and "kept.txt" in _text(payload)


def _pin(made: Site, cid: str, host: str) -> None:
    made.manage(
        "shell",
        "-c",
        "from conversations.models import Conversation\n"
        f"Conversation.objects.filter(pk='{cid}').update(host='{host}')",
    )


def _pin_of(made: Site, cid: str) -> tuple[str, str]:
    """The conversation's host and the host it lost, if released."""
    out = made.manage(
        "shell",
        "-c",
        "import json\nfrom conversations.models import Conversation\n"
        f"print(json.dumps(list(Conversation.objects.values_list('host', 'lost_host')"
        f".get(pk='{cid}'))))",
    )
    return tuple(json.loads(out.strip().splitlines()[-1]))
