"""What one posted message may hold: a bounded number of tool calls, an event that fits in one
replay page, and commands whose reading is bounded per message and per user."""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from django.conf import settings
from django.core.cache import caches

from projections.frames import REPLAY_BUDGET_BYTES
from projections.units import size_words
from tools.permissions import command_of
from tools.shell import parse_command, parse_work

from ..errors import PayloadTooLarge, Throttled, ValidationFailed
from ..fields import dumps

logger = logging.getLogger(__name__)

# Tool calls one message may ask for: each is created and supervised in the posting request.
MAX_TOOL_CALLS = 128
# An event is measured before its sequence and time exist: with the widest sequence (a 64-bit
# integer), a turn id and a wire time in their places, so the measure never falls short.
_WIDEST_SEQUENCE = 2**63 - 1
_ANY_ID = "00000000-0000-0000-0000-000000000000"
_ANY_TIME = "2026-01-01T00:00:00.000Z"


def message_check(*, message_id: str, event_type: str, content: list[dict[str, Any]]) -> None:
    """Refuse a message asking for more than ``MAX_TOOL_CALLS`` calls (422) or whose event, as
    stored and replayed, would pass the replay page budget (413).

    A replay page always holds its first event whole, so one bigger event would make a page
    bigger than the budget.
    """
    calls = sum(1 for block in content if block.get("type") == "tool_call")
    if calls > MAX_TOOL_CALLS:
        raise ValidationFailed(
            f"A message may hold at most {MAX_TOOL_CALLS} tool_call blocks; this one has {calls}.",
            field="content",
        )
    event = {
        "sequence": _WIDEST_SEQUENCE,
        "type": event_type,
        "turnId": _ANY_ID,
        "toolCallId": None,
        "payload": {"messageId": message_id, "content": content},
        "createdAt": _ANY_TIME,
    }
    size = len(dumps(event).encode("utf-8"))
    if size > REPLAY_BUDGET_BYTES:
        raise PayloadTooLarge(
            f"The message's event would take {size_words(size)} ({size:,} bytes of JSON); an "
            f"event may take at most 512 KiB ({REPLAY_BUDGET_BYTES:,} bytes), the budget of one "
            "replay page.",
            field="content",
        )


# --- what reading a message's commands may cost -------------------------------------------
# Bytes the shell grammar may read for the commands of one message or typed command, each
# parse counted whole (a line's own bound is tools/shell MAX_PARSE_WORK_BYTES): eight commands
# of 64 KiB, each read once. More is 413, nothing written.
MAX_MESSAGE_PARSE_BYTES = 512 * 1024
_PARSE_WINDOW_SECONDS = 60
_PARSED_KEY = "parsed:{owner}:{window}"


def commands_read(*, owner_id: Any, calls: list[tuple[str, Any]]) -> None:
    """Read the commands of ``calls`` (tool name, arguments) before the transaction that
    creates them: the parse, the slow part, runs without the conversation's lock (or SQLite's
    write lock) held, and supervision finds each line read (the parse cache). Bounded per
    message (``MAX_MESSAGE_PARSE_BYTES``: 413) and per user and minute
    (``TOOLCORE_PARSE_BYTES_PER_MINUTE``: 429 ``throttled`` with ``Retry-After``)."""
    lines = [line for name, arguments in calls if (line := command_of(name, arguments))]
    if not lines:
        return
    cache, key, retry_after = _parse_window(owner_id)
    used = _cache_get(cache, key)
    budget = settings.TOOLCORE_PARSE_BYTES_PER_MINUTE
    if used >= budget:
        raise Throttled(
            f"This account's commands took {used:,} bytes of reading in this minute, the most "
            f"one account may use ({budget:,}): try again in {retry_after} s.",
            retry_after=retry_after,
        )
    with parse_work() as work:
        try:
            for at, line in enumerate(lines, start=1):
                parse_command(line)
                if work.bytes > MAX_MESSAGE_PARSE_BYTES:
                    raise PayloadTooLarge(
                        f"Reading the first {at} of its {len(lines)} commands took "
                        f"{work.bytes:,} bytes of parsing; one message's commands may take at "
                        f"most {MAX_MESSAGE_PARSE_BYTES:,} (512 KiB).",
                        field="content",
                    )
        finally:
            _cache_add(cache, key, work.bytes)


def _parse_window(owner_id: Any) -> tuple[Any, str, int]:
    """The throttle cache, this minute's key for ``owner_id``, and the seconds until the
    minute ends (at least 1)."""
    now = time.time()
    window = int(now // _PARSE_WINDOW_SECONDS)
    left = max(1, math.ceil((window + 1) * _PARSE_WINDOW_SECONDS - now))
    return caches[settings.THROTTLE_CACHE], _PARSED_KEY.format(owner=owner_id, window=window), left


def _cache_get(cache: Any, key: str) -> int:
    """The bytes read so far; 0 when the cache cannot be reached (it fails open, as the
    throttle of failed tokens does: logged, not refused)."""
    try:
        return int(cache.get(key, 0))
    except Exception:  # noqa: BLE001 - the cache backend's own errors (Redis unreachable)
        logger.warning("command reading not counted: the throttle cache is away", exc_info=True)
        return 0


def _cache_add(cache: Any, key: str, amount: int) -> None:
    if amount <= 0:
        return
    try:
        if not cache.add(key, amount, timeout=2 * _PARSE_WINDOW_SECONDS):
            cache.incr(key, amount)
    except ValueError:  # it ran out between the two calls
        _cache_add(cache, key, amount)
    except Exception:  # noqa: BLE001 - the cache backend's own errors (Redis unreachable)
        logger.warning("command reading not counted: the throttle cache is away", exc_info=True)
