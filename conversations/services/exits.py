"""How a command ended: the one writer of ``CommandExit`` (docs/subsystems/settlement.md,
"How a command ended").

A command's exit code, signal and timeout live in its complete result (``result.json``), which
no page reads; the response's payload and the ``tool.updated`` state have fixed keys. So the
transaction that learns how a command ended records it here as well: the settlement of a
foreground command, or the end of the async run a command became.
"""

from __future__ import annotations

from typing import Any

from ..models import CommandExit


def command_exit_record(
    *,
    tool_call_id: Any,
    conversation_id: Any,
    exit_code: int | None,
    signal: str | None,
    timed_out: bool,
    timeout_seconds: float | None,
    async_run_id: Any = None,
) -> CommandExit | None:
    """Record how the call's command ended; None (nothing written) when nothing is known of it
    (no exit code, no signal, no timeout: a run found lost).

    Called inside the transaction that settles the call or ends its run, with the conversation
    row locked; a call has at most one (its settlement or its run's end happens once).
    """
    if exit_code is None and not signal and not timed_out:
        return None
    return CommandExit.objects.create(
        tool_call_id=tool_call_id,
        conversation_id=conversation_id,
        async_run_id=async_run_id,
        exit_code=exit_code,
        signal=signal or "",
        timed_out=timed_out,
        timeout_seconds=timeout_seconds if timed_out else None,
        succeeded=exit_code == 0 and not signal and not timed_out,
    )
