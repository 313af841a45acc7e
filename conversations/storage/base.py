"""The one interface of asset storage: what settlement, the asset endpoints, ``check_integrity``
and retention ask of the place where settled calls' files are kept.

Two sibling backends implement it, chosen once from ``ASSET_STORAGE`` (``__init__.py``
``asset_store``): the local file system under ``DATA_DIR`` (``local.py``, the default) and an
S3-compatible object store (``s3.py``). Either way an asset's ``path`` is its place relative to
the store's root, ``conversations/<cid>/tool-calls/<call id>/g<generation>/<name>``: a key under
the bucket's prefix is the same text as a path under ``DATA_DIR``.

Workers always write an attempt's files to ``DATA_DIR`` first (a capture grows there while its
process runs); ``upload`` is the step of settlement that makes them the store's, before the
transaction that commits their asset rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from uuid import UUID


class StorageUnavailable(OSError):
    """The store refused or did not answer: an ``OSError``, so settlement treats it as it treats
    a full disk (the call settles without its files, saying why)."""


class StoredAsset(Protocol):
    """What the store needs of an asset row (``Asset`` or settlement's ``AssetRow``)."""

    path: str
    size: int
    sha256: str
    media_type: str


@dataclass(frozen=True)
class StoredAttempt:
    """An attempt's objects in a store that lists them (``call_id`` None: a conversation's
    objects outside any attempt); ``newest`` is the epoch time of the last one written."""

    location: str
    conversation_id: UUID
    call_id: UUID | None
    generation: int | None
    newest: float


class AssetStore(Protocol):
    """Where settled calls' files are kept (docs/subsystems/settlement.md, "Asset storage")."""

    name: str

    def upload(self, assets: Sequence[StoredAsset]) -> None:
        """Make the attempt files of ``assets`` (in ``DATA_DIR``, hashed) the store's, durably,
        each checked against its SHA-256. An object already there with the same bytes is kept
        (a retried settlement); other bytes raise ``FileExistsDifferent``."""

    def verify(self, asset: Any, *, force: bool = False) -> Any:
        """A handle to read ``asset`` by, once its bytes match its size and SHA-256; raises
        ``AssetCorrupt`` otherwise. ``force``: hash the bytes again whatever was remembered."""

    def stream(self, asset: Any, handle: Any, start: int, length: int) -> Iterator[bytes]:
        """``length`` bytes from ``start``, in chunks, never the whole asset in memory."""

    def read_page(self, asset: Any, handle: Any, *, offset: int | None, limit: int) -> dict:
        """A page of the asset's lines (``projections/logpages.py`` ``read_page``), seeking by
        its line index."""

    def location(self, path: str) -> str:
        """How a person finds the asset: an absolute path, or an ``s3://`` URL."""

    def fault(self, path: str, size: int, sha256: str, *, hashes: bool) -> str | None:
        """What is wrong with the stored bytes of an asset row, or None (``check_integrity``)."""

    def attempts(self) -> Iterator[StoredAttempt]:
        """Every attempt the store holds, conversation by conversation (orphan search); a
        store whose attempts are the ``DATA_DIR`` folders lists none."""

    def remove(self, location: str) -> None:
        """Remove an attempt or a conversation's objects (``StoredAttempt.location``)."""

    def remove_conversation(self, conversation_id: UUID | str) -> None:
        """Remove every object of a deleted conversation."""
