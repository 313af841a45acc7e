"""The load suite's writer: appends and ``bash`` calls at a steady rate, from a process of its own.

    python -m tests.load.writer --ports P1,P2 --token TOKEN --seconds S \
        --appends-per-second A --calls-per-second B  < conversations.json

Reads ``[[conversation id, open turn id], ...]`` on stdin. For ``--seconds``, one thread a
conversation POSTs assistant text messages (one event each) at ``--appends-per-second``, and one
more thread POSTs assistant messages holding one ``bash`` call (``echo load-N``, allowed by a
rule of the site) at ``--calls-per-second`` in all, the conversations in turn. Each thread holds
a keep-alive connection to one daphne, the daphnes in turn. A thread that falls behind its
schedule does not try to catch up: the rate reached is what the site served. Any answer but
200/201 is counted as an error with its status and first bytes. Prints one JSON object: the
messages and calls made, the call ids per conversation, the errors.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

from tests.realtime.daphne_helpers import Rest


class Writer:
    def __init__(self, args: argparse.Namespace, conversations: list[list[str]]) -> None:
        self.args = args
        self.conversations = conversations
        self.ports = [int(p) for p in args.ports.split(",")]
        self.lock = threading.Lock()
        self.appended = 0
        self.calls: dict[str, list[str]] = {cid: [] for cid, _ in conversations}
        self.errors: list[str] = []
        self.deadline = 0.0

    def _post(self, rest: Rest, cid: str, body: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return rest.call("POST", f"/conversations/{cid}/messages", body)
        except (AssertionError, OSError) as error:
            with self.lock:
                self.errors.append(str(error)[:300])
            rest.close()  # a fresh connection for the next request
            return None

    def _paced(self, rate: float, step) -> None:
        """``step(k)`` at ``rate`` a second until the deadline, never catching up."""
        interval = 1.0 / rate
        due = time.monotonic()
        k = 0
        while True:
            now = time.monotonic()
            if now >= self.deadline:
                return
            if due > now:
                time.sleep(min(due - now, self.deadline - now))
                continue
            step(k)
            k += 1
            due = max(due + interval, time.monotonic() - interval)

    def appender(self, index: int) -> None:
        cid, turn_id = self.conversations[index]
        rest = Rest(self.ports[index % len(self.ports)], self.args.token)

        def step(k: int) -> None:
            body = {
                "messageId": f"load-{index}-{k}",
                "role": "assistant",
                "turnId": turn_id,
                "content": [{"type": "text", "text": f"message {k} of conversation {index}"}],
            }
            if self._post(rest, cid, body) is not None:
                with self.lock:
                    self.appended += 1

        try:
            self._paced(self.args.appends_per_second, step)
        finally:
            rest.close()

    def caller(self) -> None:
        rests = [Rest(port, self.args.token) for port in self.ports]

        def step(k: int) -> None:
            cid, turn_id = self.conversations[k % len(self.conversations)]
            body = {
                "messageId": f"load-call-{k}",
                "role": "assistant",
                "turnId": turn_id,
                "content": [
                    {
                        "type": "tool_call",
                        "id": f"call-{k}",
                        "name": "bash",
                        "arguments": {"command": f"echo load-{k}"},
                    }
                ],
            }
            answer = self._post(rests[k % len(rests)], cid, body)
            if answer is not None:
                with self.lock:
                    self.calls[cid] += [call["id"] for call in answer["toolCalls"]]

        try:
            self._paced(self.args.calls_per_second, step)
        finally:
            for rest in rests:
                rest.close()

    def run(self) -> dict[str, Any]:
        threads = [
            threading.Thread(target=self.appender, args=(i,), daemon=True)
            for i in range(len(self.conversations))
        ]
        if self.args.calls_per_second > 0:
            threads.append(threading.Thread(target=self.caller, daemon=True))
        started = time.monotonic()
        self.deadline = started + self.args.seconds
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        spent = time.monotonic() - started
        return {
            "seconds": spent,
            "appended": self.appended,
            "calls": self.calls,
            "errors": self.errors,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ports", required=True, help="the daphnes' ports, comma-separated")
    parser.add_argument("--token", required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--appends-per-second", type=float, required=True)
    parser.add_argument("--calls-per-second", type=float, default=0.0)
    args = parser.parse_args(argv)
    conversations = json.load(sys.stdin)
    print(json.dumps(Writer(args, conversations).run()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
