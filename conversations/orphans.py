"""Attempt folders that nothing owns: what ``purge_orphans`` removes and ``check_integrity``
reports (docs/reliability.md).

An attempt folder ``conversations/<cid>/tool-calls/<call id>/g<generation>/`` under ``DATA_DIR``
is owned while the unfinished call is at that generation (its attempt is still being written),
or once an asset row points into it (its settlement linked its files). Anything else is an
orphan: the files of an attempt that never settled (its worker died, its claim was taken by a
cancel or by recovery), and whole folders of conversations that no longer exist.

With assets in object storage (``storage/s3.py``) the same holds of the bucket: an attempt's
objects under ``PREFIX/conversations/<cid>/tool-calls/<call id>/g<generation>/`` are owned by
the same rows, so the objects a settlement uploaded and never committed (a crash between the
upload and the commit) are orphans too, as are a deleted conversation's objects.

Read in bounded chunks: the folder listing and the database lookups go ``CHUNK`` names at a time,
so a data directory of millions of attempts is walked in constant memory.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from uuid import UUID

from .models import Asset, Conversation, ToolCall
from .storage import AssetStore, StoredAttempt, asset_store, data_dir

CHUNK = 500


@dataclass(frozen=True)
class Orphan:
    """A folder under ``DATA_DIR`` (``store`` None), or a location of objects in ``store``."""

    path: Path | str
    why: str
    store: AssetStore | None = None

    def __str__(self) -> str:
        return str(self.path) if self.store is None else self.store.location(str(self.path))


def _uuid(name: str) -> UUID | None:
    try:
        return UUID(name)
    except ValueError:
        return None


def _chunks(items: Iterable, size: int = CHUNK) -> Iterator[list]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


def _old_enough(path: Path, cutoff: float | None) -> bool:
    """Last changed before ``cutoff`` (epoch seconds); any age when ``cutoff`` is None."""
    if cutoff is None:
        return True
    try:
        return path.stat().st_mtime < cutoff
    except FileNotFoundError:
        return False  # removed meanwhile


def _attempts(folder: Path) -> Iterator[tuple[Path, UUID, int]]:
    """``(attempt folder, call id, generation)`` of a conversation folder, names that are not
    an attempt's skipped."""
    calls = folder / "tool-calls"
    if not calls.is_dir():
        return
    with os.scandir(calls) as entries:
        for call in entries:
            call_id = _uuid(call.name)
            if call_id is None or not call.is_dir(follow_symlinks=False):
                continue
            with os.scandir(call.path) as attempts:
                for attempt in attempts:
                    digits = attempt.name[1:]
                    if attempt.name.startswith("g") and digits.isdigit():
                        yield Path(attempt.path), call_id, int(digits)


def _owned(conversation_id: UUID, attempts: list[tuple[Path, UUID, int]]) -> set[tuple[UUID, int]]:
    """Which of ``attempts`` (of one conversation) an unfinished call or an asset owns."""
    call_ids = {call_id for _, call_id, _ in attempts}
    owned = set(ToolCall.objects.filter(pk__in=call_ids).values_list("pk", "generation"))
    prefix = f"conversations/{conversation_id}/tool-calls/"
    paths = Asset.objects.filter(tool_call_id__in=call_ids).values_list("tool_call_id", "path")
    for call_id, path in paths.iterator(chunk_size=2000):
        parts = path.removeprefix(prefix).split("/")
        if len(parts) >= 3 and parts[1][:1] == "g" and parts[1][1:].isdigit():
            owned.add((call_id, int(parts[1][1:])))
    return owned


def orphan_folders(*, older_than: float | None = None) -> Iterator[Orphan]:
    """Every orphan folder under ``DATA_DIR/conversations`` (last changed before ``older_than``,
    epoch seconds, when given): a deleted conversation's whole folder, or one attempt's; then,
    with an object store, every orphan location of its objects."""
    yield from _local_orphans(older_than)
    store = asset_store()
    if store.name != "local":
        yield from stored_orphans(store, older_than=older_than)


def _local_orphans(older_than: float | None) -> Iterator[Orphan]:
    root = data_dir() / "conversations"
    if not root.is_dir():
        return
    with os.scandir(root) as entries:
        for chunk in _chunks(e for e in entries if e.is_dir(follow_symlinks=False)):
            ids = {name: _uuid(name) for name in sorted(e.name for e in chunk)}
            known = {i for i in ids.values() if i is not None}
            alive = set(Conversation.objects.filter(pk__in=known).values_list("pk", flat=True))
            for name, conversation_id in ids.items():
                if conversation_id is None:
                    continue
                folder = root / name
                if conversation_id not in alive:
                    if _old_enough(folder, older_than):
                        yield Orphan(folder, "its conversation no longer exists")
                    continue
                yield from _conversation_orphans(conversation_id, folder, older_than)


def _conversation_orphans(
    conversation_id: UUID, folder: Path, older_than: float | None
) -> Iterator[Orphan]:
    for attempts in _chunks(_attempts(folder)):
        owned = _owned(conversation_id, attempts)
        for path, call_id, generation in sorted(attempts):
            if (call_id, generation) not in owned and _old_enough(path, older_than):
                yield Orphan(path, "no settlement links it and no unfinished call owns it")


def _by_conversation(attempts: Iterator[StoredAttempt]) -> Iterator[list[StoredAttempt]]:
    """The store's attempts (listed in key order) one conversation at a time."""
    group: list[StoredAttempt] = []
    for attempt in attempts:
        if group and group[0].conversation_id != attempt.conversation_id:
            yield group
            group = []
        group.append(attempt)
    if group:
        yield group


def stored_orphans(store: AssetStore, *, older_than: float | None = None) -> Iterator[Orphan]:
    """The locations of ``store``'s objects that nothing owns (written before ``older_than``
    when given): a deleted conversation's objects, or an attempt's. Conversations are looked up
    ``CHUNK`` at a time, the listing streamed, so memory stays bounded by the chunk."""
    for chunk in _chunks(_by_conversation(store.attempts())):
        ids = {group[0].conversation_id for group in chunk}
        alive = set(Conversation.objects.filter(pk__in=ids).values_list("pk", flat=True))
        for group in chunk:
            conversation_id = group[0].conversation_id
            if conversation_id not in alive:
                if older_than is None or max(a.newest for a in group) < older_than:
                    prefix = group[0].location.split("/tool-calls/")[0].rstrip("/") + "/"
                    yield Orphan(prefix, "its conversation no longer exists", store)
                continue
            for attempts in _chunks(a for a in group if a.call_id is not None):
                pairs = [(a.location, a.call_id, a.generation) for a in attempts]
                owned = _owned(conversation_id, pairs)
                for attempt in attempts:
                    if (attempt.call_id, attempt.generation) in owned:
                        continue
                    if older_than is None or attempt.newest < older_than:
                        yield Orphan(
                            attempt.location,
                            "no settlement links it and no unfinished call owns it",
                            store,
                        )
