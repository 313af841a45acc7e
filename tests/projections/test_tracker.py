"""projections/tracker.py: hosts that resend whole outputs get append deltas (docs/projections.md)."""

from __future__ import annotations

import hashlib
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections import tracker as tracker_module
from projections.fold import apply_tool_update, validate_tool_update
from projections.tool_output import bound_tool_output
from projections.tracker import EMPTY_SHA1, ToolCallTracker, track_append, track_replace

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
IDS = {"toolCallId": "c1", "turnId": "t1"}


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


def fold(state, fields):
    """Applies tracker fields as the clients would, checking they are a valid update."""
    if fields is None:
        return state
    update = {**IDS, **fields}
    validate_tool_update(update)
    return apply_tool_update(state, update)


# ---------------------------------------------------------------- replace


def test_first_replace_of_an_unseen_call_is_a_delta():
    tracker = ToolCallTracker()
    assert tracker.replace("c1", "hello") == {"outputDelta": "hello"}
    assert tracker.output("c1") == {"text": "hello"}
    assert tracker.memory("c1") == {
        "rawLength": 5,
        "rawSha1": sha1("hello"),
        "output": {"text": "hello"},
    }


def test_growing_resends_yield_the_new_part():
    tracker = ToolCallTracker()
    tracker.replace("c1", "line 1\n")
    assert tracker.replace("c1", "line 1\nline 2\n") == {"outputDelta": "line 2\n"}
    assert tracker.replace("c1", "line 1\nline 2\n\u00e9\U0001f600") == {
        "outputDelta": "\u00e9\U0001f600"
    }
    assert tracker.output("c1") == {"text": "line 1\nline 2\n\u00e9\U0001f600"}


def test_the_same_text_again_yields_nothing():
    tracker = ToolCallTracker()
    tracker.replace("c1", "abc")
    assert tracker.replace("c1", "abc") is None
    assert tracker.replace("c2", "") is None
    assert "c2" in tracker


def test_a_changed_prefix_resets():
    tracker = ToolCallTracker()
    tracker.replace("c1", "progress 10%")
    assert tracker.replace("c1", "progress 20%") == {"output": {"text": "progress 20%"}}
    assert tracker.memory("c1")["rawSha1"] == sha1("progress 20%")


def test_a_shorter_text_resets():
    tracker = ToolCallTracker()
    tracker.replace("c1", "abcdef")
    assert tracker.replace("c1", "abc") == {"output": {"text": "abc"}}
    assert tracker.replace("c1", "") == {"output": {"text": ""}}
    assert tracker.memory("c1")["rawLength"] == 0


def test_a_new_part_over_16384_json_bytes_yields_the_whole_bounded_output():
    tracker = ToolCallTracker()
    tracker.replace("c1", "start\n")
    text = "start\n" + "x" * 16385
    assert tracker.replace("c1", text) == {"output": bound_tool_output(text)}
    # 8192 newlines cost 16384 JSON bytes: still a delta; one more is not.
    text2 = text + "\n" * 8192
    assert tracker.replace("c1", text2) == {"outputDelta": "\n" * 8192}
    text3 = text2 + "\n" * 8193
    assert tracker.replace("c1", text3) == {"output": bound_tool_output(text3)}


def test_lone_surrogates_are_hashed_not_refused():
    tracker = ToolCallTracker()
    tracker.replace("c1", "a\ud800")
    assert tracker.replace("c1", "a\ud800b") == {"outputDelta": "b"}
    assert tracker.replace("c1", "a\udc00b") == {"output": {"text": "a\udc00b"}}


# ---------------------------------------------------------------- append, settle


def test_append_yields_deltas_or_the_whole_output():
    tracker = ToolCallTracker()
    assert tracker.append("c1", "") is None
    assert tracker.append("c1", "abc") == {"outputDelta": "abc"}
    big = "\x01" * 2731  # 16386 JSON bytes
    assert tracker.append("c1", big) == {"output": bound_tool_output("abc" + big)}
    assert tracker.memory("c1")["rawSha1"] == sha1("abc" + big)


def test_append_then_replace_continues():
    tracker = ToolCallTracker()
    tracker.append("c1", "ab")
    tracker.append("c1", "cd")
    assert tracker.replace("c1", "abcdef") == {"outputDelta": "ef"}


def test_settle_cancels_or_declines_every_unfinished_call_once():
    tracker = ToolCallTracker()
    tracker.replace("a", "x")
    tracker.observe("b")
    tracker.append("c", "y")
    tracker.append("d", "z")
    tracker.mark_final("d")
    assert tracker.settle({"b", "unseen"}) == [
        ("a", {"status": "cancelled"}),
        ("b", {"status": "declined"}),
        ("c", {"status": "cancelled"}),
    ]
    assert tracker.settle() == []
    assert tracker.replace("a", "x more") is None
    assert tracker.append("d", "more") is None
    assert tracker.output("a") == {"text": "x"}


def test_settle_updates_fold_to_final_states():
    tracker = ToolCallTracker()
    state = fold(None, tracker.replace("c1", "out"))
    for call_id, fields in tracker.settle(["c1"]):
        assert call_id == "c1"
        state = fold(state, fields)
    assert state == {**IDS, "output": {"text": "out"}, "status": "declined"}


# ---------------------------------------------------------------- storage


def test_to_json_round_trips_through_json_text():
    tracker = ToolCallTracker()
    tracker.replace("a", "x" * 20000)
    tracker.append("b", "\u00e9")
    tracker.observe("c")
    tracker.mark_final("c")
    data = json.loads(json.dumps(tracker.to_json(), ensure_ascii=False))
    assert data == {
        "calls": [
            {
                "toolCallId": "a",
                "rawLength": 20000,
                "rawSha1": sha1("x" * 20000),
                "output": bound_tool_output("x" * 20000),
                "final": False,
            },
            {
                "toolCallId": "b",
                "rawLength": 1,
                "rawSha1": sha1("\u00e9"),
                "output": {"text": "\u00e9"},
                "final": False,
            },
            {
                "toolCallId": "c",
                "rawLength": 0,
                "rawSha1": EMPTY_SHA1,
                "output": None,
                "final": True,
            },
        ]
    }
    restored = ToolCallTracker.from_json(data)
    assert restored.to_json() == data
    assert restored.replace("a", "x" * 20000 + "y") == {"outputDelta": "y"}
    assert restored.output("a") == bound_tool_output("x" * 20000 + "y")
    assert restored.settle() == [("a", {"status": "cancelled"}), ("b", {"status": "cancelled"})]


def test_append_after_restore_forgets_the_hash_and_the_next_resend_resets():
    tracker = ToolCallTracker()
    tracker.replace("a", "abc")
    restored = ToolCallTracker.from_json(json.loads(json.dumps(tracker.to_json())))
    assert restored.append("a", "def") == {"outputDelta": "def"}
    assert restored.memory("a") == {"rawLength": 6, "rawSha1": "", "output": {"text": "abcdef"}}
    assert restored.replace("a", "abcdefg") == {"output": {"text": "abcdefg"}}
    assert restored.replace("a", "abcdefgh") == {"outputDelta": "h"}


def test_single_call_helpers_carry_memory_between_processes():
    memory, fields = track_replace(None, "one\n")
    assert fields == {"outputDelta": "one\n"}
    stored = json.loads(json.dumps(memory))
    memory2, fields = track_replace(stored, "one\ntwo\n")
    assert fields == {"outputDelta": "two\n"}
    assert stored == memory  # not modified
    assert memory2 == {
        "rawLength": 8,
        "rawSha1": sha1("one\ntwo\n"),
        "output": {"text": "one\ntwo\n"},
    }
    memory3, fields = track_replace(memory2, "ONE\n")
    assert fields == {"output": {"text": "ONE\n"}}
    assert memory3["rawLength"] == 4


def test_single_call_append():
    memory, fields = track_append(None, "ab")
    assert fields == {"outputDelta": "ab"}
    assert memory["rawSha1"] == sha1("ab")
    memory, fields = track_append(memory, "cd")
    assert fields == {"outputDelta": "cd"}
    assert memory["rawSha1"] == ""  # a stored digest cannot be extended
    assert memory["output"] == {"text": "abcd"}
    memory, fields = track_append(memory, "")
    assert fields is None


def test_an_empty_stored_hash_with_nothing_sent_still_extends():
    memory = {"rawLength": 0, "rawSha1": "", "output": None}
    assert track_replace(memory, "abc")[1] == {"outputDelta": "abc"}


# ---------------------------------------------------------------- properties


texts = st.text(st.characters(exclude_categories=()), max_size=60)


@st.composite
def host_sends(draw):
    """What a host sends for one call: growing resends, rewrites, appends, some big."""
    sent = ""
    steps = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["extend", "extend", "rewrite", "append", "big"]))
        if kind == "extend":
            sent += draw(texts)
            steps.append(("replace", sent))
        elif kind == "rewrite":
            sent = draw(texts)
            steps.append(("replace", sent))
        elif kind == "append":
            delta = draw(texts)
            sent += delta
            steps.append(("append", delta))
        else:
            sent += draw(texts) * draw(st.integers(100, 3000))
            steps.append(("replace", sent))
    return steps, sent


@PROPERTY
@given(host_sends(), st.booleans())
def test_folding_what_the_tracker_yields_gives_the_bound_of_the_raw_text(plan, restore):
    steps, sent = plan
    tracker = ToolCallTracker()
    state = None
    for action, text in steps:
        fields = getattr(tracker, action)("c1", text)
        state = fold(state, fields)
        if restore:
            tracker = ToolCallTracker.from_json(json.loads(json.dumps(tracker.to_json())))
        assert tracker.output("c1") == (state or {}).get("output")
    if sent:
        assert state["output"] == bound_tool_output(sent)
    memory = tracker.memory("c1")
    assert memory["rawLength"] == len(sent)
    assert memory["rawSha1"] in (sha1(sent), "")


@PROPERTY
@given(host_sends())
def test_the_single_call_helpers_agree_with_the_tracker(plan):
    steps, _ = plan
    tracker = ToolCallTracker()
    memory = None
    for action, text in steps:
        expected = getattr(tracker, action)("c1", text)
        helper = track_replace if action == "replace" else track_append
        memory, fields = helper(memory, text)
        assert fields == expected or (action == "replace" and "output" in fields)
        assert memory["output"] == tracker.output("c1")


# ---------------------------------------------------------------- cost


def test_a_resend_hashes_each_code_point_once(monkeypatch):
    # Count the code points encoded and hashed rather than time them: deterministic.
    encoded = []
    real_encode = tracker_module._encode
    monkeypatch.setattr(
        tracker_module, "_encode", lambda s: encoded.append(len(s)) or real_encode(s)
    )
    line = "2026-11-29 12:00:01 INFO step \u00e9 done\n"
    text = line * (600_000 // len(line))
    step = 10 * 1024
    memory = None
    for end in range(step, len(text), step):
        encoded.clear()
        memory, fields = track_replace(memory, text[:end])
        assert fields == {"outputDelta": text[end - step : end]}
        assert sum(encoded) == end  # the known prefix once, the new part once
    assert memory["output"] == bound_tool_output(text[:end])
