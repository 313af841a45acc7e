"""Appends events to a conversation from a process of its own (the end-to-end tests' writer).

    python -m tests.realtime.appender --port PORT --token TOKEN --conversation CID --messages N

Run with a site's environment (``daphne_helpers.Site.env``). Unless given ``--turn``, it opens a
turn with a user message through the REST API; then it appends ``--messages`` assistant text
messages, one event each, in blocks of ``--rest-every``: the last ``--rest-run`` of a block go
through daphne's REST API one by one (daphne publishes them), the others through
``message_post`` on the shared database, in one transaction (published together when it
commits, by this process: through Redis when the site has it; to no one with the in-memory
layer, so a subscriber learns of them from the gap before the next published event, or from
its ``head`` tick). The last message always goes through REST. Prints the last sequence.
"""

from __future__ import annotations

import argparse
import os
import random
import string
import sys
import time

from tests.realtime.daphne_helpers import Rest


def _direct_writer():
    """A function appending messages in one transaction (set up only when needed)."""
    import django

    django.setup()
    from conversations.services import publish
    from conversations.services.messages import message_post

    def write(cid: str, turn_id: str, messages: list[tuple[str, str]]) -> int:
        with publish.atomic():
            for message_id, text in messages:
                posted = message_post(
                    conversation_id=cid,
                    message_id=message_id,
                    role="assistant",
                    turn_id=turn_id,
                    content=[{"type": "text", "text": text}],
                )
        return posted.body["event"]["sequence"]

    return write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--conversation", required=True)
    parser.add_argument("--turn", help="the open turn (default: open one)")
    parser.add_argument("--messages", type=int, required=True)
    parser.add_argument("--rest-every", type=int, default=1, help="1: every message by REST")
    parser.add_argument("--rest-run", type=int, default=1)
    parser.add_argument("--text-bytes", type=int, default=8)
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between blocks")
    args = parser.parse_args(argv)

    rest = Rest(args.port, args.token)
    cid = args.conversation
    turn_id = args.turn or rest.turn_open(cid, message_id=f"user-{os.getpid()}")
    direct = _direct_writer() if args.rest_run < args.rest_every else None
    # Incompressible text: nothing between here and the client can shrink it.
    letters = string.ascii_letters + string.digits
    chance = random.Random(os.getpid())
    made = 0
    last = None

    def message() -> tuple[str, str]:
        nonlocal made
        made += 1
        return f"a-{os.getpid()}-{made}", "".join(chance.choices(letters, k=args.text_bytes))

    while made < args.messages:
        block = min(args.rest_every, args.messages - made)
        by_rest = min(args.rest_run, block) if direct is not None else block
        if block > by_rest:
            last = direct(cid, turn_id, [message() for _ in range(block - by_rest)])
        for _ in range(by_rest):
            last = rest.say(cid, turn_id, *message())
        if args.pause:
            time.sleep(args.pause)
    rest.close()
    print(last, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
