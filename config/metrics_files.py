"""The folder where every process records its metrics: prometheus_client's multiprocess mode
(docs/deployment.md, "Metrics"; docs/decisions.md, "Metrics from every process").

Each process writes its counters, histograms and live gauges to files of its own in
``TOOLCORE_METRICS_DIR``, memory-mapped, so recording one is a write to memory (no system call,
no query); ``/metrics`` adds up every process's files. prometheus_client chooses that mode from
``PROMETHEUS_MULTIPROC_DIR`` when it is imported, before any metric exists, so the settings call
``metrics_files_prepare`` while they load: every entry point (``manage.py``, daphne's
``config.asgi``, anything calling ``django.setup()``) is in that mode before anything imports
the client. This module imports no Django.

A process's files carry an identifier of its own, ``<pid>-<8 hex>``, never reused, and the
process holds an exclusive ``flock`` on ``<identifier>.alive`` for its whole life. The kernel
releases it however the process ends (``kill -9`` included) and in every PID namespace that
shares the folder (containers of one host), so a process starting can tell the dead from the
living without trusting a pid. It then:

- removes a dead process's live gauges (open websockets): ``mark_process_dead``, which a
  process that exits in order also does for itself (``atexit``);
- adds a dead process's counters and histograms into one archive file per kind and removes its
  files, so totals never go back and the folder holds the living processes' files and two
  archives, however many processes came and went.

That work holds the folder's lock (``.lock``) exclusively; a scrape holds it shared
(``metrics_files_read``), so it never sees a count both in a dead process's file and in the
archive, or in neither.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import secrets
import struct
from collections.abc import Iterator
from pathlib import Path

logger = logging.getLogger(__name__)

ENVIRONMENT_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
LOCK_NAME = ".lock"
ALIVE_SUFFIX = ".alive"
ARCHIVE = "archive"  # the identifier of the archive files: counter_archive.db, histogram_archive.db
ARCHIVED_KINDS = ("counter", "histogram")
# A file's first 8 bytes say how much of it is used; a shorter file was created and not sized
# yet (its process holds nothing in it).
METRICS_FILE_HEADER_BYTES = 8


class _Process:
    """This process's registration: its folder, identifier and the descriptor of its lock."""

    folder: Path | None = None
    pid: int | None = None
    identifier: str = ""
    alive_fd: int | None = None


_this = _Process()


def metrics_files_prepare(folder: Path) -> None:
    """Put this process in multiprocess mode, recording into ``folder`` (created), after the
    files of dead processes were archived. Once per process; ``OSError`` when the folder cannot
    be made or written."""
    if _this.folder is not None:
        return
    folder.mkdir(parents=True, exist_ok=True)
    os.environ[ENVIRONMENT_VARIABLE] = str(folder)
    _this.folder = folder
    # Imported only now: the client reads the variable when it is first imported.
    from prometheus_client import values

    with _folder_lock(fcntl.LOCK_EX):
        _archive_dead(folder)
    process_identifier()  # registered before any file of ours exists
    values.ValueClass = values.MultiProcessValue(process_identifier=process_identifier)
    atexit.register(_exited)


def metrics_folder() -> Path:
    """The folder this process records into (``metrics_files_prepare`` ran: the settings did)."""
    if _this.folder is None:
        raise RuntimeError("metrics_files_prepare() has not run: the settings were not loaded")
    return _this.folder


def process_identifier() -> str:
    """This process's identifier in file names; a forked child registers one of its own.

    prometheus_client asks for it at every increment (it looks for a fork): one ``getpid``."""
    pid = os.getpid()
    if pid != _this.pid:
        _register(pid)
    return _this.identifier


@contextlib.contextmanager
def metrics_files_read() -> Iterator[Path]:
    """The folder, locked against archiving while the caller reads every process's files."""
    with _folder_lock(fcntl.LOCK_SH):
        yield metrics_folder()


@contextlib.contextmanager
def _folder_lock(operation: int) -> Iterator[None]:
    fd = os.open(metrics_folder() / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, operation)
        yield
    finally:
        os.close(fd)  # releases the lock


def _register(pid: int) -> None:
    """Create and lock ``<identifier>.alive``, shared-locking the folder meanwhile: an archive
    never finds the file before its lock is taken."""
    if _this.alive_fd is not None:
        # A forked child: the descriptor is its parent's too, and closing it here leaves the
        # parent's lock alone (flock belongs to the open file, held while any copy is open).
        os.close(_this.alive_fd)
        _this.alive_fd = None
    identifier = f"{pid}-{secrets.token_hex(4)}"
    with _folder_lock(fcntl.LOCK_SH):
        path = metrics_folder() / f"{identifier}{ALIVE_SUFFIX}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: granted at once
    _this.pid, _this.identifier, _this.alive_fd = pid, identifier, fd


def _exited() -> None:
    """At exit: this process's live gauges go (its open sockets are no longer open); its
    counters stay until the next process to start archives them."""
    if _this.folder is None or os.getpid() != _this.pid:
        return
    from prometheus_client.multiprocess import mark_process_dead

    mark_process_dead(_this.identifier, str(_this.folder))


def _is_alive(path: Path) -> bool:
    """Whether the process of an ``.alive`` file still holds its lock."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _file_identifier(path: Path) -> tuple[str, str]:
    """``(kind, identifier)`` of ``counter_<id>.db``, ``gauge_livesum_<id>.db``, …"""
    parts = path.name.removesuffix(".db").split("_")
    return parts[0], parts[-1]


def _archive_dead(folder: Path) -> None:
    """With the folder locked exclusively: the files of processes that are gone, archived."""
    from prometheus_client.multiprocess import mark_process_dead

    living = {_this.identifier}
    dead: set[str] = set()
    for alive in folder.glob(f"*{ALIVE_SUFFIX}"):
        identifier = alive.name.removesuffix(ALIVE_SUFFIX)
        (living if _is_alive(alive) else dead).add(identifier)
    files = sorted(folder.glob("*.db"))
    # Files whose process left no .alive (or a lock nobody holds) are a dead process's too.
    dead |= {ident for _, ident in map(_file_identifier, files)} - living - {ARCHIVE}
    if not dead:
        return
    for identifier in dead:
        mark_process_dead(identifier, str(folder))
    for kind in ARCHIVED_KINDS:
        wanted = {(kind, identifier) for identifier in dead}
        sources = [f for f in files if _file_identifier(f) in wanted]
        if sources:
            _archive(folder, kind, sources)
    for identifier in dead:
        for path in folder.glob(f"*_{identifier}.db"):
            if _file_identifier(path)[0] in ARCHIVED_KINDS:
                path.unlink(missing_ok=True)
        (folder / f"{identifier}{ALIVE_SUFFIX}").unlink(missing_ok=True)


def _archive(folder: Path, kind: str, sources: list[Path]) -> None:
    """Add ``sources`` (files of one kind) into ``<kind>_archive.db``, replaced at once."""
    from prometheus_client.mmap_dict import MmapedDict, mmap_key
    from prometheus_client.multiprocess import MultiProcessCollector

    archive = folder / f"{kind}_{ARCHIVE}.db"
    readable = []
    for path in sources:
        try:
            MmapedDict.read_all_values_from_file(str(path))
            readable.append(str(path))
        except (OSError, RuntimeError, ValueError, struct.error) as exc:  # cut short by a crash
            logger.warning("metrics file %s unreadable, its counts dropped: %s", path.name, exc)
    if archive.exists():
        readable.append(str(archive))
    # Not accumulated: histogram buckets stay per bucket, as the files hold them.
    merged = MultiProcessCollector.merge(readable, accumulate=False)
    staged = folder / f"{kind}_{ARCHIVE}.staged"  # not *.db: no scrape reads it half-written
    staged.unlink(missing_ok=True)
    values = MmapedDict(str(staged))
    try:
        for metric in merged:
            for sample in metric.samples:
                key = mmap_key(
                    metric.name,
                    sample.name,
                    list(sample.labels),
                    list(sample.labels.values()),
                    metric.documentation,
                )
                values.write_value(key, sample.value, sample.timestamp or 0.0)
    finally:
        values.close()
    os.replace(staged, archive)
