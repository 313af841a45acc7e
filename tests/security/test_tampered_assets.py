"""A tampered asset (its file changed on disk after settlement) is never served: the download,
its pages of lines and the admin's verification all refuse it (409 ``asset_corrupt``), also
when whoever changed it set its modification time back (docs/subsystems/api.md, "Assets").

The local store's own checks (file times); the same promise of the S3 store is in
tests/storage/test_s3_assets.py."""

from __future__ import annotations

import os

import pytest

from conversations import assets
from conversations.errors import AssetCorrupt
from conversations.models import Asset
from conversations.storage import local
from tests.conversations.api_helpers import API, assert_error, settle_host
from tests.conversations.helpers import assistant_calls, new_conversation, open_turn
from tests.storage.helpers import local_only

ORIGINAL = "original bytes\nsecond line\n"


pytestmark = local_only  # file times: the S3 store's checks are its own


@pytest.fixture
def asset_file(user, settings):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("notes", {})).call_ids
    event = settle_host(call_id, result={"text": ORIGINAL})
    asset = Asset.objects.get(pk=event.payload["assetIds"][0])
    return asset, settings.DATA_DIR / asset.path


def _same_size_change(data: bytes) -> bytes:
    changed = data.replace(b"original", b"ORIGINAL")
    assert changed != data and len(changed) == len(data)
    return changed


def _in_place_mtime_reset(path) -> None:
    """The bytes changed in place, the modification time set back as it was."""
    before = path.stat()
    path.write_bytes(_same_size_change(path.read_bytes()))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_mtime_ns == before.st_mtime_ns


def _replaced_with_mtime_copied(path) -> None:
    """Another file with the same size and modification time moved over it."""
    before = path.stat()
    twin = path.with_name(path.name + ".new")
    twin.write_bytes(_same_size_change(path.read_bytes()))
    os.utime(twin, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(twin, path)


@pytest.mark.django_db
@pytest.mark.parametrize("tamper", [_in_place_mtime_reset, _replaced_with_mtime_copied])
def test_a_tampered_asset_is_refused_even_with_its_mtime_set_back(
    api, asset_file, monkeypatch, tamper
):
    """Regression: the verified mark was ``(size, mtime)``, so once an asset had been served,
    bytes changed with the same size and the old mtime were served as verified."""
    asset, path = asset_file
    monkeypatch.setattr(local, "RACY_SECONDS", 0)  # remember the file although it is new
    url = f"{API}/assets/{asset.pk}"
    assert api.get(url).status_code == 200  # verified, and remembered
    assert api.get(f"{url}/lines").status_code == 200
    tamper(path)
    for response in (api.get(url), api.get(url, HTTP_RANGE="bytes=0-7"), api.get(f"{url}/lines")):
        assert_error(response, 409, "asset_corrupt")
        assert b"ORIGINAL" not in response.content
    with pytest.raises(AssetCorrupt):
        assets.asset_verify(asset, force=True)  # what the admin's "verify" runs


@pytest.mark.django_db
def test_a_file_changed_just_now_is_not_remembered(asset_file):
    """Within ``RACY_SECONDS`` of its last change a file is hashed at every read: a write in
    the same clock tick as a check would leave its times as they were."""
    asset, path = asset_file
    assets.asset_verify(asset)
    assert str(asset.pk) not in local._VERIFIED
