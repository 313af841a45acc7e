"""What runs a call once it is ``ready``, and what stops one whose claim was taken away:
registered by the execution runtime at start (docs/subsystems/claims_and_recovery.md).

The durable core never imports the runtime (handlers, workers, capture). The runtime registers,
from its ``AppConfig.ready()``:

- a **runner** per tool that runs at once in the process that made the call ready (``ask_user``
  needs no process): ``call_ready_run`` hands it the call after the commit;
- **listeners** that wake the process's own workers when a call becomes ready, and that stop the
  run of a call whose claim someone else took (a cancel, recovery).

Other processes (``runworker_tools`` on any machine) hear the same two facts from the database
itself on PostgreSQL: a notification sent in the transaction, so it is delivered exactly when
the change commits, and never when it rolls back (``conversations/sql``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import transaction

from ..sql import vendor_sql

Runner = Callable[[Any], bool]
"""Takes the id of a ``ready`` call; True when it ran the call (claimed it and went on)."""

READY_CHANNEL = "toolcore_ready"
REVOKED_CHANNEL = "toolcore_revoked"

_RUNNERS: dict[str, Runner] = {}
_READY_LISTENERS: list[Callable[[str], None]] = []
_REVOKED_LISTENERS: list[Callable[[str], None]] = []


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


def ready_listen(listener: Callable[[str], None]) -> None:
    """Call ``listener(tool_name)`` after each commit that made a call of that tool ready."""
    _READY_LISTENERS.append(listener)


def revoked_listen(listener: Callable[[str], None]) -> None:
    """Call ``listener(call_id)`` after each commit that took a running call from its claim
    holder (settled by a cancel or recovery, or put back to ``ready``)."""
    _REVOKED_LISTENERS.append(listener)


def ready_unlisten(listener: Callable[[str], None]) -> None:
    if listener in _READY_LISTENERS:
        _READY_LISTENERS.remove(listener)


def revoked_unlisten(listener: Callable[[str], None]) -> None:
    if listener in _REVOKED_LISTENERS:
        _REVOKED_LISTENERS.remove(listener)


def _after_commit(listeners: list[Callable[[str], None]], value: str) -> None:
    for listener in list(listeners):
        listener(value)


def call_ready_announce(*, tool_name: str) -> None:
    """In the transaction that makes a call ready: wake the workers once it commits."""
    vendor_sql().notify(READY_CHANNEL, tool_name)
    if _READY_LISTENERS:
        transaction.on_commit(lambda: _after_commit(_READY_LISTENERS, tool_name))


def call_revoked_announce(*, call_id: Any) -> None:
    """In the transaction that takes a running call from its claim holder: once it commits,
    the holder stops the run (its process group is killed)."""
    value = str(call_id)
    vendor_sql().notify(REVOKED_CHANNEL, value)
    if _REVOKED_LISTENERS:
        transaction.on_commit(lambda: _after_commit(_REVOKED_LISTENERS, value))
