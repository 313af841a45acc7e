"""How commands ended, read for the cards, the API and the admin (``CommandExit`` rows).

One wording for every reader: ``Exit 3``, ``Killed by SIGKILL``, ``Timed out after 120 s``
(a timeout first, then a signal, then the exit code: the order of the model's status line). The
call's outcome stays ``completed`` whatever the exit code (the command ran to its end); what a
person reads of its exit comes from here, never from the model's text.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db.models import OuterRef, Subquery

from .models import CommandExit, ConversationEvent, json_text

# What a reader of one row uses, so lists read no more than this.
EXIT_COLUMNS = (
    "tool_call_id",
    "async_run_id",
    "exit_code",
    "signal",
    "timed_out",
    "timeout_seconds",
    "succeeded",
    "created_at",
)


def seconds_text(seconds: float) -> str:
    """``120``, ``1.5``: whole seconds without a decimal point."""
    return f"{seconds:.0f}" if float(seconds).is_integer() else f"{seconds:g}"


def exit_summary(
    *, exit_code: int | None, signal: str | None, timed_out: bool, timeout_seconds: float | None
) -> str:
    """How a command ended, in a person's words: ``Timed out after 120 s``, ``Killed by
    SIGKILL``, ``Exit 3``."""
    if timed_out and timeout_seconds:
        return f"Timed out after {seconds_text(timeout_seconds)} s"
    if timed_out:
        return "Timed out"
    if signal:
        return f"Killed by {signal}"
    return f"Exit {exit_code}"


def exit_wire(row: CommandExit) -> dict[str, Any]:
    """A command's end as clients get it (the ``exit`` of details and history items)."""
    return {
        "exitCode": row.exit_code,
        "signal": row.signal or None,
        "timedOut": row.timed_out,
        "timeoutSeconds": row.timeout_seconds,
        "asyncRunId": str(row.async_run_id) if row.async_run_id else None,
        "succeeded": row.succeeded,
        "summary": exit_text(row),
    }


def exit_text(row: CommandExit) -> str:
    return exit_summary(
        exit_code=row.exit_code,
        signal=row.signal,
        timed_out=row.timed_out,
        timeout_seconds=row.timeout_seconds,
    )


def exit_of(call_id: Any) -> CommandExit | None:
    """How the call's command ended; None while it runs, or for a call that ran no command."""
    return CommandExit.objects.filter(pk=call_id).only(*EXIT_COLUMNS).first()


def exits_by_call(call_ids: Iterable[Any]) -> dict[Any, dict[str, Any]]:
    """The ``exit_wire`` of each of these calls that has one, by call id: one query."""
    ids = list(call_ids)
    if not ids:
        return {}
    rows = CommandExit.objects.filter(pk__in=ids).only(*EXIT_COLUMNS).order_by()
    return {row.pk: exit_wire(row) for row in rows}


def unsuccessful_exits(since: datetime) -> Any:
    """Commands that exited non-zero, were killed by a signal or timed out since ``since``,
    newest first, each with its conversation and its ``command`` (from its response's bounded
    arguments): through the index ``exit_succeeded_recent``."""
    command = ConversationEvent.objects.filter(tool_call_id=OuterRef("tool_call_id")).values(
        text=json_text("payload__arguments__command")
    )[:1]
    return (
        CommandExit.objects.filter(succeeded=False, created_at__gte=since)
        .select_related("conversation")
        .annotate(command=Subquery(command))
        .order_by("-created_at")
    )
