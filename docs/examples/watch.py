"""Watch a conversation: each frame of /ws/conversations/ printed on a line of its own; when the
connection drops, reconnect and resume after the last sequence received (nothing missed,
nothing twice).

    python docs/examples/watch.py CONVERSATION_ID [TOKEN [URL]]

A missing argument is read from TOOLCORE_CONVERSATION, TOOLCORE_TOKEN or TOOLCORE_WS_URL (the
URL defaults to ws://127.0.0.1:8000/ws/conversations/). Needs ``pip install websockets``.
"""

import asyncio
import json
import os
import sys

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

UNAUTHENTICATED = 4401  # a bad or revoked token: connecting again would not help


async def watch(url: str, token: str, conversation_id: str) -> None:
    last = 0  # the last sequence received
    headers = {"Authorization": f"Bearer {token}"}
    async for ws in connect(url, additional_headers=headers):  # reconnects, with backoff
        subscribe = {"type": "subscribe", "conversationId": conversation_id, "after": last}
        try:
            await ws.send(json.dumps(subscribe))
            async for text in ws:  # hello, replay pages, then live events (and head frames)
                print(text, flush=True)
                frame = json.loads(text)
                if frame["type"] == "replay":
                    last = frame["to"]
                elif frame["type"] == "conversation.event":
                    last = frame["event"]["sequence"]
                elif frame["type"] == "snapshot":  # the history before it was not kept
                    last = frame["snapshot"]["lastSequence"]
        except ConnectionClosed as closed:
            if closed.rcvd is not None and closed.rcvd.code == UNAUTHENTICATED:
                raise SystemExit("The server refused the token (4401).") from None


if __name__ == "__main__":
    given = sys.argv[1:4] + [None] * (4 - len(sys.argv))
    conversation = given[0] or os.environ["TOOLCORE_CONVERSATION"]
    token = given[1] or os.environ["TOOLCORE_TOKEN"]
    url = given[2] or os.environ.get("TOOLCORE_WS_URL", "ws://127.0.0.1:8000/ws/conversations/")
    asyncio.run(watch(url, token, conversation))
