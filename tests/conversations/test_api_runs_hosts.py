"""Log pages with pinned workspaces: a capture on this host's disk is read here whatever host
ran it (a ``DATA_DIR`` shared on NFS); one that is not is asked of the run's host, and with no
live worker there the answer is 503 ``unavailable`` naming the host. Asking a live worker over
the channel layer: tests/hosts/ (two hosts, Redis)."""

from __future__ import annotations

import pytest

from conversations.errors import ValidationFailed
from conversations.storage import data_dir
from tools.runtime.logs import page_read

from .api_helpers import API, assert_error
from .test_api_runs import _run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _pinned(settings):
    settings.TOOLCORE_SHARED_WORKSPACES = False
    settings.TOOLCORE_HOST_NAME = "here"


def test_a_capture_on_this_disk_is_read_here_whatever_host_ran_it(api, user):
    run = _run(user)  # watched on host h1, its files on this disk
    page = api.get(f"{API}/async-runs/{run.pk}/log?offset=0&limit=2").json()
    assert (page["lines"], page["totalLines"]) == (["line 0", "line 1"], 250)


def test_a_capture_only_on_a_host_without_a_live_worker_is_503_naming_it(api, user):
    run = _run(user)
    for name in ("stdout.txt", "stderr.txt", "output.txt"):
        (data_dir() / run.folder / name).unlink()
    answer = api.get(f"{API}/async-runs/{run.pk}/log")
    assert_error(answer, 503, "unavailable")
    assert "'h1'" in answer.json()["error"]["message"]
    assert answer["Retry-After"] == "5"


@pytest.mark.parametrize("folder", ["../outside", "/etc", "conversations/../../x"])
def test_a_question_for_a_folder_outside_the_data_dir_is_refused(folder):
    asked = {"folder": folder, "stream": "output", "offset": 0, "limit": 1, "status": "running"}
    with pytest.raises(ValidationFailed, match="Not a capture file"):
        page_read(asked)


@pytest.mark.parametrize("offset", [None, 7])
def test_a_capture_not_written_yet_is_an_empty_page_and_writes_nothing(offset):
    asked = {
        "folder": "launches/not-started",
        "stream": "output",
        "offset": offset,
        "limit": 50,
        "status": "running",
    }
    assert page_read(asked) == {
        "lines": [],
        "offset": offset or 0,
        "limit": 50,
        "totalLines": 0,
        "nextOffset": None,
        "status": "running",
        "path": None,
        "truncated": False,
    }
    assert not (data_dir() / "launches" / "not-started").exists()
