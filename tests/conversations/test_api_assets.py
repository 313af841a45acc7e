"""/assets: bytes with ranges, SHA-256 checks, pages of lines (docs/subsystems/api.md, "Assets")."""

from __future__ import annotations

import os
from typing import Any

import pytest

from conversations.models import (
    Asset,
)
from conversations.services.claims import claim_acquire
from conversations.services.settlement import AttemptFile, ClaimGuard, call_settle
from conversations.storage import absolute_from_data, asset_store, attempt_dir
from tests.storage.helpers import store_remove, store_replace, stored_bytes

from .api_helpers import API, assert_error, settle_host
from .helpers import assistant_calls, new_conversation, open_turn

# --- 3. assets ---------------------------------------------------------------------------------
# On either asset store (TOOLCORE_TEST_ASSET_STORAGE=s3: objects in SeaweedFS, tests/conftest.py).


def _payload_asset(user, result: Any) -> Asset:
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("notes", {})).call_ids
    event = settle_host(call_id, result=result)
    asset = Asset.objects.get(pk=event.payload["assetIds"][0])
    return asset


@pytest.mark.django_db
def test_asset_full_and_range_reads(api, user):
    asset = _payload_asset(user, {"text": "0123456789" * 10})
    data = stored_bytes(asset)
    size = len(data)
    assert asset.kind == "payload" and asset.size == size
    url = f"{API}/assets/{asset.pk}"

    full = api.get(url)
    assert full.status_code == 200
    assert b"".join(full.streaming_content) == data
    assert full["ETag"] == f'"{asset.sha256}"'
    assert full["X-Content-SHA256"] == asset.sha256
    assert full["Content-Length"] == str(size)
    assert full["Content-Type"] == "application/json"
    assert full["Accept-Ranges"] == "bytes"

    head = api.get(url, HTTP_RANGE="bytes=0-9")
    assert head.status_code == 206
    assert b"".join(head.streaming_content) == data[:10]
    assert head["Content-Range"] == f"bytes 0-9/{size}"
    assert head["Content-Length"] == "10"
    assert head["ETag"] == f'"{asset.sha256}"'

    suffix = api.get(url, HTTP_RANGE="bytes=-7")
    assert suffix.status_code == 206
    assert b"".join(suffix.streaming_content) == data[-7:]
    assert suffix["Content-Range"] == f"bytes {size - 7}-{size - 1}/{size}"

    open_ended = api.get(url, HTTP_RANGE="bytes=20-")
    assert open_ended.status_code == 206
    assert b"".join(open_ended.streaming_content) == data[20:]

    clipped = api.get(url, HTTP_RANGE=f"bytes=5-{size + 100}")
    assert clipped.status_code == 206
    assert b"".join(clipped.streaming_content) == data[5:]
    assert clipped["Content-Range"] == f"bytes 5-{size - 1}/{size}"

    for bad in (f"bytes={size}-", f"bytes={size + 10}-{size + 20}", "bytes=9-3", "bytes=-0"):
        refused = api.get(url, HTTP_RANGE=bad)
        assert_error(refused, 416, "range_not_satisfiable")
        assert refused["Content-Range"] == f"bytes */{size}"


@pytest.mark.django_db
def test_a_tampered_asset_is_409_and_serves_nothing(api, user):
    asset = _payload_asset(user, {"text": "original bytes"})
    url = f"{API}/assets/{asset.pk}"
    assert api.get(url).status_code == 200  # verified once (and maybe remembered)
    original = stored_bytes(asset)
    tampered = original.replace(b"original", b"ORIGINAL")
    assert len(tampered) == len(original)
    store_replace(asset, tampered)
    if asset_store().name == "local":
        path = absolute_from_data(asset.path)
        stat = path.stat()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    for headers in ({}, {"HTTP_RANGE": "bytes=0-3"}):
        response = api.get(url, **headers)
        assert_error(response, 409, "asset_corrupt")
        assert not response.streaming
        assert b"ORIGINAL" not in response.content
    assert_error(api.get(f"{url}/lines"), 409, "asset_corrupt")
    # Resized and then missing files are refused too.
    store_replace(asset, original + b" ")
    assert_error(api.get(url), 409, "asset_corrupt")
    store_remove(asset)
    assert_error(api.get(url), 409, "asset_corrupt")
    # Restored: served again.
    store_replace(asset, original)
    assert api.get(url).status_code == 200


@pytest.mark.django_db
def test_asset_lines_paging(api, user):
    conversation = new_conversation(user)
    turn_id = open_turn(conversation)
    (call_id,) = assistant_calls(conversation, turn_id, ("notes", {})).call_ids
    claim = claim_acquire(call_id=call_id, worker="w")
    stdout = attempt_dir(conversation.pk, call_id, claim.generation) / "stdout.txt"
    stdout.parent.mkdir(parents=True)
    stdout.write_text("".join(f"line {i}\n" for i in range(250)))
    event = call_settle(
        call_id=call_id,
        outcome="completed",
        guard=ClaimGuard(claim.token, claim.generation),
        result={"ok": True},
        text="ok",
        files=[AttemptFile(stdout, "stdout", truncated=True)],
    )
    asset = Asset.objects.get(pk__in=event.payload["assetIds"], kind="stdout")
    url = f"{API}/assets/{asset.pk}/lines"

    tail = api.get(url).json()
    assert set(tail) == {
        "lines",
        "offset",
        "limit",
        "totalLines",
        "nextOffset",
        "status",
        "path",
        "truncated",
    }
    assert tail["lines"] == [f"line {i}" for i in range(150, 250)]
    assert tail["offset"] == 150 and tail["limit"] == 100 and tail["totalLines"] == 250
    assert tail["nextOffset"] is None and tail["status"] is None
    assert tail["truncated"] is True
    assert tail["path"] == asset_store().location(asset.path)
    if asset_store().name == "local":
        assert tail["path"] == str(stdout.resolve())

    first = api.get(f"{url}?offset=0&limit=40").json()
    assert first["lines"] == [f"line {i}" for i in range(40)]
    assert first["nextOffset"] == 40
    middle = api.get(f"{url}?offset=240&limit=500").json()
    assert middle["lines"] == [f"line {i}" for i in range(240, 250)]
    assert middle["nextOffset"] is None
    whole = api.get(f"{url}?offset=0&limit=500").json()
    assert len(whole["lines"]) == 250 and whole["path"] is None
    past = api.get(f"{url}?offset=250").json()
    assert past["lines"] == [] and past["nextOffset"] is None
    for query, field in (("limit=501", "limit"), ("limit=0", "limit"), ("offset=-1", "offset")):
        assert_error(api.get(f"{url}?{query}"), 422, "validation_error", field=field)

    payload = Asset.objects.get(pk__in=event.payload["assetIds"], kind="payload")
    lines = api.get(f"{API}/assets/{payload.pk}/lines").json()
    assert lines["lines"] == ['{"ok":true}'] and lines["truncated"] is False
