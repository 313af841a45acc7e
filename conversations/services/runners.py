"""What the execution runtime hears from the core: a call ready to run, a claim taken away, a
background run or a launch to start or stop; and the runners of tools that run at once
(docs/subsystems/claims_and_recovery.md).

The durable core never imports the runtime (handlers, workers, capture). The runtime registers,
from its ``AppConfig.ready()``:

- a **runner** per tool that runs at once in the process that made the call ready (``ask_user``
  needs no process): ``call_ready_run`` hands it the call after the commit;
- **listeners** of the channels below, which wake the process's own workers or stop a run.

A service ``announce``s in its transaction. Listeners of this process hear it after the commit;
other processes (``runworker_tools`` on any machine) hear it on PostgreSQL through a database
notification sent in the transaction, so it is delivered exactly when the change commits and
never when it rolls back (``conversations/sql``).

What the core's own steps (recovery, deleting a conversation, purging) ask of the runtime's rows
is registered apart, in ``participants.py``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from django.db import transaction

from ..sql import vendor_sql

Runner = Callable[[Any], bool]
"""Takes the id of a ``ready`` call; True when it ran the call (claimed it and went on)."""
Listener = Callable[[str], None]

# Channel: what its value names.
READY = "toolcore_ready"  # a call became ready: its tool's name
REVOKED = "toolcore_revoked"  # a running call's claim was taken (settled, requeued): its id
RUN_KILL = "toolcore_run_kill"  # an async run is to be killed: its id
LAUNCH = "toolcore_launch"  # a launch waits for a worker to start it: its id
LAUNCH_STOP = "toolcore_launch_stop"  # a launch is to be stopped: its id
CHANNELS = (READY, REVOKED, RUN_KILL, LAUNCH, LAUNCH_STOP)

_RUNNERS: dict[str, Runner] = {}
_LISTENERS: dict[str, list[Listener]] = defaultdict(list)


def runner_register(*, tool_name: str, runner: Runner) -> None:
    """Run ``tool_name``'s calls with ``runner`` as soon as they are ready (the last one
    registered for a tool wins)."""
    _RUNNERS[tool_name] = runner


def runner_tools() -> frozenset[str]:
    """The tools whose ready calls run at once."""
    return frozenset(_RUNNERS)


def call_ready_run(*, call_id: Any, tool_name: str) -> bool:
    """Hand a ``ready`` call to its tool's runner, after the commit that made it ready; False
    when the tool has none or the runner did not take the call (someone else did)."""
    runner = _RUNNERS.get(tool_name)
    return runner is not None and runner(call_id)


def listen(channel: str, listener: Listener) -> None:
    """Call ``listener(value)`` after each commit that announced on ``channel``."""
    _LISTENERS[channel].append(listener)


def unlisten(channel: str, listener: Listener) -> None:
    if listener in _LISTENERS[channel]:
        _LISTENERS[channel].remove(listener)


def _hear(channel: str, value: str) -> None:
    for listener in list(_LISTENERS[channel]):
        listener(value)


def announce(channel: str, value: Any) -> None:
    """In a transaction: tell the runtime of every process ``value`` on ``channel`` once it
    commits (at once outside one)."""
    text = str(value)
    vendor_sql().notify(channel, text)
    if _LISTENERS[channel]:
        transaction.on_commit(lambda: _hear(channel, text))
