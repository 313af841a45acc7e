"""Crossings: how many project modules one settlement and one worker run pass through, and how
often they come back to a module they had left.

    python bench/crossings.py [--show]

Run from the repository root. Sets Django up on a throw-away database of the current settings
(SQLite by default, bench/_setup.py), then follows, with ``sys.setprofile`` and
``threading.setprofile``:

- ``call_settle`` of a completed ``bash`` call (``echo hi``), as the worker calls it once the
  command ran (only that function is followed, on its thread);
- one worker run of a ready call, from pickup to settlement (claim, handler, capture, the
  settlement), for ``read`` of a small file and for ``bash`` ``echo hi``.

It prints, per path: the project modules crossed (distinct), the crossings, the returns to a
module already left, and the modules with the most returns; ``--show`` also prints each
stream's sequence of modules. The counts do not depend on timing: the worker's
``ANNOUNCE_AFTER`` is raised so that a quick run is announced by its settlement however slow the
tracing makes it (bash announces at its first database step, as always).

How it counts
-------------
A *project module* is a file under ``conversations/``, ``tools/``, ``projections/`` or
``config/`` (named by its path, ``conversations/services/settlement.py``); Django, the standard
library and this script are not. The *current module* of a stream is the module of the innermost
project frame of its stack: a Python-level call into a project function makes the callee's
module current; its return makes the module of the nearest project frame below it current
again. Calls into other code change nothing, but project code they call (a signal receiver, a
callback) counts.

A *stream* is one thread, or one asyncio task on the event loop's thread, from the moment a
project frame starts on it until no project frame is left on it: ``call_settle`` is one stream;
a worker run is several (the pickup, the run's task, each job on a database thread, the
lease renewal). A coroutine that suspends (``await``) and resumes later stays where it was: its
suspension and resumption are not events, only its first start and its end are.

In a stream's sequence of current modules (consecutive repeats merged):

- a *crossing* is a change of the current module between consecutive project-frame events.
  Nested calls count both ways: ``a`` calling ``b`` which returns to ``a`` is two crossings;
- a *return* is a crossing into a module the stream had already been in (and left):
  ``a b a c a b`` has 5 crossings and 3 returns (``a`` twice, ``b`` once);
- *modules crossed* is the number of distinct modules in the sequence.

A path's figures add its streams' crossings and returns; its modules crossed are the distinct
modules of all its streams.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dis
import sys
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("conversations", "tools", "projections", "config")

_SUSPENDABLE = 0x20 | 0x80 | 0x100 | 0x200  # generator, coroutine, iterable coroutine, async gen
_RESUME = dis.opmap["RESUME"]
_YIELD = dis.opmap["YIELD_VALUE"]


@dataclass
class Counts:
    """What a sequence of current modules (or several) crossed."""

    modules: set[str] = field(default_factory=set)
    crossings: int = 0
    returns: Counter[str] = field(default_factory=Counter)

    def add(self, other: Counts) -> None:
        self.modules |= other.modules
        self.crossings += other.crossings
        self.returns.update(other.returns)

    @property
    def total_returns(self) -> int:
        return sum(self.returns.values())

    def top(self, n: int = 6) -> str:
        return ", ".join(f"`{m}` {k}×" for m, k in self.returns.most_common(n)) or "none"


def count_crossings(sequence: Iterable[str]) -> Counts:
    """The counts of one stream's sequence of current modules (module docstring)."""
    counts = Counts()
    previous = None
    for module in sequence:
        if module == previous:
            continue
        if previous is not None:
            counts.crossings += 1
            if module in counts.modules:
                counts.returns[module] += 1
        counts.modules.add(module)
        previous = module
    return counts


@dataclass
class Stream:
    """One stream: where it started (``module:function``) and its current modules in order."""

    start: str
    modules: list[str] = field(default_factory=list)


class Recorder:
    """Records the streams of project modules while installed (``tracing``, ``this_thread``).

    ``root`` and ``packages`` say which files are project modules (the tests point them at
    modules of their own)."""

    def __init__(self, root: Path = ROOT, packages: Sequence[str] = PACKAGES) -> None:
        self._prefixes = tuple(f"{root}/{package}/" for package in packages)
        self._cut = len(str(root)) + 1
        # code -> (module, its bytecode when it can suspend) or None when not a project's
        self._codes: dict[Any, tuple[str, bytes | None] | None] = {}
        self._open: dict[tuple[int, Any], Stream] = {}
        self.streams: list[Stream] = []
        self._lock = threading.Lock()

    def _code(self, code: Any) -> tuple[str, bytes | None] | None:
        try:
            return self._codes[code]
        except KeyError:
            pass
        name = code.co_filename
        known = None
        if name.startswith(self._prefixes):
            suspendable = code.co_flags & _SUSPENDABLE
            known = (name[self._cut :], code.co_code if suspendable else None)
        self._codes[code] = known
        return known

    def _module_below(self, frame: Any) -> str | None:
        while frame is not None and frame.f_code.co_filename != __file__:
            known = self._code(frame.f_code)
            if known is not None:
                return known[0]
            frame = frame.f_back
        return None

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            known = self._code(frame.f_code)
            if known is None:
                return
            module, code = known
            if code is not None and frame.f_lasti >= 0:
                at = frame.f_lasti
                if code[at] == _RESUME and code[at + 1] != 0:
                    return  # a generator or coroutine resumed: it was entered already
            self._step(module, f"{module}:{frame.f_code.co_qualname}")
        elif event == "return":
            known = self._code(frame.f_code)
            if known is None:
                return
            code = known[1]
            if code is not None and frame.f_lasti >= 0 and code[frame.f_lasti] == _YIELD:
                return  # suspended, not ended
            self._step(self._module_below(frame.f_back), None)

    def _step(self, module: str | None, start: str | None) -> None:
        loop = asyncio._get_running_loop()
        key = (threading.get_ident(), asyncio.current_task(loop) if loop is not None else None)
        with self._lock:
            stream = self._open.get(key)
            if module is None:
                self._open.pop(key, None)
                return
            if stream is None:
                stream = Stream(start or module)
                self._open[key] = stream
                self.streams.append(stream)
            if not stream.modules or stream.modules[-1] != module:
                stream.modules.append(module)

    def counts(self) -> Counts:
        total = Counts()
        for stream in self.streams:
            total.add(count_crossings(stream.modules))
        return total

    @contextlib.contextmanager
    def tracing(self) -> Iterator[Recorder]:
        """Follow this thread and the threads started meanwhile."""
        threading.setprofile(self.profile)
        sys.setprofile(self.profile)
        try:
            yield self
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]

    @contextlib.contextmanager
    def this_thread(self) -> Iterator[Recorder]:
        """Follow this thread only."""
        sys.setprofile(self.profile)
        try:
            yield self
        finally:
            sys.setprofile(None)


# --- the paths followed -----------------------------------------------------------------------


def _ready_call(user: Any, tool: str, arguments: dict[str, Any]) -> Any:
    """A ``ready`` call of ``tool`` in a new conversation whose workspace holds ``notes.txt``
    and whose rules allow ``echo hi``."""
    from conversations.services.conversations import conversation_create
    from conversations.services.messages import message_post
    from tools.models import PermissionRule
    from tools.workspaces import conversation_workspace

    conversation = conversation_create(owner=user, title=f"crossings {tool}")
    workspace = conversation_workspace(conversation)
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "notes.txt").write_text("one\ntwo\nthree\n")
    PermissionRule.objects.create(
        conversation=conversation, tool_name="bash", pattern="echo hi", decision="allow"
    )
    turn = message_post(
        conversation_id=conversation.pk,
        message_id="u",
        role="user",
        content=[{"type": "text", "text": "crossings"}],
    )
    posted = message_post(
        conversation_id=conversation.pk,
        message_id="a",
        role="assistant",
        turn_id=turn.body["turnId"],
        content=[{"type": "tool_call", "id": "c", "name": tool, "arguments": arguments}],
    )
    (call_id,) = posted.call_ids
    return call_id


def _worker_run(call_id: Any, recorder: Recorder | None) -> None:
    """One pickup of a worker and the runs it started, awaited to their end; followed by
    ``recorder`` when given."""
    from conversations.models import ToolCall
    from tools.runtime.registry import HANDLERS
    from tools.runtime.worker import Worker

    worker = Worker(handlers=HANDLERS, name="crossings", concurrency=1)

    async def one_pickup() -> None:
        worker._loop = asyncio.get_running_loop()
        worker._wake = asyncio.Event()
        await worker._pick_up()
        await asyncio.gather(*list(worker._running.values()))

    try:
        with recorder.tracing() if recorder is not None else contextlib.nullcontext():
            asyncio.run(one_pickup())
    finally:
        worker._database.shutdown(wait=True)
    if ToolCall.objects.filter(pk=call_id).exists():
        raise RuntimeError(f"the call {call_id} did not settle")


def follow_settle(user: Any) -> Recorder:
    """``call_settle`` of a completed ``bash`` ``echo hi``, as its worker calls it."""
    import tools.runtime.worker as worker_module

    recorder = Recorder()
    settle = worker_module.call_settle

    def followed(**kwargs: Any) -> Any:
        with recorder.this_thread():
            return settle(**kwargs)

    call_id = _ready_call(user, "bash", {"command": "echo hi"})
    worker_module.call_settle = followed
    try:
        _worker_run(call_id, None)
    finally:
        worker_module.call_settle = settle
    return recorder


def follow_worker_run(user: Any, tool: str, arguments: dict[str, Any]) -> Recorder:
    recorder = Recorder()
    _worker_run(_ready_call(user, tool, arguments), recorder)
    return recorder


def _row(name: str, counts: Counts, top: int) -> str:
    return (
        f"| {name} | {len(counts.modules)} | {counts.crossings} | {counts.total_returns} | "
        f"{counts.top(top)} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--show", action="store_true", help="print each stream's modules")
    parser.add_argument("--top", type=int, default=6, help="modules listed by returns (6)")
    args = parser.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _setup import django_on_bench_database, drop_bench_database

    connection = django_on_bench_database()
    from django.contrib.auth import get_user_model

    import tools.runtime.worker as worker_module

    worker_module.ANNOUNCE_AFTER = 3600.0  # a quick run is announced by its settlement
    try:
        user = get_user_model().objects.create(username="crossings")
        _worker_run(_ready_call(user, "read", {"path": "notes.txt"}), None)  # warm: imports
        paths = [
            ("`call_settle`, completed `bash` `echo hi`", follow_settle(user)),
            (
                "worker run, `read` of a small file",
                follow_worker_run(user, "read", {"path": "notes.txt"}),
            ),
            (
                "worker run, `bash` `echo hi`",
                follow_worker_run(user, "bash", {"command": "echo hi"}),
            ),
        ]
        print(f"database: {connection.vendor}\n")
        print("| path | modules crossed | crossings | returns | most returns |")
        print("|---|---|---|---|---|")
        for name, recorder in paths:
            print(_row(name, recorder.counts(), args.top))
        if args.show:
            for name, recorder in paths:
                print(f"\n{name}")
                for stream in recorder.streams:
                    counts = count_crossings(stream.modules)
                    print(
                        f"  stream from {stream.start}: {counts.crossings} crossings, "
                        f"{counts.total_returns} returns"
                    )
                    print("    " + " → ".join(stream.modules))
    finally:
        drop_bench_database(connection)


if __name__ == "__main__":
    main()
