"""/async-runs and /launches over the API: owner scoping, shapes, log paging, permissions, and
what stop and kill do before a worker is involved (running them: tests/tools/)."""

from __future__ import annotations

import uuid

import pytest

from conversations.services.runners import LAUNCH, LAUNCH_STOP, RUN_KILL, listen, unlisten
from conversations.storage import attempt_relative, data_dir
from tools.models import AsyncRun, Launch, PermissionRule
from tools.runtime.async_runs import services as async_runs
from tools.runtime.async_runs.services import async_run_start

from .api_helpers import API, assert_error, grant_run_commands
from .helpers import assistant_calls, new_conversation, open_turn

pytestmark = pytest.mark.django_db(transaction=True)  # announcements follow commits


@pytest.fixture
def heard():
    """What the runtime would hear, by channel (in-process listeners, after commit)."""
    got: dict[str, list[str]] = {LAUNCH: [], LAUNCH_STOP: [], RUN_KILL: []}
    listeners = {channel: got[channel].append for channel in got}
    for channel, listener in listeners.items():
        listen(channel, listener)
    yield got
    for channel, listener in listeners.items():
        unlisten(channel, listener)


def _run(user, lines: int = 250):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("bash", {"command": "make"})).call_ids
    folder = attempt_relative(conversation.pk, call_id, 1)
    (data_dir() / folder).mkdir(parents=True)
    text = "".join(f"line {n}\n" for n in range(lines)).encode()
    for name in ("stdout.txt", "stderr.txt", "output.txt"):
        (data_dir() / folder / name).write_bytes(text if name != "stderr.txt" else b"")
    return async_run_start(
        run_id=uuid.uuid4(),
        conversation_id=conversation.pk,
        tool_call_id=call_id,
        command="make",
        cwd="/ws",
        folder=folder,
        host="h1",
        pid=1,
        pgid=1,
        process_start=1,
    )


def test_an_async_run_is_read_paged_and_killed_by_its_owner_only(
    api, other_api, user, heard, monkeypatch
):
    run = _run(user)
    body = api.get(f"{API}/async-runs/{run.pk}").json()
    assert (body["id"], body["status"], body["command"]) == (str(run.pk), "running", "make")
    assert body["toolCallId"] == str(run.tool_call_id) and body["noticeSequence"] is None
    page = api.get(f"{API}/async-runs/{run.pk}/log").json()  # the last 100 lines
    assert page["lines"][0] == "line 150" and page["lines"][-1] == "line 249"
    assert (page["totalLines"], page["nextOffset"], page["status"]) == (250, None, "running")
    first = api.get(f"{API}/async-runs/{run.pk}/log", {"offset": 0, "limit": 2}).json()
    assert (first["lines"], first["nextOffset"]) == (["line 0", "line 1"], 2)
    assert api.get(f"{API}/async-runs/{run.pk}/log", {"stream": "stderr"}).json()["lines"] == []
    for limit in (0, 501):
        response = api.get(f"{API}/async-runs/{run.pk}/log", {"limit": limit})
        assert_error(response, 422, "validation_error", field="limit")
    assert_error(
        api.get(f"{API}/async-runs/{run.pk}/log", {"stream": "x"}), 422, "validation_error"
    )
    for path in (f"/async-runs/{run.pk}", f"/async-runs/{run.pk}/log"):
        assert_error(other_api.get(API + path), 404, "not_found")
    assert_error(other_api.post_json(f"{API}/async-runs/{run.pk}/kill"), 404, "not_found")
    assert heard[RUN_KILL] == []
    # No worker watches this run: the kill is announced, the wait for its end runs out (made
    # short here), and the run is answered as it is, still running (tests/tools/test_bash.py
    # has a watcher end it).
    monkeypatch.setattr(async_runs, "KILL_WAIT_SECONDS", 0.3)
    killed = api.post_json(f"{API}/async-runs/{run.pk}/kill")
    assert killed.status_code == 200 and killed.json()["status"] == "running"
    assert heard[RUN_KILL] == [str(run.pk)]


def test_a_session_kills_a_run_with_its_csrf_token_only(user, heard):
    """The kill waits in an async view (``AsyncAuth``): a session's POST still needs CSRF."""
    from django.test import Client

    run = _run(user, lines=1)
    AsyncRun.objects.filter(pk=run.pk).update(status="exited", exit_code=0)  # ends at once
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(user)
    refused = browser.post(f"{API}/async-runs/{run.pk}/kill")
    assert_error(refused, 403, "csrf_failed")
    browser.get("/admin/login/")  # a page with a form gives the browser its csrftoken cookie
    token = browser.cookies["csrftoken"].value
    answered = browser.post(f"{API}/async-runs/{run.pk}/kill", HTTP_X_CSRFTOKEN=token)
    assert answered.status_code == 200 and answered.json()["status"] == "exited"
    assert heard[RUN_KILL] == []  # an ended run: nothing to kill


def test_starting_a_launch_needs_run_commands_and_a_cwd_inside_the_root(api, user, heard):
    body = {"name": "dev", "command": "python -m http.server"}
    assert_error(api.post_json(f"{API}/launches", body), 403, "forbidden")
    grant_run_commands(user)
    assert_error(
        api.post_json(f"{API}/launches", {**body, "cwd": "../elsewhere"}),
        422,
        "validation_error",
        field="cwd",
    )
    assert heard[LAUNCH] == [] and not Launch.objects.exists()
    created = api.post_json(f"{API}/launches", {**body, "cwd": "site"})
    assert created.status_code == 201, created.content
    launch = created.json()
    assert (launch["status"], launch["pid"], launch["cwd"]) == ("running", None, "site")
    assert heard[LAUNCH] == [launch["id"]]


@pytest.mark.parametrize(
    "command",
    ["rm -rf site", "cd site && rm -rf x", "$CMD -rf site"],
    ids=["plain", "chained", "unread"],
)
def test_a_launch_whose_command_a_deny_rule_denies_is_refused_naming_the_rule(
    api, user, heard, command
):
    grant_run_commands(user)
    PermissionRule.objects.create(
        tool_name="bash", pattern="rm *", decision="deny", reason="No deleting."
    )
    body = {"name": "dev", "command": command}
    error = assert_error(api.post_json(f"{API}/launches", body), 403, "forbidden")
    assert error["message"].startswith("The launch's command is denied. ")
    if command.startswith("$"):  # not plain: it cannot be checked against the deny rule
        assert "Cannot be checked against the deny rules" in error["message"]
    else:
        assert "Denied by the global rule “deny bash rm *”: No deleting." in error["message"]
    assert heard[LAUNCH] == [] and not Launch.objects.exists()  # nothing started or written
    # An ask is the owner's own say-so, as for a command the owner types.
    PermissionRule.objects.all().delete()
    PermissionRule.objects.create(tool_name="bash", pattern="python *", decision="ask")
    created = api.post_json(f"{API}/launches", {"name": "dev", "command": "python -V"})
    assert created.status_code == 201, created.content


def test_launches_are_listed_read_paged_and_stopped_by_their_owner(api, other_api, user, heard):
    grant_run_commands(user)
    ids = [
        api.post_json(f"{API}/launches", {"name": f"l{n}", "command": "true"}).json()["id"]
        for n in range(3)
    ]
    listed = api.get(f"{API}/launches", {"limit": 2}).json()
    assert [x["id"] for x in listed["items"]] == ids[::-1][:2] and listed["nextCursor"]
    rest = api.get(f"{API}/launches", {"cursor": listed["nextCursor"]}).json()
    assert [x["id"] for x in rest["items"]] == [ids[0]] and rest["nextCursor"] is None
    assert other_api.get(f"{API}/launches").json() == {"items": [], "nextCursor": None}
    assert_error(other_api.get(f"{API}/launches/{ids[0]}"), 404, "not_found")
    assert_error(other_api.post_json(f"{API}/launches/{ids[0]}/stop"), 404, "not_found")
    assert api.get(f"{API}/launches/{ids[0]}/log").json()["lines"] == []
    # No worker took it yet: stopping ends it at once.
    stopped = api.post_json(f"{API}/launches/{ids[0]}/stop").json()
    assert stopped["status"] == "killed" and stopped["finishedAt"]
    assert heard[LAUNCH_STOP] == []
    # One a worker watches: the stop is announced to it.
    Launch.objects.filter(pk=ids[1]).update(host="h1")
    assert api.post_json(f"{API}/launches/{ids[1]}/stop").json()["status"] == "running"
    assert heard[LAUNCH_STOP] == [ids[1]]
    again = api.post_json(f"{API}/launches/{ids[0]}/stop").json()
    assert again["status"] == "killed"  # ended: nothing changes


def test_reading_the_log_of_a_launch_not_started_yet_writes_nothing(api, user, heard):
    from tools.runtime.launches.services import launch_folder

    grant_run_commands(user)
    launch_id = api.post_json(f"{API}/launches", {"name": "l", "command": "true"}).json()["id"]
    page = api.get(f"{API}/launches/{launch_id}/log").json()
    assert (page["lines"], page["totalLines"], page["nextOffset"]) == ([], 0, None)
    assert not launch_folder(launch_id).exists()  # the worker creates its files itself
