"""Assets in an S3-compatible object store, against a real one (SeaweedFS, tests/conftest.py
``seaweed``): uploaded with their SHA-256 at settlement, served by ranged GETs and seeking line
pages, refused once changed, found by ``check_integrity`` and ``purge_orphans``, removed with
their conversation (docs/subsystems/settlement.md, "Asset storage")."""

from __future__ import annotations

import base64
import time
import uuid
from io import StringIO

import pytest
from django.core.management import call_command

from conversations.assets import asset_verify
from conversations.errors import AssetCorrupt
from conversations.models import Asset
from conversations.services.claims import claim_acquire
from conversations.services.conversations import conversation_delete
from conversations.services.settlement import AttemptFile, ClaimGuard, asset_row, call_settle
from conversations.storage import asset_store, attempt_dir, attempt_relative, data_dir
from projections.logpages import read_page
from tests.conversations.api_helpers import API, assert_error, settle_host
from tests.conversations.helpers import assistant_calls, new_conversation, open_turn

from .helpers import store_keys, store_replace, stored_bytes

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("s3_assets")]


def _settled_capture(user, data: bytes, *, truncated: bool = False) -> tuple[Asset, Asset]:
    """A call settled with ``data`` as its stdout capture: (the stdout asset, the result's)."""
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("notes", {})).call_ids
    claim = claim_acquire(call_id=call_id, worker="w")
    stdout = attempt_dir(conversation.pk, call_id, claim.generation) / "stdout.txt"
    stdout.parent.mkdir(parents=True)
    stdout.write_bytes(data)
    event = call_settle(
        call_id=call_id,
        outcome="completed",
        guard=ClaimGuard(claim.token, claim.generation),
        result={"ok": True},
        text="ok",
        files=[AttemptFile(stdout, "stdout", truncated=truncated)],
    )
    ids = event.payload["assetIds"]
    return Asset.objects.get(pk__in=ids, kind="stdout"), Asset.objects.get(
        pk__in=ids, kind="payload"
    )


def test_settlement_uploads_every_file_with_its_sha256(user):
    stdout, payload = _settled_capture(user, b"hello\nworld\n")
    store = asset_store()
    assert store.name == "s3"
    for asset in (stdout, payload):
        head = store.client.head_object(
            Bucket=store.bucket, Key=store.key(asset.path), ChecksumMode="ENABLED"
        )
        assert head["ContentLength"] == asset.size
        assert base64.b64decode(head["ChecksumSHA256"]).hex() == asset.sha256
        assert head["ContentType"] == asset.media_type
    assert stored_bytes(stdout) == b"hello\nworld\n"


def test_ranges_are_ranged_gets_streamed_in_chunks(api, user):
    data = bytes(range(256)) * 4096 + b"end"  # 1 MiB and 3 bytes
    stdout, _ = _settled_capture(user, data)
    url = f"{API}/assets/{stdout.pk}"
    whole = api.get(url)
    chunks = list(whole.streaming_content)
    assert whole.status_code == 200 and b"".join(chunks) == data
    assert len(chunks) > 1 and max(len(c) for c in chunks) <= 64 * 1024  # never all at once
    part = api.get(url, HTTP_RANGE="bytes=1048570-")
    assert part.status_code == 206 and b"".join(part.streaming_content) == data[1048570:]
    assert part["Content-Range"] == f"bytes 1048570-{len(data) - 1}/{len(data)}"


def test_an_object_replaced_after_it_was_verified_is_409_everywhere(api, user):
    """The verified ETag is remembered: a read after a replacement is a GET whose ``If-Match``
    fails, the object is verified again and refused."""
    stdout, _ = _settled_capture(user, b"original bytes\nsecond line\n")
    url = f"{API}/assets/{stdout.pk}"
    assert api.get(url).status_code == 200
    assert api.get(f"{url}/lines").status_code == 200  # remembered now
    store_replace(stdout, b"ORIGINAL bytes\nsecond line\n")  # same size, other bytes
    for response in (api.get(url), api.get(url, HTTP_RANGE="bytes=0-7"), api.get(f"{url}/lines")):
        assert_error(response, 409, "asset_corrupt")
        assert b"ORIGINAL" not in response.content
    with pytest.raises(AssetCorrupt):
        asset_verify(stdout, force=True)  # what the admin's "verify" runs
    store_replace(stdout, b"original bytes\nsecond line\n")  # restored: served again
    assert api.get(url).status_code == 200


def test_line_pages_seek_through_a_sidecar_object_and_match_the_local_pages(user, tmp_path):
    lines = [("x" * (i % 97)) + ("é" if i % 5 == 0 else "") for i in range(3000)]
    lines[1234] = "L" * 200_000  # a long line: only its head is read
    data = ("\r\n".join(lines[:10]) + "\n" + "\n".join(lines[10:])).encode() + b"tail"
    stdout, _ = _settled_capture(user, data, truncated=True)
    local = tmp_path / "copy.txt"
    local.write_bytes(data)
    store = asset_store()
    handle = store.verify(stdout)
    name = store.location(stdout.path)
    for offset, limit in ((None, 100), (0, 500), (1200, 100), (2999, 5), (3001, 10), (5000, 1)):
        page = store.read_page(stdout, handle, offset=offset, limit=limit)
        expected = read_page(local, offset=offset, limit=limit, truncated=True)
        expected["path"] = None if expected["path"] is None else name
        assert page == expected, (offset, limit)
    assert f"{stdout.path}.lines" in store_keys()  # the index, beside the object
    # A damaged index is not trusted: rebuilt, the page is the same.
    store.client.put_object(Bucket=store.bucket, Key=store.key(stdout.path) + ".lines", Body=b"x")
    page = store.read_page(stdout, handle, offset=1200, limit=100)
    assert page == read_page(local, offset=1200, limit=100, truncated=True) | {"path": name}


def test_an_upload_without_its_commit_is_an_orphan_that_purge_orphans_removes(user, settings):
    """A crash between the upload and the commit leaves objects no row owns."""
    stdout, payload = _settled_capture(user, b"kept\n")
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("notes", {})).call_ids
    # The attempt's files written and uploaded, as settlement does before its commit, then the
    # process died: its call is at generation 2 now (recovered and claimed again).
    relative = attempt_relative(conversation.pk, call_id, 1)
    lost = data_dir() / relative / "result.json"
    lost.parent.mkdir(parents=True)
    lost.write_bytes(b'{"lost":true}')
    asset_store().upload([asset_row(lost, "payload", "application/json")])
    gone = uuid.UUID(int=7)  # and a deleted conversation's objects
    gone_file = data_dir() / attempt_relative(gone, uuid.UUID(int=8), 1) / "out.txt"
    gone_file.parent.mkdir(parents=True)
    gone_file.write_bytes(b"gone")
    asset_store().upload([asset_row(gone_file, "output", "text/plain")])
    claim_acquire(call_id=call_id, worker="w")
    from conversations.models import ToolCall

    ToolCall.objects.filter(pk=call_id).update(generation=2)
    settings.TOOLCORE_CLAIM_LEASE = 0
    time.sleep(1.1)  # older than the lease (object times are whole seconds)
    out = StringIO()
    with pytest.raises(SystemExit):
        call_command("check_integrity", stdout=out)
    store = asset_store()
    named = [line for line in out.getvalue().splitlines() if line.startswith("orphans: s3://")]
    assert sorted(named) == sorted(
        [
            f"orphans: {store.location(f'conversations/{gone}/')}: its conversation no longer "
            "exists; `python manage.py purge_orphans` removes it",
            f"orphans: {store.location(relative + '/')}: no settlement links it and no "
            "unfinished call owns it; `python manage.py purge_orphans` removes it",
        ]
    )
    call_command("purge_orphans", stdout=StringIO())
    keys = store_keys()
    assert not [k for k in keys if k.startswith((relative, f"conversations/{gone}/"))]
    assert stdout.path in keys and payload.path in keys  # a settlement's objects stay


def test_deleting_a_conversation_removes_its_objects(user, django_capture_on_commit_callbacks):
    stdout, _ = _settled_capture(user, b"bye\n")
    other, _ = _settled_capture(user, b"stays\n")
    assert stdout.path in store_keys()
    with django_capture_on_commit_callbacks(execute=True):
        conversation_delete(conversation_id=stdout.conversation_id)
    keys = store_keys()
    assert not [k for k in keys if k.startswith(f"conversations/{stdout.conversation_id}/")]
    assert other.path in keys


def test_a_store_that_does_not_answer_settles_the_call_without_its_files(user, settings):
    settings.ASSET_STORAGE = {**settings.ASSET_STORAGE, "endpoint_url": "http://127.0.0.1:9"}
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("notes", {})).call_ids
    event = settle_host(call_id, result={"text": "lost"})
    assert event.payload["outcome"] in {"failed", "indeterminate"}
    assert event.payload["assetIds"] == []
    text = event.payload["modelContent"][0]["text"]
    assert "could not be stored in the asset storage" in text


def test_a_read_while_the_store_does_not_answer_is_503_unavailable(api, user, settings):
    stdout, _ = _settled_capture(user, b"later\n")
    settings.ASSET_STORAGE = {**settings.ASSET_STORAGE, "endpoint_url": "http://127.0.0.1:9"}
    for path in ("", "/lines"):
        response = api.get(f"{API}/assets/{stdout.pk}{path}")
        assert_error(response, 503, "unavailable")
        assert response["Retry-After"] == "1"
