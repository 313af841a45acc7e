"""The S3 asset store: settled calls' files as objects in an S3-compatible store
(``TOOLCORE_ASSET_STORAGE=s3://BUCKET/PREFIX``), through boto3 directly (docs/decisions.md,
"Assets in object storage").

Keys mirror ``DATA_DIR``: the asset ``conversations/<cid>/tool-calls/<call>/g<n>/output.txt``
is the object ``PREFIX/conversations/<cid>/tool-calls/<call>/g<n>/output.txt``, and its line
index the object beside it, ``….output.txt.lines``.

- **Upload** (settlement, before the commit): one PUT per file, streamed from ``DATA_DIR``,
  with ``x-amz-checksum-sha256`` (the store refuses bytes that do not match the digest the row
  records) and ``If-None-Match: *`` (an object is created once, never replaced, as
  ``write_exclusive`` creates a file): a retried settlement finds its own bytes there and keeps
  them; other bytes are another writer's, ``FileExistsDifferent``.
- **Verify**: a HEAD; its size and full-object SHA-256 checksum (the store checked the bytes
  against it when they were written) prove the bytes, or, from a store that keeps no checksum,
  the object is hashed once, streamed. The verified ETag is remembered per asset, and every
  later read is a GET with ``If-Match`` on it: an object replaced since fails that GET (412),
  is verified again, and answers 409 ``asset_corrupt`` when its bytes changed. ``force`` (the
  admin's "verify", ``check_integrity``) always hashes the bytes.
- **Reads** are ranged GETs whose body is streamed in chunks; a page of lines seeks through the
  sidecar index (``projections/logranges.py``), built on the first page and PUT beside the
  object.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from functools import lru_cache
from typing import Any
from uuid import UUID

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from projections.logranges import read_page_ranged

from ..errors import AssetCorrupt
from .base import StorageUnavailable, StoredAttempt
from .local import FileExistsDifferent, absolute_from_data

CHUNK = 64 * 1024
HASH_CHUNK = 1024 * 1024
INDEX_SUFFIX = ".lines"
DELETE_BATCH = 1000  # the most keys one DeleteObjects takes
_VERIFIED: OrderedDict[str, str] = OrderedDict()  # asset id -> the ETag its bytes were proven at
_VERIFIED_MAX = 4096
# The PUTs of a settlement run side by side (shared by the settlements of a process; boto3's
# client is thread-safe and pools up to max_pool_connections).
_UPLOADS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="toolcore-s3-upload")
_LOCK = threading.Lock()
_MISSING = {"404", "NoSuchKey", "NotFound"}
_CHANGED = {"412", "PreconditionFailed"}
# A conditional PUT that lost to a concurrent one may say 409 instead of 412.
_EXISTS = _CHANGED | {"409", "ConditionalRequestConflict"}


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _b64(sha256_hex: str) -> str:
    return base64.b64encode(bytes.fromhex(sha256_hex)).decode("ascii")


@lru_cache(maxsize=8)
def s3_client(endpoint_url: str) -> Any:
    """One client per endpoint and process (thread-safe; building one costs ~50 ms). Checksums
    are sent and checked when asked for (we send SHA-256 ourselves; a ranged GET has none)."""
    config = Config(
        retries={"mode": "standard", "max_attempts": 3},
        connect_timeout=5,
        read_timeout=30,
        max_pool_connections=32,
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        s3={"addressing_style": "path"} if endpoint_url else {},
    )
    return boto3.session.Session().client("s3", endpoint_url=endpoint_url or None, config=config)


class S3Store:
    """Settled calls' files in a bucket, under a prefix (``base.py`` ``AssetStore``)."""

    name = "s3"

    def __init__(self, bucket: str, prefix: str, endpoint_url: str = "") -> None:
        self.bucket = bucket
        self.root = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self.endpoint_url = endpoint_url

    @property
    def client(self) -> Any:
        return s3_client(self.endpoint_url)

    def key(self, path: str) -> str:
        """The object key of an asset path; ``ValueError`` for a path that would leave the
        prefix (the check ``absolute_from_data`` makes of ``DATA_DIR``)."""
        parts = path.split("/")
        if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError("asset path outside the bucket's prefix")
        return self.root + path

    def _call(self, method: str, **kwargs: Any) -> Any:
        try:
            return getattr(self.client, method)(Bucket=self.bucket, **kwargs)
        except ClientError:
            raise
        except BotoCoreError as exc:
            raise StorageUnavailable(f"the asset storage did not answer: {exc}") from exc

    # --- writes -------------------------------------------------------------------------------

    def upload(self, assets: Sequence[Any]) -> None:
        """The PUTs of one settlement at once (a round trip each; a capture, its result and
        its images would otherwise wait for each other); the first failure is raised."""
        if len(assets) <= 1:
            for asset in assets:
                self._put_file(asset)
            return
        for future in [_UPLOADS.submit(self._put_file, asset) for asset in assets]:
            future.result()

    def _put_file(self, asset: Any) -> None:
        key = self.key(asset.path)
        try:
            with open(absolute_from_data(asset.path), "rb") as body:
                self._call(
                    "put_object",
                    Key=key,
                    Body=body,
                    ContentLength=asset.size,
                    ContentType=asset.media_type,
                    ChecksumSHA256=_b64(asset.sha256),
                    IfNoneMatch="*",
                )
        except ClientError as exc:
            if _code(exc) not in _EXISTS:
                raise StorageUnavailable(f"the asset storage refused {key}: {exc}") from exc
            if self._digest(key, trust_checksum=True)[0] != asset.sha256:
                raise FileExistsDifferent(key) from None

    def _digest(self, key: str, *, trust_checksum: bool, etag: str | None = None) -> tuple:
        """``(sha256 hex, size, etag)`` of an object: its stored full-object checksum when
        trusted and kept, else its bytes hashed, streamed. ``(None, …)`` when it is missing."""
        try:
            head = self._call("head_object", Key=key, ChecksumMode="ENABLED")
        except ClientError as exc:
            if _code(exc) in _MISSING:
                return None, None, None
            raise StorageUnavailable(f"the asset storage refused {key}: {exc}") from exc
        checksum = head.get("ChecksumSHA256")
        full = head.get("ChecksumType", "FULL_OBJECT") == "FULL_OBJECT"
        if trust_checksum and checksum and full and "-" not in checksum:
            return base64.b64decode(checksum).hex(), head["ContentLength"], head["ETag"]
        digest = hashlib.sha256()
        body = self._get(key, head["ETag"])
        for chunk in body.iter_chunks(HASH_CHUNK):
            digest.update(chunk)
        return digest.hexdigest(), head["ContentLength"], head["ETag"]

    def _get(self, key: str, etag: str, start: int | None = None, length: int = 0) -> Any:
        """The streaming body of a GET (ranged when ``start`` is given), of the object at
        ``etag`` only: ``AssetChanged`` when it was replaced meanwhile."""
        kwargs: dict[str, Any] = {"Key": key, "IfMatch": etag}
        if start is not None:
            kwargs["Range"] = f"bytes={start}-{start + length - 1}"
        try:
            return self._call("get_object", **kwargs)["Body"]
        except ClientError as exc:
            if _code(exc) in _CHANGED:
                raise AssetChanged(key) from exc
            if _code(exc) in _MISSING:
                raise AssetCorrupt("The asset's file is missing.") from exc
            raise StorageUnavailable(f"the asset storage refused {key}: {exc}") from exc

    # --- reads --------------------------------------------------------------------------------

    def verify(self, asset: Any, *, force: bool = False) -> tuple[str, str]:
        """``(key, etag)`` of the asset's object once its bytes match its size and SHA-256."""
        try:
            key = self.key(asset.path)
        except ValueError as exc:
            raise AssetCorrupt("The asset's file is missing.") from exc
        ident = str(asset.pk)
        with _LOCK:
            etag = None if force else _VERIFIED.get(ident)
            if etag is not None:
                _VERIFIED.move_to_end(ident)
                return key, etag
        try:
            digest, size, etag = self._digest(key, trust_checksum=not force)
        except AssetChanged:  # replaced while hashed: whatever it is now was not proven
            digest, size = None, None
        if digest is None:
            self._forget(ident)
            raise AssetCorrupt("The asset's file is missing.")
        if size != asset.size or digest != asset.sha256:
            self._forget(ident)
            raise AssetCorrupt("The asset's bytes do not match its SHA-256.")
        with _LOCK:
            _VERIFIED[ident] = etag
            while len(_VERIFIED) > _VERIFIED_MAX:
                _VERIFIED.popitem(last=False)
        return key, etag

    def _forget(self, ident: str) -> None:
        with _LOCK:
            _VERIFIED.pop(ident, None)

    def _opened(self, asset: Any, handle: tuple[str, str], start: int, length: int) -> Any:
        """The GET of a verified asset's range; verified again once if the object changed
        since it was remembered (409 when its bytes did)."""
        try:
            return self._get(handle[0], handle[1], start, length)
        except AssetChanged:
            self._forget(str(asset.pk))
            key, etag = self.verify(asset)
            try:
                return self._get(key, etag, start, length)
            except AssetChanged as exc:
                raise AssetCorrupt("The asset's object changed while it was read.") from exc

    def stream(self, asset: Any, handle: tuple[str, str], start: int, length: int) -> Any:
        """The GET is sent now (an error is the answer, before any byte); the body after."""
        if length <= 0:
            return iter(())
        body = self._opened(asset, handle, start, length)

        def chunks() -> Iterator[bytes]:
            try:
                yield from body.iter_chunks(CHUNK)
            finally:
                body.close()

        return chunks()

    def _read_at(self, asset: Any, handle: tuple[str, str]) -> Any:
        def read_at(start: int, length: int) -> bytes:
            if length <= 0:
                return b""
            body = self._opened(asset, handle, start, length)
            try:
                return body.read()
            finally:
                body.close()

        return read_at

    def read_page(self, asset: Any, handle: tuple[str, str], *, offset: int | None, limit: int):
        index_key = handle[0] + INDEX_SUFFIX

        def index_at(start: int, length: int) -> bytes | None:
            try:
                body = self._call(
                    "get_object", Key=index_key, Range=f"bytes={start}-{start + length - 1}"
                )["Body"]
            except ClientError as exc:
                if _code(exc) in _MISSING or _code(exc) in {"416", "InvalidRange"}:
                    return None
                raise StorageUnavailable(f"the asset storage refused {index_key}: {exc}") from exc
            try:
                return body.read()
            finally:
                body.close()

        def index_put(data: bytes) -> None:
            try:
                self._call("put_object", Key=index_key, Body=data)
            except ClientError as exc:
                raise StorageUnavailable(str(exc)) from exc

        return read_page_ranged(
            self._read_at(asset, handle),
            asset.size,
            identity=bytes.fromhex(asset.sha256),
            index_at=index_at,
            index_put=index_put,
            name=self.location(asset.path),
            offset=offset,
            limit=limit,
            truncated=asset.truncated,
        )

    def location(self, path: str) -> str:
        """``s3://BUCKET/KEY`` of an asset path, or of a location of objects (ending in ``/``)."""
        key = self.key(path.rstrip("/")) + ("/" if path.endswith("/") else "")
        return f"s3://{self.bucket}/{key}"

    def fault(self, path: str, size: int, sha256: str, *, hashes: bool) -> str | None:
        try:
            key = self.key(path)
        except ValueError:
            return "its path leads outside the bucket's prefix"
        try:
            head = self._call("head_object", Key=key)
        except ClientError as exc:
            if _code(exc) in _MISSING:
                return "its file is missing (No such file or directory)"
            return f"its file cannot be read ({_code(exc)})"
        except StorageUnavailable as exc:
            return f"its file cannot be read ({exc})"
        if head["ContentLength"] != size:
            return f"its file has {head['ContentLength']} bytes, {size} recorded"
        if hashes:
            try:
                digest = self._digest(key, trust_checksum=False)[0]
            except (AssetChanged, AssetCorrupt):
                return "its file changed while it was read"
            except StorageUnavailable as exc:
                return f"its file cannot be read ({exc})"
            if digest != sha256:
                return f"its file's SHA-256 is {digest}, {sha256} recorded"
        return None

    # --- listing and removal ------------------------------------------------------------------

    def _objects(self, prefix: str) -> Iterator[tuple[str, datetime]]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix
        )
        try:
            for page in pages:
                for item in page.get("Contents", ()):
                    yield item["Key"], item["LastModified"]
        except (BotoCoreError, ClientError) as exc:
            raise StorageUnavailable(f"the asset storage cannot be listed: {exc}") from exc

    def attempts(self) -> Iterator[StoredAttempt]:
        """Every attempt's objects (keys listed in order, so an attempt's are contiguous), and
        a conversation's keys outside any attempt as one entry of its own; locations relative
        to the prefix, as asset paths are."""
        base = f"{self.root}conversations/"
        current: StoredAttempt | None = None
        for key, modified in self._objects(base):
            parts = key[len(base) :].split("/")
            conversation_id = _uuid(parts[0])
            if conversation_id is None or len(parts) < 2:
                continue
            call_id = _uuid(parts[2]) if len(parts) >= 5 and parts[1] == "tool-calls" else None
            digits = parts[3][1:] if call_id is not None else ""
            if call_id is not None and parts[3].startswith("g") and digits.isdigit():
                generation: int | None = int(digits)
                location = f"conversations/{parts[0]}/tool-calls/{parts[2]}/{parts[3]}/"
            else:
                call_id, generation = None, None
                location = f"conversations/{parts[0]}/"
            when = modified.timestamp()
            if current is not None and current.location == location:
                if when > current.newest:
                    current = StoredAttempt(location, conversation_id, call_id, generation, when)
                continue
            if current is not None:
                yield current
            current = StoredAttempt(location, conversation_id, call_id, generation, when)
        if current is not None:
            yield current

    def remove(self, location: str) -> None:
        if not location.startswith("conversations/") or not location.endswith("/"):
            raise ValueError(f"not a location of this store: {location}")
        batch: list[dict[str, str]] = []
        for key, _ in self._objects(self.root + location):
            batch.append({"Key": key})
            if len(batch) == DELETE_BATCH:
                self._delete(batch)
                batch = []
        if batch:
            self._delete(batch)

    def _delete(self, batch: list[dict[str, str]]) -> None:
        try:
            self._call("delete_objects", Delete={"Objects": batch, "Quiet": True})
        except ClientError as exc:
            raise StorageUnavailable(f"the asset storage refused a delete: {exc}") from exc

    def remove_conversation(self, conversation_id: UUID | str) -> None:
        self.remove(f"conversations/{conversation_id}/")


class AssetChanged(Exception):
    """A GET with ``If-Match`` found another object under the key (412)."""


def _uuid(name: str) -> UUID | None:
    try:
        return UUID(name)
    except ValueError:
        return None
