"""Process capture: one shell command in its own process group, its output on disk as it arrives.

What a ``bash`` call, an async run or a launch runs. The command gets ``cwd`` = the workspace,
its own session and process group, stdin from ``/dev/null`` and the minimal environment of
:func:`tool_environment`. Its output is written, as the bytes arrive, to three files in
``folder``: ``stdout.txt``, ``stderr.txt`` and ``output.txt`` (both streams interleaved in
arrival order). Each is capped at 16 MiB (16,777,216 bytes): past the cap bytes are counted and
not stored, and the result says so. A line index is written beside each file while capturing
(``projections.logpages.LineIndexWriter``), so log pages of a running or finished capture seek
(docs/subsystems/api.md, "Log pages").

Interface::

    tool_environment(workspace, environ=None) -> dict[str, str]
    capture = ProcessCapture(command=..., cwd=..., env=..., folder=...,
                             on_output=None, index_dir=None, cap_bytes=CAPTURE_MAX_BYTES)
    await capture.start()          # then: pid, pgid, started_at, process_start_ticks
    await capture.wait(timeout)    # True once exited and drained; False: still running
    await capture.terminate(grace=5.0, timed_out=False)
    await capture.run(timeout)     # start + wait + on timeout terminate; -> result()
    capture.result()               # {exitCode, signal, timedOut, durationMs, capture}
    capture.files()                # [AttemptFile] for the three files

Process groups (``group_is_alive``, ``kill_group``) are in ``processes.py``; the live view of the
output (``LiveOutput``) in ``live.py``.

``wait(timeout)`` returning False leaves the command running and capturing; calling it again
is how a caller promotes a long foreground command to a background run.

Choices:

* **No thread per stream, no reader buffer.** The process is spawned with ``subprocess.Popen``
  onto two pipes whose read ends are watched by the event loop (``add_reader``); each readiness
  reads at most 64 KiB (``READ_BYTES``) and writes it to the files before the next read, so
  nothing queues in memory and a slow disk slows the command through the pipe, as a shell
  redirect would. Both streams are handled in one loop, so ``output.txt`` holds them in the
  order the reads happened. The exit is watched through a pidfd (``os.pidfd_open``), so 3.11's
  one-thread-per-child watcher of asyncio subprocesses is not used either.
* **Writes happen in the event loop.** A write of 64 KiB to the page cache took 15 µs where
  handing it to a thread (``asyncio.to_thread``) took 70 µs, and a thread would need the
  chunk queued meanwhile; bench/execution.py measures the whole path against a shell redirect.
  Files are not synced per chunk: at the end, the three files and their folder are fsynced in a
  worker thread, before :meth:`ProcessCapture.wait` answers True, so they are complete and
  durable before settlement hashes them.
* **End of output.** Reading stops at EOF of both pipes, which is the common end: the command
  and everything it started have exited. A command may exit while a background child keeps a
  pipe open (``sleep 100 &``): once the leader exited, capture keeps reading only until no byte
  arrived for ``DRAIN_IDLE_SECONDS`` (0.5 s), and never past ``DRAIN_MAX_SECONDS`` (2 s) after
  the exit; it then closes its ends of the pipes (a child writing later gets ``EPIPE``). A
  command that closes its stdout (``exec >&-``) and keeps running is captured until it exits.
* **The leader is reaped only when capture ends.** Until then its pid stays taken (a zombie
  at worst), so signalling the group can never reach a stranger. ``terminate`` sends SIGTERM
  to the group, waits up to ``grace`` for the leader to exit and for the group to have no live
  member, then sends SIGKILL to the group. Zombies do not count as live: under a PID 1 that does
  not reap orphans (a container started without an init), killed children stay zombies.
* **Signals** are reported by name (``"SIGTERM"``, ``"SIGKILL"``), ``exitCode`` is null then;
  a normal exit has ``signal`` null. A shell that exits with 128 + N after its child was killed
  exited normally: ``exitCode`` 128 + N.
* **The sandbox.** Given a ``sandbox`` (``tools/sandbox.py``), the command runs under
  bubblewrap, which leads the group: signals other than SIGKILL go to the group's other
  members (``processes.killpg``), so the command has its grace and its own exit status, and
  bubblewrap's 128 + N for a command killed by signal N is reported as that signal (a command
  that itself exits with 129 to 192 reads as killed by a signal). The sandbox has its own PID
  namespace: what the command left running in the background ends when it exits.
* **Live output.** ``on_output(text)`` gets the output decoded as it arrives: UTF-8 with
  replacement by one incremental decoder per stream (a character split between two reads is
  decoded whole), U+0000 replaced by U+FFFD (the decoder never yields a surrogate). Decoding is
  for the live view only; the files keep the raw bytes. :class:`LiveOutput` turns that text into
  ``tool.updated`` updates: at most one per 100 ms, each at most 16 KiB of JSON.
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conversations.storage import CAPTURE_MAX_BYTES, CAPTURE_MEDIA_TYPE
from projections.logpages import LineIndexWriter
from tools.sandbox_limits import CommandLimits

from .processes import (
    GROUP_POLL_SECONDS,
    KILL_GRACE_SECONDS,
    OTHER,
    await_group_end,
    group_has_live_member,
    killpg,
    leader_state,
    signal_name,
    start_ticks_of,
)

if TYPE_CHECKING:
    from tools.runtime.base import AttemptFile
    from tools.sandbox import Sandbox

logger = logging.getLogger(__name__)

READ_BYTES = 64 * 1024
DRAIN_IDLE_SECONDS = 0.5
DRAIN_MAX_SECONDS = 2.0
# A pipe still open at the end is read until empty, but at most this many reads: a writer
# that keeps refilling it does not hold capture up.
FINAL_READS = 16
STREAMS = ("stdout", "stderr")
# bubblewrap exits 128 + N when the command it ran was killed by signal N.
SIGNALLED = 128

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_LANG = "C.UTF-8"
ENV_PREFIX = "TOOLCORE_ENV_"


def tool_environment(workspace: Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a command: nothing of the server's but what the operator allows.

    ``PATH`` is a fixed system default, not the server's (which may lead into the server's own
    virtualenv); ``LANG`` is ``C.UTF-8``; each ``TOOLCORE_ENV_<NAME>`` of ``environ`` (the
    server's environment by default) becomes ``<NAME>``, which may replace ``PATH`` or ``LANG``.
    ``HOME`` (the workspace) and ``TERM=dumb`` are always set. Nothing else reaches the command:
    no database URL, secret key, Redis URL or token.
    """
    source = os.environ if environ is None else environ
    env = {"PATH": DEFAULT_PATH, "LANG": DEFAULT_LANG}
    for key, value in source.items():
        if key.startswith(ENV_PREFIX) and len(key) > len(ENV_PREFIX):
            env[key[len(ENV_PREFIX) :]] = value
    env["HOME"] = str(workspace)
    env["TERM"] = "dumb"
    return env


# --- capture ------------------------------------------------------------------------------------


class _Sink:
    """One capture file: bytes written up to the cap, every byte counted, lines indexed."""

    def __init__(self, path: Path, cap: int, index_dir: Path | None) -> None:
        self.path, self.cap = path, cap
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        self.fd: int | None = os.open(path, flags, 0o640)
        self.bytes = self.stored = 0
        self.index: LineIndexWriter | None = None
        # The index sidecar is made with the first bytes: not on the path to the start, and
        # not at all for a stream that stays empty.
        self._index_dir = index_dir

    def _open_index(self) -> None:
        """Make the index, once, while the file is still empty: on the first bytes or at the
        close of a stream that stayed empty. A capture that cannot make it pages by scanning
        instead: slower, never wrong."""
        index_dir, self._index_dir = self._index_dir, None
        try:
            self.index = LineIndexWriter(self.path, index_dir)
        except OSError as exc:
            logger.warning("capture runs without a line index for %s: %s", self.path, exc)

    def write(self, data: bytes) -> None:
        room = self.cap - self.stored
        if room > 0 and self.fd is not None:
            if self._index_dir is not None:
                self._open_index()
            view = memoryview(data)[:room]
            written = 0
            try:
                while written < len(view):
                    written += os.write(self.fd, view[written:])
            except OSError as exc:  # a full disk: stop storing, keep counting
                logger.warning("capture stopped writing %s: %s", self.path, exc)
                self.cap = self.stored + written
            self.stored += written
            if written:
                self._index(data if written == len(data) else view[:written].tobytes())
        self.bytes += len(data)

    def _index(self, data: bytes | None) -> None:
        """Feed the line index (``None``: close it); a failing index is dropped, not fatal."""
        if self.index is None:
            return
        try:
            if data is None:
                self.index.close()
            else:
                self.index.feed(data)
        except OSError as exc:
            logger.warning("capture dropped the line index of %s: %s", self.path, exc)
            self.index.close()
            self.index = None

    def counts(self) -> dict[str, Any]:
        return {
            "bytes": self.bytes,
            "storedBytes": self.stored,
            "truncated": self.bytes > self.stored,
        }

    def finish(self) -> None:
        """Make the file complete and durable (blocking: run in a thread)."""
        if self._index_dir is not None and self.stored == 0:
            self._open_index()
        self._index(None)
        if self.fd is not None:
            fd, self.fd = self.fd, None
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


class _Stream:
    def __init__(self, name: str, fd: int, sink: _Sink) -> None:
        self.name, self.fd, self.sink = name, fd, sink
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.open = True


class ProcessCapture:
    """One shell command, run with ``/bin/sh -c`` and captured to ``folder`` (see the module)."""

    def __init__(
        self,
        *,
        command: str,
        cwd: Path,
        env: Mapping[str, str],
        folder: Path,
        on_output: Callable[[str], None] | None = None,
        index_dir: Path | None = None,
        cap_bytes: int = CAPTURE_MAX_BYTES,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.command, self.cwd, self.env = command, Path(cwd), dict(env)
        self.sandbox = sandbox
        self.folder, self.on_output = Path(folder), on_output
        self.index_dir, self.cap_bytes = index_dir, cap_bytes
        self.pid: int | None = None
        self.pgid: int | None = None
        self.started_at: datetime | None = None
        self.process_start_ticks: int | None = None
        self._popen: subprocess.Popen | None = None
        self._sinks: dict[str, _Sink] = {}
        self._streams: list[_Stream] = []
        self._pidfd: int | None = None
        self._t0 = self._exit_t = self._last_byte = 0.0
        self._exit_code: int | None = None
        self._signal: int | None = None
        self._timed_out = False
        self._exited = asyncio.Event()
        self._done = asyncio.Event()
        self._error: BaseException | None = None
        self._drain_timer: asyncio.TimerHandle | None = None
        self._finishing = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task] = set()
        self._limits: CommandLimits | None = None

    # --- running ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Create the folder and the files, and start the command in a new session (a command
        that could not be captured never runs). The line indexes come with the first bytes."""
        if self._popen is not None:
            raise RuntimeError("this capture has already started")
        self._loop = asyncio.get_running_loop()
        self.folder.mkdir(parents=True, exist_ok=True)
        pipes: list[int] = []
        try:
            for name in (*STREAMS, "output"):
                path = self.folder / f"{name}.txt"
                self._sinks[name] = _Sink(path, self.cap_bytes, self.index_dir)
            out_r, out_w = os.pipe()
            pipes += [out_r, out_w]
            err_r, err_w = os.pipe()
            pipes += [err_r, err_w]
            self._t0 = time.monotonic()
            argv = ["/bin/sh", "-c", self.command]
            if self.sandbox is not None:
                argv = self.sandbox.argv(argv, cwd=self.cwd)
                self._limits = CommandLimits(self.sandbox.limits)
                argv = self._limits.make() + argv
            self._popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out_w,
                stderr=err_w,
                cwd=self.cwd,
                env=self.env,
                start_new_session=True,
            )
        except BaseException:
            if self._limits is not None:
                self._limits.remove(wait=0)
            for fd in pipes:
                os.close(fd)
            for sink in self._sinks.values():  # only the files this capture created
                sink._index_dir = None  # no sidecar for a file about to go
                sink.finish()
                sink.path.unlink(missing_ok=True)
            self._sinks = {}
            raise
        os.close(out_w)
        os.close(err_w)
        self._last_byte = time.monotonic()
        self.started_at = datetime.now(UTC)
        self.pid = self.pgid = self._popen.pid
        self.process_start_ticks = start_ticks_of(self.pid)
        for name, fd in zip(STREAMS, (out_r, err_r), strict=True):
            os.set_blocking(fd, False)
            stream = _Stream(name, fd, self._sinks[name])
            self._streams.append(stream)
            self._loop.add_reader(fd, self._on_readable, stream)
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):  # pragma: no cover - no pidfd: poll instead
            self._loop.call_later(GROUP_POLL_SECONDS, self._poll_exit)
        else:
            self._loop.add_reader(self._pidfd, self._check_exit)

    async def wait(self, timeout: float | None = None) -> bool:
        """True once the command exited and its output is drained and durable; False when
        ``timeout`` seconds passed first (it keeps running and capturing)."""
        if self._popen is None:
            raise RuntimeError("this capture has not started")
        if not self._done.is_set():
            try:
                await asyncio.wait_for(self._done.wait(), timeout)
            except TimeoutError:
                return False
        if self._error is not None:
            raise self._error
        return True

    async def terminate(
        self, grace: float = KILL_GRACE_SECONDS, *, timed_out: bool = False
    ) -> None:
        """SIGTERM to the group; SIGKILL to the group once ``grace`` passed while the leader
        or another member still runs. ``timed_out`` marks the result as timed out."""
        if self._popen is None:
            raise RuntimeError("this capture has not started")
        if timed_out and not self._exited.is_set():
            self._timed_out = True
        if not self._signal_group(signal.SIGTERM):
            return
        await await_group_end(self.pgid, grace, self._exited)
        if not self._exited.is_set() or group_has_live_member(self.pgid):
            self._signal_group(signal.SIGKILL)

    async def run(self, timeout: float | None, *, grace: float = KILL_GRACE_SECONDS) -> dict:
        """Start, wait up to ``timeout``, then terminate (marked timed out); the result.

        Cancelled, it leaves a termination running before it lets the cancellation through,
        so no command outlives the call that ran it.
        """
        await self.start()
        try:
            if not await self.wait(timeout):
                await self.terminate(grace, timed_out=True)
                await self.wait()
        except asyncio.CancelledError:
            self._spawn(self.terminate(grace))
            raise
        return self.result()

    def _signal_group(self, sig: int) -> bool:
        """Signal the group unless its leader pid may belong to someone else now."""
        if self.pgid is None or leader_state(self.pgid, self.process_start_ticks) == OTHER:
            return False
        killpg(self.pgid, sig)
        return True

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- reading ---------------------------------------------------------------------------

    def _on_readable(self, stream: _Stream) -> None:
        try:
            data = os.read(stream.fd, READ_BYTES)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close_stream(stream)
            self._maybe_finish()
            return
        self._last_byte = time.monotonic()
        self._take(stream, data)

    def _take(self, stream: _Stream, data: bytes) -> None:
        stream.sink.write(data)
        self._sinks["output"].write(data)
        if self.on_output is not None:
            self._emit(stream.decoder.decode(data))

    def _emit(self, text: str) -> None:
        if not text:
            return
        if "\x00" in text:
            text = text.replace("\x00", "\ufffd")
        try:
            self.on_output(text)
        except Exception:  # the live view must never stop the capture
            logger.exception("on_output failed")

    def _close_stream(self, stream: _Stream) -> None:
        if not stream.open:
            return
        stream.open = False
        self._loop.remove_reader(stream.fd)
        os.close(stream.fd)
        if self.on_output is not None:
            self._emit(stream.decoder.decode(b"", final=True))

    def _drain_and_close(self, stream: _Stream) -> None:
        """Read what is in the pipe now (bounded), then close it."""
        for _ in range(FINAL_READS):
            if not stream.open:
                return
            try:
                data = os.read(stream.fd, READ_BYTES)
            except OSError:  # BlockingIOError: empty
                break
            if not data:
                break
            self._take(stream, data)
        self._close_stream(stream)

    # --- the end ---------------------------------------------------------------------------

    def _check_exit(self) -> None:
        """The leader exited (pidfd readable): note how, without reaping it yet."""
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped behind our back: the status is lost
            info = None
        else:
            if info is None:
                return
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        if info is not None:
            if info.si_code != os.CLD_EXITED:
                self._signal = info.si_status
            elif self.sandbox is not None and SIGNALLED < info.si_status <= SIGNALLED + 64:
                self._signal = info.si_status - SIGNALLED  # bubblewrap's 128 + N: signal N
            else:
                self._exit_code = info.si_status
        self._exit_t = time.monotonic()
        self._exited.set()
        self._maybe_finish()

    def _poll_exit(self) -> None:  # pragma: no cover - only without pidfd
        self._check_exit()
        if not self._exited.is_set():
            self._loop.call_later(GROUP_POLL_SECONDS, self._poll_exit)

    def _maybe_finish(self) -> None:
        """After the exit: finish at EOF of both pipes, or once output went quiet."""
        if not self._exited.is_set() or self._finishing:
            return
        if self._drain_timer is not None:
            self._drain_timer.cancel()
            self._drain_timer = None
        now = time.monotonic()
        quiet_at = max(self._last_byte, self._exit_t) + DRAIN_IDLE_SECONDS
        deadline = min(quiet_at, self._exit_t + DRAIN_MAX_SECONDS)
        if any(s.open for s in self._streams) and now < deadline:
            self._drain_timer = self._loop.call_at(
                self._loop.time() + (deadline - now), self._maybe_finish
            )
            return
        self._finishing = True
        for stream in self._streams:
            self._drain_and_close(stream)
        self._reap()
        self._spawn(self._finish_files())

    def _reap(self) -> None:
        try:
            _, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            status = None
        if self._popen is not None and self._popen.returncode is None:
            # Popen must not reap it again (nor a recycled pid).
            self._popen.returncode = os.waitstatus_to_exitcode(status) if status is not None else -1

    async def _finish_files(self) -> None:
        try:
            await asyncio.to_thread(self._sync_files)
        except BaseException as exc:
            self._error = exc
        finally:
            self._done.set()
            if self._limits is not None:
                # Its group is gone; its cgroups empty as the last of it ends, a moment later:
                # removed on a thread, the call's settlement not waiting for it.
                self._loop.run_in_executor(None, self._limits.remove)

    def _sync_files(self) -> None:
        for sink in self._sinks.values():
            sink.finish()
        fd = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)  # the files' names are durable too
        finally:
            os.close(fd)

    # --- what it gives ---------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    def result(self) -> dict[str, Any]:
        """The result fields (so far, while it runs): exit, signal, timeout, duration, counts."""
        end = self._exit_t if self._exited.is_set() else time.monotonic()
        return {
            "exitCode": self._exit_code,
            "signal": signal_name(self._signal) if self._signal is not None else None,
            "timedOut": self._timed_out,
            "durationMs": int((end - self._t0) * 1000) if self._popen is not None else 0,
            "capture": {name: sink.counts() for name, sink in self._sinks.items()},
        }

    def files(self) -> list[AttemptFile]:
        """The three capture files, for settlement (kinds ``stdout``, ``stderr``, ``output``)."""
        # Imported here: the durable core's models need Django set up, and capture itself does
        # not (the bench and a launch runner use it without settings).
        from tools.runtime.base import AttemptFile

        return [
            AttemptFile(
                path=s.path, kind=name, media_type=CAPTURE_MEDIA_TYPE, truncated=s.bytes > s.stored
            )
            for name, s in self._sinks.items()
        ]
