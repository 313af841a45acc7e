"""A full disk under ``DATA_DIR``, while a command's output is captured and while calls settle:
every call settles at once, ``failed`` (replay-safe) or ``indeterminate`` (anything else) with a
reason that says the result could not be stored; never a half-written settlement; the
invariants hold.

``DATA_DIR`` is a 1 MiB tmpfs mounted by the test where the machine allows it (root, and
``mount -t tmpfs`` works); elsewhere ``ENOSPC`` is injected where settlement writes its files
(``conversations/storage.py`` ``write_exclusive``), and the capture case is skipped.
"""

from __future__ import annotations

import errno
import os
import subprocess

import pytest

from conversations.models import Asset
from conversations.services import settlement
from conversations.storage import absolute_from_data, sha256_file
from tests.conversations.helpers import assistant_calls
from tests.tools.worker_helpers import response_of, running_worker, wait_for
from tools.runtime.registry import HANDLERS

from .helpers import assert_intact, bash_conversation, settled_once

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]

NO_SPACE = "No space left on device"


def _mount_tmpfs(folder) -> bool:
    if os.geteuid() != 0:
        return False
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


@pytest.fixture
def small_disk(settings, tmp_path):
    """``DATA_DIR`` on a 1 MiB tmpfs (its path), or None where none can be mounted."""
    mount = tmp_path / "small"
    mount.mkdir()
    if not _mount_tmpfs(mount):
        yield None
        return
    settings.DATA_DIR = mount
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(folder) -> None:
    """Write a file until the disk refuses."""
    with open(folder / "filler", "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def _inject_enospc(monkeypatch) -> None:
    def refuse(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(settlement, "write_exclusive", refuse)


FILES = {"notes.txt": "some notes\n"}  # the workspace's


def _assets_intact(call_id) -> None:
    for asset in Asset.objects.filter(tool_call_id=call_id):
        assert sha256_file(absolute_from_data(asset.path)) == asset.sha256


def test_a_full_disk_while_settling(user, small_disk, monkeypatch):
    conversation, turn_id = bash_conversation(user, FILES)
    if small_disk is not None:
        _fill(small_disk)
    else:
        _inject_enospc(monkeypatch)
    command, read = assistant_calls(
        conversation, turn_id, ("bash", {"command": "echo hello"}), ("read", {"path": "notes.txt"})
    ).call_ids
    with running_worker(handlers=HANDLERS):
        ran = wait_for(lambda: response_of(command), timeout=30)
        looked = wait_for(lambda: response_of(read), timeout=30)
    assert ran["outcome"] == "indeterminate"
    assert NO_SPACE in ran["modelContent"][0]["text"]
    assert "the call ran, but what it did is not on record" in ran["modelContent"][0]["text"]
    assert looked["outcome"] == "failed"  # replay-safe: it had no effect
    assert (
        f"The result could not be stored in DATA_DIR: {NO_SPACE}."
        in (looked["modelContent"][0]["text"])
    )
    settled_once([command, read])
    _assets_intact(command)
    if small_disk is not None:
        (small_disk / "filler").unlink()
    assert_intact()


def test_a_full_disk_while_capturing(user, small_disk):
    if small_disk is None:
        pytest.skip("needs a tmpfs DATA_DIR (root and mount -t tmpfs); not injected in capture")
    conversation, turn_id = bash_conversation(user, FILES)
    # 3 MB of output into a 1 MiB disk: capture stores what fits, counts the rest. (The
    # allow-all rule covers both simple commands of the pipeline; a script file run through
    # ``sh`` could not be checked, so no rule would allow it.)
    (loud,) = assistant_calls(
        conversation, turn_id, ("bash", {"command": "yes 0123456789 | head -c 3000000"})
    ).call_ids
    with running_worker(handlers=HANDLERS):
        response = wait_for(lambda: response_of(loud), timeout=60)
    assert response["outcome"] == "indeterminate", response["modelContent"]
    assert NO_SPACE in response["modelContent"][0]["text"]
    settled_once([loud])
    kinds = set(Asset.objects.filter(tool_call_id=loud).values_list("kind", flat=True))
    assert kinds == {"stdout", "stderr", "output"}  # what was captured is kept, hashed
    _assets_intact(loud)
    assert_intact()
