"""How a command ended (``conversations/exits.py``, ``services/exits.py``): the words every page
uses, the row recorded by a command's settlement or its run's end, and what is read back."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction
from hypothesis import given
from hypothesis import strategies as st

from conversations.exits import exit_of, exit_summary, exit_wire, exits_by_call
from conversations.models import CommandExit
from conversations.services.conversations import conversation_delete
from tools.models import PermissionRule
from tools.runtime.async_runs.services import async_run_finish

from .admin_helpers import background_command, calls, settle_command
from .helpers import new_conversation, settle


@pytest.mark.parametrize(
    ("ended", "words"),
    [
        ({"exit_code": 3}, "Exit 3"),
        ({"exit_code": 0}, "Exit 0"),
        ({"exit_code": None, "signal": "SIGKILL"}, "Killed by SIGKILL"),
        (
            {"exit_code": None, "signal": "SIGTERM", "timed_out": True, "timeout_seconds": 120},
            "Timed out after 120 s",
        ),
        (
            {"exit_code": None, "signal": "SIGTERM", "timed_out": True, "timeout_seconds": 1.5},
            "Timed out after 1.5 s",
        ),
        # A timeout before a signal before an exit code: the model's status line's order.
        (
            {"exit_code": 1, "signal": "SIGTERM", "timed_out": True, "timeout_seconds": 1.0},
            "Timed out after 1 s",
        ),
        ({"exit_code": 1, "signal": "SIGKILL"}, "Killed by SIGKILL"),
    ],
)
def test_the_words_of_an_end(ended, words):
    ended = {"signal": None, "timed_out": False, "timeout_seconds": None, **ended}
    assert exit_summary(**ended) == words


@given(
    exit_code=st.one_of(st.none(), st.integers(min_value=0, max_value=255)),
    signal=st.one_of(st.none(), st.sampled_from(["SIGKILL", "SIGTERM", "SIGSEGV"])),
    timed_out=st.booleans(),
    timeout_seconds=st.integers(min_value=1, max_value=86_400),
)
def test_one_end_one_reading(exit_code, signal, timed_out, timeout_seconds):
    """A timeout wins over a signal, a signal over an exit code, whatever else is known."""
    words = exit_summary(
        exit_code=exit_code, signal=signal, timed_out=timed_out, timeout_seconds=timeout_seconds
    )
    if timed_out:
        assert words == f"Timed out after {timeout_seconds} s"
    elif signal:
        assert words == f"Killed by {signal}"
    else:
        assert words == f"Exit {exit_code}"


@pytest.fixture
def conversation(user):
    PermissionRule.objects.create(tool_name="bash", pattern="", decision="allow")
    return new_conversation(user)


@pytest.mark.django_db
def test_a_command_settled_records_how_it_ended(conversation):
    failing, passing, killed, slow = calls(
        conversation, *[("bash", {"command": f"c{n}"}) for n in range(4)]
    )
    settle_command(failing, exit_code=3)
    settle_command(passing, exit_code=0)
    settle_command(killed, exit_code=None, signal="SIGKILL")
    settle_command(slow, exit_code=None, signal="SIGTERM", timed_out=True, timeout_seconds=120)
    assert exit_wire(exit_of(failing)) == {
        "exitCode": 3,
        "signal": None,
        "timedOut": False,
        "timeoutSeconds": None,
        "asyncRunId": None,
        "succeeded": False,
        "summary": "Exit 3",
    }
    assert exit_wire(exit_of(passing))["succeeded"] is True
    assert exit_wire(exit_of(killed))["summary"] == "Killed by SIGKILL"
    assert exit_wire(exit_of(slow)) == {
        "exitCode": None,
        "signal": "SIGTERM",
        "timedOut": True,
        "timeoutSeconds": 120.0,
        "asyncRunId": None,
        "succeeded": False,
        "summary": "Timed out after 120 s",
    }
    assert CommandExit.objects.get(pk=failing).conversation_id == conversation.pk


@pytest.mark.django_db
def test_a_call_that_ran_no_command_has_no_exit(conversation):
    host, failed = calls(
        conversation, ("exporter", {"command": "export"}), ("bash", {"command": "x"})
    )
    settle(host)
    settle(failed, "failed")
    assert exit_of(host) is None and exit_of(failed) is None
    assert exits_by_call([host, failed]) == {}


@pytest.mark.django_db
def test_a_background_command_has_its_exit_when_its_run_ends(conversation):
    (call_id,) = calls(conversation, ("bash", {"command": "make watch"}))
    run = background_command(conversation, call_id)
    assert exit_of(call_id) is None  # still running: not known yet
    async_run_finish(
        run_id=run.pk,
        status="killed",
        exit_code=None,
        signal="SIGTERM",
        timed_out=True,
        timeout_seconds=30,
    )
    wire = exit_wire(exit_of(call_id))
    assert wire["asyncRunId"] == str(run.pk)
    assert wire["summary"] == "Timed out after 30 s" and wire["succeeded"] is False


@pytest.mark.django_db
def test_a_lost_run_records_no_exit(conversation):
    (call_id,) = calls(conversation, ("bash", {"command": "make watch"}))
    run = background_command(conversation, call_id)
    async_run_finish(run_id=run.pk, status="lost", exit_code=None, signal=None)
    assert exit_of(call_id) is None


@pytest.mark.django_db
def test_exits_of_many_calls_in_one_query(conversation, django_assert_num_queries):
    ids = calls(conversation, *[("bash", {"command": f"c{n}"}) for n in range(5)])
    for n, call_id in enumerate(ids[:4]):
        settle_command(call_id, exit_code=n)
    with django_assert_num_queries(1):
        found = exits_by_call(ids)
    assert {str(k): v["summary"] for k, v in found.items()} == {
        ids[n]: f"Exit {n}" for n in range(4)
    }
    with django_assert_num_queries(0):
        assert exits_by_call([]) == {}


@pytest.mark.django_db
def test_succeeded_is_derived_and_something_is_known(conversation):
    """The database refuses a row whose ``succeeded`` contradicts its exit, or that knows
    nothing of how the command ended."""
    (call_id,) = calls(conversation, ("bash", {"command": "c"}))
    bad = [
        {"exit_code": 3, "succeeded": True},
        {"exit_code": 0, "succeeded": False},
        {"exit_code": 0, "signal": "SIGKILL", "succeeded": True},
        {"exit_code": None, "succeeded": False},
    ]
    for fields in bad:
        with pytest.raises(IntegrityError), transaction.atomic():
            CommandExit.objects.create(
                tool_call_id=call_id, conversation_id=conversation.pk, **fields
            )


@pytest.mark.django_db(transaction=True)
def test_deleting_a_conversation_deletes_its_exits(conversation):
    (call_id,) = calls(conversation, ("bash", {"command": "c"}))
    settle_command(call_id, exit_code=3)
    conversation_delete(conversation_id=conversation.pk)
    assert not CommandExit.objects.filter(pk=call_id).exists()
