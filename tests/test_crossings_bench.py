"""bench/crossings.py: its counting, on sequences and on a traced call chain across two modules
of a throw-away package, and one followed worker run (so the script keeps working)."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


crossings = _load("bench_crossings", ROOT / "bench" / "crossings.py")


def test_a_sequence_counts_its_changes_and_its_returns_to_modules_left():
    counts = crossings.count_crossings(["a", "b", "b", "a", "c", "a", "b"])
    assert counts.modules == {"a", "b", "c"}
    assert counts.crossings == 5  # a→b, b→a, a→c, c→a, a→b; the repeated b is one stay
    assert dict(counts.returns) == {"a": 2, "b": 1}
    assert counts.total_returns == 3
    empty = crossings.count_crossings([])
    assert (empty.modules, empty.crossings, empty.total_returns) == (set(), 0, 0)


ONE = """
    def start(two):
        return two.helper() + two.helper() + local()  # two calls into two, each back


    def local():
        return 1


    async def run(two):
        await two.wait()  # suspends twice inside two: no event
        return local()
"""
TWO = """
    import asyncio


    def helper():
        return 1


    async def wait():
        await asyncio.sleep(0)
        await asyncio.sleep(0)
"""


@pytest.fixture
def two_modules(tmp_path):
    for package, name, source in (("pa", "one", ONE), ("pb", "two", TWO)):
        (tmp_path / package).mkdir()
        (tmp_path / package / f"{name}.py").write_text(textwrap.dedent(source))
    one = _load("crossings_pa_one", tmp_path / "pa" / "one.py")
    two = _load("crossings_pb_two", tmp_path / "pb" / "two.py")
    yield tmp_path, one, two
    sys.modules.pop("crossings_pa_one")
    sys.modules.pop("crossings_pb_two")


def test_nested_calls_into_a_module_and_back_are_crossings(two_modules):
    root, one, two = two_modules
    recorder = crossings.Recorder(root, ("pa", "pb"))
    with recorder.this_thread():
        assert one.start(two) == 3
    (stream,) = recorder.streams
    assert stream.start == "pa/one.py:start"
    assert stream.modules == ["pa/one.py", "pb/two.py", "pa/one.py", "pb/two.py", "pa/one.py"]
    counts = recorder.counts()
    assert counts.crossings == 4
    assert dict(counts.returns) == {"pa/one.py": 2, "pb/two.py": 1}
    assert counts.modules == {"pa/one.py", "pb/two.py"}


def test_a_coroutine_suspended_and_resumed_is_entered_once(two_modules):
    root, one, two = two_modules
    recorder = crossings.Recorder(root, ("pa", "pb"))
    with recorder.tracing():
        assert asyncio.run(one.run(two)) == 1
    (stream,) = recorder.streams
    assert stream.modules == ["pa/one.py", "pb/two.py", "pa/one.py"]
    assert recorder.counts().total_returns == 1


@pytest.mark.django_db(transaction=True)
def test_a_worker_run_is_followed_from_pickup_to_settlement(user, monkeypatch):
    import tools.runtime.worker as worker_module

    monkeypatch.setattr(worker_module, "ANNOUNCE_AFTER", 3600.0)
    recorder = crossings.follow_worker_run(user, "read", {"path": "notes.txt"})
    starts = {stream.start for stream in recorder.streams}
    assert "tools/runtime/worker.py:Worker._pick_up" in starts
    assert "tools/runtime/worker.py:Worker._run" in starts
    counts = recorder.counts()
    assert {"conversations/services/settlement.py", "tools/runtime/files/read.py"} <= counts.modules
    assert counts.crossings > counts.total_returns > 0
