"""Frame budgets (docs/projections.md, "Frame budgets and replay pages")."""

from __future__ import annotations

import functools
import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections import frames
from projections.frames import (
    FRAME_BUDGET_BYTES,
    MAX_ITEMS,
    PAYLOAD_BUDGET_BYTES,
    REPLAY_BUDGET_BYTES,
    REPLAY_MAX_EVENTS,
    frame_page,
    replay_page,
)
from projections.json_cost import json_size
from projections.tool_output import bound_tool_output, shrink_tool_output

PAYLOAD_KEYS = ("input", "inputOmitted", "output")


def test_constants():
    assert MAX_ITEMS == 100
    assert PAYLOAD_BUDGET_BYTES == 262144 == 256 * 1024
    assert FRAME_BUDGET_BYTES == 917504 == 896 * 1024
    assert REPLAY_MAX_EVENTS == 100
    assert REPLAY_BUDGET_BYTES == 524288 == 512 * 1024


# --- helpers -------------------------------------------------------------------------------


def wire_size(value) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def payload(
    input_chars: int, output_chars: int, *, omit_input: bool = False, bounded: bool = False
) -> dict:
    """A stored payload; ``bounded`` makes its output a real (possibly cut) bounded output."""
    out: dict = {"inputOmitted": True} if omit_input else {"input": {"command": "c" * input_chars}}
    text = "o" * output_chars
    out["output"] = bound_tool_output(text) if bounded else {"text": text}
    return out


_BASE = json_size(payload(0, 0))
_BASE_OMITTED = json_size(payload(0, 0, omit_input=True))


@functools.cache
def payload_size(
    input_chars: int, output_chars: int, *, omit_input: bool = False, bounded: bool = False
) -> int:
    if bounded:
        return json_size(payload(input_chars, output_chars, omit_input=omit_input, bounded=True))
    return (_BASE_OMITTED if omit_input else _BASE + input_chars) + output_chars


def output_length(out: dict) -> int:
    return len(out["text"]) + out.get("omittedBytes", 0) + len(out.get("tail", ""))


class Store:
    """Payloads built on demand, and a record of every loader call."""

    def __init__(self):
        self.specs: dict[str, tuple[int, int, bool, bool]] = {}
        self.calls: list[list[str]] = []

    def call(
        self,
        call_id: str,
        input_chars: int,
        output_chars: int,
        omit_input: bool = False,
        bounded: bool = False,
        **extra,
    ):
        self.specs[call_id] = (input_chars, output_chars, omit_input, bounded)
        size = payload_size(input_chars, output_chars, omit_input=omit_input, bounded=bounded)
        record = {
            "tool_call_id": call_id,
            "payload_bytes": size,
            "state": {"type": "tool", "toolCallId": call_id, "status": "completed"},
        }
        record.update(extra)
        return record

    def payload(self, call_id: str) -> dict:
        input_chars, output_chars, omit_input, bounded = self.specs[call_id]
        return payload(input_chars, output_chars, omit_input=omit_input, bounded=bounded)

    def loader(self, ids):
        self.calls.append(list(ids))
        return {i: self.payload(i) for i in ids}


def message(k: int, **extra) -> dict:
    item = {"type": "message", "text": "m" * k}
    return {"item": item, **extra}


def sent_payload(item: dict) -> dict:
    return {k: item[k] for k in PAYLOAD_KEYS if k in item}


# --- payload budget ------------------------------------------------------------------------


def test_first_call_that_does_not_fit_drops_large_input():
    store = Store()
    a = store.call("A", 100, 200_000 - _BASE - 100)
    assert a["payload_bytes"] == 200_000
    records = [a, store.call("B", 40_000, 70_000), store.call("C", 10, 10), message(5)]
    records.append({"tool_call_id": "D", "payload_bytes": 0, "state": {"toolCallId": "D"}})
    page = frame_page(records, loader=store.loader)

    assert store.calls == [["A", "B"]]
    assert page.loaded_ids == ("A", "B")
    a_item, b_item, c_item, m_item, d_item = page.items
    assert a_item == {**a["state"], **store.payload("A")}
    room = PAYLOAD_BUDGET_BYTES - 200_000  # 62144; the input costs 40014 > room // 2
    assert b_item["inputOmitted"] is True and "input" not in b_item
    assert b_item["output"] == shrink_tool_output(store.payload("B")["output"], room - 0 - 64)
    assert b_item["output"]["omittedBytes"] > 0
    assert c_item == {
        **records[2]["state"],
        "payloadOmitted": {"bytes": records[2]["payload_bytes"]},
    }
    assert m_item == {"type": "message", "text": "mmmmm"}
    assert d_item == {"toolCallId": "D"}
    assert page.payload_bytes == 200_000 + json_size(sent_payload(b_item))
    assert page.payload_bytes <= PAYLOAD_BUDGET_BYTES
    assert page.next_cursor is None


def test_first_call_that_does_not_fit_keeps_small_input():
    store = Store()
    records = [store.call("A", 0, 200_000 - _BASE), store.call("B", 1000, 90_000)]
    page = frame_page(records, loader=store.loader)
    b_item = page.items[1]
    room = PAYLOAD_BUDGET_BYTES - 200_000
    assert b_item["input"] == {"command": "c" * 1000}
    assert "inputOmitted" not in b_item
    expected = shrink_tool_output({"text": "o" * 90_000}, room - json_size(b_item["input"]) - 64)
    assert b_item["output"] == expected
    # Head and tail share the room; every dropped byte is counted.
    assert len(expected["text"]) + len(expected["tail"]) + expected["omittedBytes"] == 90_000
    assert json_size(sent_payload(b_item)) <= room


def test_older_small_calls_get_markers_even_when_room_is_left():
    store = Store()
    records = [
        store.call("A", 0, 150_000),
        store.call("B", 0, 150_000),  # does not fit whole: shrunk
        store.call("C", 0, 10),  # would fit the room left, but is older
    ]
    page = frame_page(records, loader=store.loader)
    assert store.calls == [["A", "B"]]
    assert page.items[2]["payloadOmitted"] == {"bytes": records[2]["payload_bytes"]}
    assert "output" not in page.items[2]


def test_all_payloads_fit():
    store = Store()
    records = [store.call(str(i), 10, 1000) for i in range(50)]
    page = frame_page(records, loader=store.loader)
    assert store.calls == [[str(i) for i in range(50)]]
    assert [sent_payload(item) for item in page.items] == [store.payload(str(i)) for i in range(50)]
    assert all("payloadOmitted" not in item for item in page.items)


def test_a_small_room_still_gets_the_specs_cut():
    """100 bytes left: the first call that does not fit is cut to fit them, not skipped."""
    store = Store()
    first = store.call("A", 0, PAYLOAD_BUDGET_BYTES - _BASE - 100)
    records = [first, store.call("B", 0, 5000)]
    page = frame_page(records, loader=store.loader)
    assert store.calls == [["A", "B"]]
    cut = sent_payload(page.items[1])
    assert json_size(cut) <= 100
    assert output_length(cut["output"]) == output_length(store.payload("B")["output"])
    assert page.payload_bytes <= PAYLOAD_BUDGET_BYTES


def test_a_room_too_small_for_any_cut_gives_a_marker_without_loading():
    store = Store()
    first = store.call("A", 0, PAYLOAD_BUDGET_BYTES - _BASE - 30)
    records = [first, store.call("B", 0, 5000)]
    page = frame_page(records, loader=store.loader)
    assert store.calls == [["A"]]
    assert page.items[1]["payloadOmitted"] == {"bytes": records[1]["payload_bytes"]}


def test_stale_payload_bytes_still_within_budget():
    store = Store()
    stale = store.call("A", 10, 100_000)
    stale["payload_bytes"] = 30_000  # the row says less than it holds
    records = [stale, store.call("B", 10, 100_000), store.call("C", 10, 100_000)]
    page = frame_page(records, loader=store.loader)
    sent = [json_size(sent_payload(item)) for item in page.items if "output" in item]
    assert sent[0] <= 30_000
    assert sum(sent) <= page.payload_bytes <= PAYLOAD_BUDGET_BYTES


def test_payload_gone_since_the_records_were_read():
    records = [{"tool_call_id": "A", "payload_bytes": 500, "state": {"toolCallId": "A"}}]
    page = frame_page(records, loader=lambda ids: {})
    assert page.items == [{"toolCallId": "A"}]
    assert page.payload_bytes == 0


# --- frame budget --------------------------------------------------------------------------


def test_oldest_items_move_to_the_next_page():
    records = [message(300_000, cursor=i) for i in range(5)]
    page = frame_page(records, loader=pytest.fail)
    assert len(page.items) == 3
    assert page.next_cursor == 3
    assert page.as_history() == {"items": page.items, "nextCursor": 3}
    assert wire_size(page.as_history()) <= FRAME_BUDGET_BYTES
    assert page.frame_bytes == wire_size(page.as_history())


def test_cursor_bytes_count_in_the_frame():
    overhead = wire_size({"items": [], "nextCursor": None})
    first = 400_000
    second = FRAME_BUDGET_BYTES - overhead - first - 1  # fits exactly while the cursor is null
    records = [
        {"item": {"t": "a" * (first - 8)}, "cursor": "cursor-0"},
        {"item": {"t": "b" * (second - 8)}, "cursor": "cursor-1"},
        {"item": {"t": "c"}, "cursor": "cursor-2"},
    ]
    page = frame_page(records[:2], loader=pytest.fail)
    assert len(page.items) == 2 and page.next_cursor is None
    assert wire_size(page.as_history()) == FRAME_BUDGET_BYTES

    page = frame_page(records, loader=pytest.fail)
    assert len(page.items) == 1
    assert page.next_cursor == "cursor-1"
    assert wire_size(page.as_history()) <= FRAME_BUDGET_BYTES


def test_a_page_always_holds_one_item():
    records = [message(2 * 1024 * 1024, cursor="c0"), message(10, cursor="c1")]
    page = frame_page(records, loader=pytest.fail)
    assert len(page.items) == 1
    assert page.next_cursor == "c1"


def test_limit_and_cursor():
    store = Store()
    records = [store.call(str(i), 0, 10, cursor=i) for i in range(30)]
    page = frame_page(records, loader=store.loader, limit=10)
    assert [item["toolCallId"] for item in page.items] == [str(i) for i in range(10)]
    assert page.next_cursor == 10
    assert store.calls == [[str(i) for i in range(10)]]


@pytest.mark.parametrize("limit", [0, 101, -1])
def test_limit_out_of_range(limit):
    with pytest.raises(ValueError):
        frame_page([], loader=pytest.fail, limit=limit)


def test_empty():
    page = frame_page([], loader=pytest.fail)
    assert page.items == [] and page.next_cursor is None and page.payload_bytes == 0


def test_snapshot_overhead_and_no_cursor():
    store = Store()
    records = [store.call(str(i), 0, 1000) for i in range(100)]
    envelope = {"type": "snapshot", "snapshot": {"conversation": {"title": "t" * 900_000}}}
    overhead = wire_size({**envelope, "tools": []})
    page = frame_page(records, loader=store.loader, frame_overhead_bytes=overhead)
    assert 1 <= len(page.items) < 100
    assert page.next_cursor is None
    assert wire_size({**envelope, "tools": page.items}) <= FRAME_BUDGET_BYTES
    assert store.calls == [[item["toolCallId"] for item in page.items]]


# --- a page out of 10,000 activities -------------------------------------------------------


def mixed_activities(n: int, seed: int = 7):
    rng = random.Random(seed)
    store = Store()
    records = []
    for i in range(n):
        roll = rng.random()
        if roll < 0.3:
            k = (
                rng.choice([50, 500, 5000])
                if rng.random() < 0.97
                else rng.randint(100_000, 400_000)
            )
            records.append(message(k, cursor=i))
        elif roll < 0.35:
            state = {"type": "tool", "toolCallId": str(i), "status": "pending"}
            records.append(
                {"tool_call_id": str(i), "payload_bytes": 0, "state": state, "cursor": i}
            )
        else:
            records.append(
                store.call(
                    str(i),
                    rng.randint(0, 4000),
                    rng.choice([0, 100, 3000, 16_000, 50_000]),
                    omit_input=rng.random() < 0.1,
                    bounded=True,
                    cursor=i,
                )
            )
    return records, store


def check_page(page, records, start, store, calls_before):
    """A page out of ``records[start:]``: in order, within every budget, loads only what it sends."""
    n = len(page.items)
    assert 1 <= n <= MAX_ITEMS
    assert page.next_cursor == (start + n if start + n < len(records) else None)
    assert wire_size(page.as_history()) <= FRAME_BUDGET_BYTES or n == 1
    assert wire_size(page.as_history()) <= page.frame_bytes

    sent_ids = []
    stage = "full"  # full payloads, then at most one shrunk one, then markers
    sent_bytes = 0
    for record, item in zip(records[start : start + n], page.items, strict=True):
        if "item" in record:
            assert item == record["item"]
            continue
        assert item["toolCallId"] == record["tool_call_id"]
        if record["payload_bytes"] == 0:
            assert set(item) == set(record["state"])
            continue
        whole = store.payload(record["tool_call_id"])
        if "payloadOmitted" in item:
            assert item["payloadOmitted"] == {"bytes": record["payload_bytes"]}
            assert not set(PAYLOAD_KEYS) & set(item)
            stage = "omitted"
            continue
        sent_ids.append(record["tool_call_id"])
        sent = sent_payload(item)
        sent_bytes += json_size(sent)
        if sent == whole:
            assert stage == "full", "payloads go in newest first"
            continue
        assert stage == "full", "only one call is shrunk"
        stage = "shrunk"
        # Nothing lost without being counted.
        out, whole_out = item["output"], whole["output"]
        if out != whole_out:  # shrunk: head of the head, end of the tail, the rest counted
            assert whole_out["text"].startswith(out["text"])
            assert (whole_out.get("tail") or whole_out["text"]).endswith(out["tail"])
        assert output_length(out) == output_length(whole_out)
        assert ("input" in item) != bool(item.get("inputOmitted"))
        assert item.get("input", whole.get("input")) == whole.get("input")
    assert sent_bytes <= page.payload_bytes <= PAYLOAD_BUDGET_BYTES
    # The loader ran once, for exactly the calls sent, or not at all.
    assert store.calls[calls_before:] == ([sent_ids] if sent_ids else [])
    assert page.loaded_ids == tuple(sent_ids)


def test_page_from_10000_activities_and_paging_through_all():
    records, store = mixed_activities(10_000)
    start = 0
    pages = 0
    shrunk_or_omitted_pages = 0
    while start < len(records):
        before = len(store.calls)
        page = frame_page(iter(records[start:]), loader=store.loader)
        check_page(page, records, start, store, before)
        if any("payloadOmitted" in item for item in page.items):
            shrunk_or_omitted_pages += 1
        pages += 1
        start = page.next_cursor if page.next_cursor is not None else len(records)
    assert start == len(records)
    assert pages >= 100
    assert shrunk_or_omitted_pages > 10  # the payload budget was really exercised


def test_first_page_of_100_items():
    records, store = mixed_activities(10_000, seed=3)
    # Keep the first 100 small enough for the frame: a full page of 100 items.
    records = [r for r in records if "item" not in r or len(r["item"]["text"]) < 100_000]
    for i, r in enumerate(records):
        r["cursor"] = i
    page = frame_page(records, loader=store.loader)
    assert len(page.items) == 100
    check_page(page, records, 0, store, 0)
    assert len(store.calls) == 1
    assert page.payload_bytes > PAYLOAD_BUDGET_BYTES - 20_000  # filled, newest first


def test_scanning_stops_once_the_page_is_full():
    records, store = mixed_activities(100_000, seed=5)
    taken = 0

    def counting(rs):
        nonlocal taken
        for r in rs:
            taken += 1
            yield r

    page = frame_page(counting(records), loader=store.loader)
    assert taken <= len(page.items) + 1


def test_work_does_not_grow_with_the_history(monkeypatch):
    # Timing lives in bench/projections.py; here the work is counted. Over 1,000 and over
    # 100,000 records a page reads the same records, measures the same values and loads the
    # same payloads: nothing in it depends on the length of the history.
    payloads = [payload(2000, 16_000), payload(100, 100), payload(0, 3000, omit_input=True)]
    measured: list[int] = []
    real_json_size = frames.json_size
    monkeypatch.setattr(frames, "json_size", lambda v: measured.append(1) or real_json_size(v))

    def run(n):
        taken = 0
        loaded = []

        def records():
            nonlocal taken
            for i in range(n):
                taken += 1
                p = payloads[i % 3]
                state = {"type": "tool", "toolCallId": str(i), "status": "completed"}
                yield {
                    "tool_call_id": str(i),
                    "payload_bytes": real_json_size(p),
                    "state": state,
                    "cursor": i,
                }

        def loader(ids):
            loaded.append(list(ids))
            return {i: payloads[int(i) % 3] for i in ids}

        measured.clear()
        page = frame_page(records(), loader=loader)
        return page, taken, loaded, len(measured)

    small, large = run(1_000), run(100_000)
    assert small == large
    page, taken, loaded, _ = large
    assert taken == len(page.items) + 1 == MAX_ITEMS + 1
    assert len(loaded) == 1 and page.next_cursor == MAX_ITEMS


# --- property ------------------------------------------------------------------------------

activity = st.one_of(
    st.tuples(st.just("message"), st.one_of(st.integers(0, 2000), st.integers(100_000, 400_000))),
    st.tuples(
        st.just("call"),
        st.tuples(st.integers(0, 40_000), st.integers(0, 60_000), st.booleans()),
    ),
    st.tuples(st.just("pending"), st.just(0)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(activities=st.lists(activity, max_size=130), limit=st.integers(1, 100))
def test_budgets_never_exceeded(activities, limit):
    store = Store()
    records = []
    for i, (kind, spec) in enumerate(activities):
        if kind == "message":
            records.append(message(spec, cursor=i))
        elif kind == "call":
            records.append(store.call(str(i), spec[0], spec[1], spec[2], cursor=i))
        else:
            state = {"type": "tool", "toolCallId": str(i)}
            records.append(
                {"tool_call_id": str(i), "payload_bytes": 0, "state": state, "cursor": i}
            )
    start = 0
    while start < len(records):
        before = len(store.calls)
        page = frame_page(records[start:], loader=store.loader, limit=limit)
        assert len(page.items) <= limit
        check_page(page, records, start, store, before)
        start = page.next_cursor if page.next_cursor is not None else len(records)
    if not records:
        assert frame_page(records, loader=store.loader).items == []
    assert all(len(call) > 0 for call in store.calls)


# --- replay pages --------------------------------------------------------------------------


def test_replay_first_event_always_goes_in():
    assert replay_page([b"x" * 600_000, b"y"]) == 1
    assert replay_page(["x" * 600_000]) == 1


def test_replay_at_most_100_events():
    assert replay_page([b"{}"] * 150) == 100
    assert replay_page([b"{}"] * 150, max_events=7) == 7
    assert replay_page([b"{}"] * 3) == 3
    assert replay_page([]) == 0


def test_replay_at_most_512_kib():
    assert replay_page([b"x" * 100_000] * 10) == 5
    assert replay_page([b"a" * 524_287, b"b"]) == 2
    assert replay_page([b"a" * 524_287, b"bb"]) == 1
    assert replay_page([b"a" * 10, b"b" * 10, b"c" * 10], budget=25) == 2


def test_replay_counts_utf8_bytes_of_text():
    assert replay_page(["é" * 131_072, "é" * 131_072, "x"]) == 2  # 262,144 bytes each
    assert replay_page(["é" * 131_072, "é" * 131_071, "x"]) == 3


def test_replay_on_encoded_events():
    events = [
        {
            "sequence": i,
            "type": "tool_call_response",
            "turnId": "t",
            "toolCallId": str(i),
            "payload": {"modelContent": "é" * 20_000},
            "createdAt": "2026-11-29T18:00:00.000Z",
        }
        for i in range(1, 40)
    ]
    encoded = [json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in events]
    count = replay_page(encoded)
    sizes = [len(e.encode()) for e in encoded]
    assert sum(sizes[:count]) <= REPLAY_BUDGET_BYTES < sum(sizes[: count + 1])
    assert replay_page([e.encode() for e in encoded]) == count


def test_replay_reads_lazily():
    taken = 0

    def events():
        nonlocal taken
        for _ in range(1000):
            taken += 1
            yield b"{}"

    assert replay_page(events()) == 100
    assert taken == 101


def test_replay_max_events_must_be_positive():
    with pytest.raises(ValueError):
        replay_page([b"{}"], max_events=0)


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 300_000), max_size=150),
    max_events=st.integers(1, 100),
)
def test_replay_page_is_the_longest_prefix_that_fits(sizes, max_events):
    events = [b"x" * s for s in sizes]
    count = replay_page(events, max_events=max_events)
    if not sizes:
        assert count == 0
        return
    assert 1 <= count <= max_events
    assert count == 1 or sum(sizes[:count]) <= REPLAY_BUDGET_BYTES
    assert (
        count == len(sizes) or count == max_events or sum(sizes[: count + 1]) > REPLAY_BUDGET_BYTES
    )
