"""Files: the attempt files workers write under ``DATA_DIR`` (``local.py``), and the asset store
settled calls' files are kept in, chosen once from ``ASSET_STORAGE`` (``TOOLCORE_ASSET_STORAGE``):
``local.py`` ``LocalStore`` (``DATA_DIR`` itself, the default) or ``s3.py`` ``S3Store``, both
behind ``base.py`` ``AssetStore``.
"""

from __future__ import annotations

from functools import lru_cache

from django.conf import settings

from .base import AssetStore, StorageUnavailable, StoredAttempt
from .local import (
    CAPTURE_FILES,
    CAPTURE_MAX_BYTES,
    CAPTURE_MEDIA_TYPE,
    FileExistsDifferent,
    LocalStore,
    absolute_from_data,
    attempt_dir,
    attempt_relative,
    capture_found,
    capture_snapshot,
    conversation_dir,
    copy_exclusive,
    data_dir,
    relative_to_data,
    remove_conversation_files,
    resolve_workspace,
    sha256_file,
    write_exclusive,
)

__all__ = [
    "CAPTURE_FILES",
    "CAPTURE_MAX_BYTES",
    "CAPTURE_MEDIA_TYPE",
    "AssetStore",
    "FileExistsDifferent",
    "StorageUnavailable",
    "StoredAttempt",
    "absolute_from_data",
    "asset_store",
    "attempt_dir",
    "attempt_relative",
    "capture_found",
    "capture_snapshot",
    "conversation_dir",
    "copy_exclusive",
    "data_dir",
    "relative_to_data",
    "remove_conversation_files",
    "resolve_workspace",
    "sha256_file",
    "write_exclusive",
]

_LOCAL = LocalStore()


def asset_store() -> AssetStore:
    """The configured store: built once per configuration (once in a server's life; the tests
    give each test a prefix of its own), and the local one without a lookup."""
    config = settings.ASSET_STORAGE
    if config["backend"] == "local":
        return _LOCAL
    return _s3_store(config["bucket"], config["prefix"], config.get("endpoint_url", ""))


@lru_cache(maxsize=16)
def _s3_store(bucket: str, prefix: str, endpoint_url: str) -> AssetStore:
    from .s3 import S3Store  # boto3 is imported only by a server that stores in S3

    return S3Store(bucket, prefix, endpoint_url)
