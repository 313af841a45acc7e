"""The command-reading bench: what the permission port's reading of hostile command lines costs,
against the floor of reading the same text once with the raw grammar (tree-sitter's bash,
no walk). Django for the settings and the throttle cache; no database.

- One 64 KiB line with 64 line continuations: each join is a new parse (``tools/shell/parse.py``
  ``_joined``), so unbounded it was 65 parses of 64 KiB; it now stops at
  ``MAX_PARSE_WORK_BYTES`` (512 KiB of parsing) and the line is not plain.
- The issue's message: eight such commands (512 KB), read as a posted message's commands are
  (``commands_read``, before its transaction): refused with 413 once its commands have taken
  ``MAX_MESSAGE_PARSE_BYTES`` of parsing, instead of 2.5 s of one request's time.
"""

from __future__ import annotations

import statistics

from _measure import in_turns, per_run, timed
from _report import Table, spread
from execution_setup import DJANGO, seconds

LINE_BYTES = 64 * 1024 - 64
CONTINUATIONS = 64
COMMANDS = 8


def hostile_line(word: str) -> str:
    """A line of about 64 KiB with ``CONTINUATIONS`` backslash-newlines; ``word`` makes each one
    its own (the parse cache would answer a repeat)."""
    piece = f"echo {word} " + "x" * (LINE_BYTES // (CONTINUATIONS + 1) - 16)
    return " \\\n".join([piece] * (CONTINUATIONS + 1))[:LINE_BYTES]


def bench_parse(table: Table, runs: int, _folder) -> None:
    DJANGO.setup()
    from tree_sitter import Parser

    from conversations.errors import PayloadTooLarge
    from conversations.services.message_limits import commands_read
    from tools.shell import parse_command
    from tools.shell.parse import BASH

    raw = Parser(BASH)
    serial = iter(range(10**9))

    def line_read() -> None:
        parse_command.cache_clear()
        parsed = parse_command(hostile_line(f"w{next(serial)}"))
        assert not parsed.plain, parsed

    def line_floor() -> None:
        raw.parse(hostile_line(f"w{next(serial)}").encode())

    lines = [hostile_line(f"m{n}") for n in range(COMMANDS)]
    calls = [("bash", {"command": line}) for line in lines]

    def message_read() -> None:
        parse_command.cache_clear()
        try:
            commands_read(owner_id=f"bench-{next(serial)}", calls=calls)
        except PayloadTooLarge:
            return
        raise AssertionError("the hostile message was read whole")

    def message_floor() -> None:
        for line in lines:
            raw.parse(line.encode())

    line_read(), line_floor(), message_read(), message_floor()  # warm-up
    read, floor, message, message_base = in_turns(
        runs * 3,
        lambda: timed(line_read),
        lambda: timed(line_floor),
        lambda: timed(message_read),
        lambda: timed(message_floor),
    )
    ratios = per_run(read, floor)
    table.add(
        f"reading one 64 KiB line with {CONTINUATIONS} continuations (bounded; baseline: one raw "
        "tree-sitter parse of it)",
        spread(read, seconds),
        spread(floor, seconds),
        ratios,
        "≤ 10",
        statistics.median(ratios) <= 10,
        measured=read,
        baseline=floor,
        unit="s",
    )
    message_ratios = per_run(message, message_base)
    table.add(
        f"reading a message of {COMMANDS} such commands until its 413 (baseline: one raw parse "
        "of each)",
        spread(message, seconds),
        spread(message_base, seconds),
        message_ratios,
        "≤ 2.5",
        statistics.median(message_ratios) <= 2.5,
        measured=message,
        baseline=message_base,
        unit="s",
    )
