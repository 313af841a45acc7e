"""What the core asks of the execution runtime at its own steps: recovery, deleting a
conversation, purging (docs/subsystems/claims_and_recovery.md).

The durable core never imports the runtime (``tools/runtime/``). Rows the runtime owns (async
runs, launches, the process groups dead holders left) still take part in some of the core's
steps, so the runtime registers, from its ``AppConfig.ready()`` (which runs in every process:
the web process, ``runworker_tools``, every ``manage.py`` command, the tests):

- a **recorder** of the process groups a dead holder left, which recovery calls for an expired
  claim (``process_left``);
- **recovery participants**, swept after the calls and activities, in the order they were
  registered, each row on its own (``recover_all``);
- **delete participants**, called when a conversation is deleted, after its calls were
  cancelled and before its rows go (``conversation_delete``);
- **purge participants**, called by ``manage.py purge`` after the conversations.

Each participant is called exactly where the core did that work itself before, in the same
transactions (none: every participant's step owns its own).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Action:
    """One thing recovery did, as ``manage.py recover`` prints it: ``<call id>: <what>``."""

    tool_call_id: str
    action: str

    def __str__(self) -> str:
        return f"{self.tool_call_id}: {self.action}"


@dataclass(frozen=True)
class RecoveryParticipant:
    """Rows whose watcher may die: which ones did (``stale``: their ids, by the database's
    clock), and making one of them ``lost`` (``lose``: what was done, or None when it ended
    meanwhile). ``noun`` names a row in the log (``async run <id>``)."""

    noun: str
    stale: Callable[[], Sequence[Any]]
    lose: Callable[[Any], Action | None]


@dataclass(frozen=True)
class PurgeParticipant:
    """Rows that retention deletes besides conversations: ``purge(older_than_days=…)`` deletes
    them and answers how many; ``noun`` names them in the command's output."""

    noun: str
    purge: Callable[..., int]


ProcessLeft = Callable[..., None]
"""Takes ``host``, ``pgid``, ``process_start`` and ``label`` of a group a dead holder left."""

_PROCESS_LEFT: list[ProcessLeft] = []
_RECOVERY: list[RecoveryParticipant] = []
_DELETE: list[Callable[[Any], None]] = []
_PURGE: list[PurgeParticipant] = []


def _add(registry: list[Any], item: Any) -> None:
    """Registered once, however often start-up runs."""
    if item not in registry:
        registry.append(item)


def process_left_register(recorder: ProcessLeft) -> None:
    """Record with ``recorder`` the process groups recovery finds left by dead holders."""
    _add(_PROCESS_LEFT, recorder)


def process_left(*, host: str, pgid: Any, process_start: Any, label: str) -> None:
    """A dead holder left this group running on ``host``: a worker there is to kill it."""
    for recorder in list(_PROCESS_LEFT):
        recorder(host=host, pgid=pgid, process_start=process_start, label=label)


def recovery_participant_register(participant: RecoveryParticipant) -> None:
    _add(_RECOVERY, participant)


def recovery_participants() -> list[RecoveryParticipant]:
    """In the order they were registered: recovery sweeps them so."""
    return list(_RECOVERY)


def delete_participant_register(participant: Callable[[Any], None]) -> None:
    """Call ``participant(conversation_id)`` when that conversation is deleted."""
    _add(_DELETE, participant)


def delete_participants() -> list[Callable[[Any], None]]:
    return list(_DELETE)


def purge_participant_register(participant: PurgeParticipant) -> None:
    _add(_PURGE, participant)


def purge_participants() -> list[PurgeParticipant]:
    return list(_PURGE)
