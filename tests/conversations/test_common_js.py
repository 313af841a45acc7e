"""static/toolcore/common.js in Node: its times and durations read as the server's
(conversations/times.py), and its socket says it is live on each connection's first frame
(``hello``, or the workbench's ``snapshot``) and then backs off from half a second again.

The browser tests check the same on the pages (tests/browser/test_times.py,
tests/browser/test_workbench.py). Skipped, saying why, where Node is not installed.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest

from conversations.times import duration_text, when

HERE = Path(__file__).parent
NODE = shutil.which("node") or shutil.which("nodejs")

pytestmark = pytest.mark.skipif(
    NODE is None, reason="Node.js not found: common.js is checked by the browser tests only"
)

EDGES_MS = [
    0, 1, 23, 999, 1_000, 1_049, 4_299, 9_999, 10_000, 42_900, 59_999, 60_000, 192_000,
    3_599_999, 3_600_000, 7_500_000, 86_399_999, 86_400_000, 277_200_000,
]  # fmt: skip
READ_AS = {
    23: "23 ms",  # not "0 s"
    999: "999 ms",
    1_049: "1.0 s",
    4_299: "4.2 s",
    10_000: "10 s",
    192_000: "3 min 12 s",
    7_500_000: "2 h 5 min",
    277_200_000: "3 d 5 h",
}
TIMES = [
    "2026-11-29T23:43:01.123Z",  # winter in New York: EST
    "2026-07-04T12:00:00.000Z",  # summer: EDT
    "2026-01-01T00:00:00.999Z",
]


def _run(durations: list[int], times: list[str]) -> dict:
    env = {**os.environ, "TZ": "America/New_York"}
    done = subprocess.run(
        [NODE, str(HERE / "common_js_checks.js")],
        input=json.dumps({"durations": durations, "times": times}),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_durations_read_as_the_servers():
    rng = random.Random(17)
    durations = EDGES_MS + [rng.randrange(0, 10**9) for _ in range(300)]
    shown = _run(durations, [])["durations"]
    assert shown == [duration_text(timedelta(milliseconds=ms)) for ms in durations]
    named = dict(zip(durations, shown, strict=True))
    assert {ms: named[ms] for ms in READ_AS} == READ_AS


def test_a_running_calls_clock_ticks_in_whole_seconds():
    shown = _run([0, 23, 999, 1_000, 7_900, 192_000], [])["elapsed"]
    assert shown == ["0 s", "0 s", "0 s", "1 s", "7 s", "3 min 12 s"]


def test_times_show_utc_as_the_server_does_and_local_time_on_hover():
    shown = _run([], TIMES)
    assert shown["utc"] == [when(iso) for iso in TIMES]
    assert shown["utc"][0] == "2026-11-29 23:43:01 UTC"
    assert shown["local"] == [
        "2026-11-29 18:43:01 EST, your time (America/New_York)",
        "2026-07-04 08:00:00 EDT, your time (America/New_York)",
        "2025-12-31 19:00:00 EST, your time (America/New_York)",
    ]


def _story(live: str, first: str) -> list[str]:
    return [
        "state connecting",
        f"url ws://toolcore.test/ws/{first}/",
        "state open",
        "open",
        *([] if live == "hello" else [f"frame {live}"]),
        "frame launch.changed",
        "state reconnecting",
        "retry after 500 ms",
        "state reconnecting",
        "state reconnecting",
        "retry after 1000 ms",  # failed before it was live: the delay doubled
        "state reconnecting",
        "state open",
        "open",
        *([] if live == "hello" else [f"frame {live}"]),
        "state reconnecting",
        "retry after 500 ms",  # live again in between: back to half a second
        "state reconnecting",
        "state closed",
        "timers left 0",
    ]


def test_the_workbench_socket_is_live_on_its_snapshot_and_its_delay_starts_over():
    assert _run([], [])["workbench"] == _story("snapshot", "workbench")


def test_the_conversation_socket_is_live_on_hello_which_the_page_does_not_see():
    assert _run([], [])["conversations"] == _story("hello", "conversations")
