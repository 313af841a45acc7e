"""The asset store under test, for tests that reach behind the API: read, replace or remove an
asset's stored bytes whether they are a file in ``DATA_DIR`` or an object in the bucket
(``TOOLCORE_TEST_ASSET_STORAGE=s3`` runs the asset tests against SeaweedFS, tests/conftest.py).
"""

from __future__ import annotations

import os

import pytest

from conversations.storage import absolute_from_data, asset_store

S3_RUN = os.environ.get("TOOLCORE_TEST_ASSET_STORAGE", "").strip().lower() == "s3"
local_only = pytest.mark.skipif(S3_RUN, reason="checks the local store's files themselves")


def _object(asset):
    store = asset_store()
    return store.client, store.bucket, store.key(asset.path)


def stored_bytes(asset) -> bytes:
    if asset_store().name == "local":
        return absolute_from_data(asset.path).read_bytes()
    client, bucket, key = _object(asset)
    return client.get_object(Bucket=bucket, Key=key)["Body"].read()


def store_replace(asset, data: bytes) -> None:
    """Put other bytes where the asset's are (as an intruder would: no checksum, no condition)."""
    if asset_store().name == "local":
        absolute_from_data(asset.path).write_bytes(data)
        return
    client, bucket, key = _object(asset)
    client.put_object(Bucket=bucket, Key=key, Body=data)


def store_remove(asset) -> None:
    if asset_store().name == "local":
        absolute_from_data(asset.path).unlink()
        return
    client, bucket, key = _object(asset)
    client.delete_object(Bucket=bucket, Key=key)


def store_keys(prefix: str = "") -> list[str]:
    """The keys under the store's prefix (S3 only), relative to it."""
    store = asset_store()
    pages = store.client.get_paginator("list_objects_v2").paginate(
        Bucket=store.bucket, Prefix=store.root + prefix
    )
    return [item["Key"][len(store.root) :] for page in pages for item in page.get("Contents", ())]
