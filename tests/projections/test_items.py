"""Item results streamed (projections/items.py): what an ``ItemCollector`` keeps of a stream is
enough for exactly the projection, and the card, of the whole stream, and never grows with it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.items import NOTE_MAX_BYTES, ItemCollector, project_items
from projections.profiles import PROFILES, Profile
from projections.transcript import project_transcript

PATH = "/data/conversations/c1/tool-calls/k1/g1/result.json"
# Small budgets, so that a few items pass them in every way (lines, bytes, items).
TINY = Profile("tiny", 6, 120, 4, 6, 160, 4, "item_aware")
UNCAPPED = Profile("uncapped", 8, 200, None, 8, 260, None, "item_aware")

_ITEM = st.one_of(
    st.text(alphabet="ab/é€\n", max_size=30),
    st.text(alphabet="xy", min_size=60, max_size=200),
    st.sampled_from(["", "d/", "f", "€" * 40]),
)


def _collected(items, profile, path=PATH, noun="entries") -> ItemCollector:
    collector = ItemCollector(profile=profile, path=path, noun=noun)
    for item in items:
        collector.add(item)
    return collector


@settings(max_examples=400, deadline=None)
@given(
    items=st.lists(_ITEM, max_size=140),
    profile=st.sampled_from([TINY, UNCAPPED, PROFILES["file_listing"], PROFILES["search_matches"]]),
    note=st.one_of(st.none(), st.text(alphabet="n .", min_size=1, max_size=NOTE_MAX_BYTES + 20)),
    path=st.sampled_from([PATH, "/r.json", "/" + "p" * 300 + "/result.json"]),
    noun=st.sampled_from(["entries", "matches"]),
)
def test_the_kept_items_project_exactly_as_the_whole_stream(items, profile, note, path, noun):
    collector = _collected(items, profile, path, noun)
    assert collector.count == len(items)
    kept = collector.items
    rest = iter(items)
    assert all(any(k == item for item in rest) for k in kept)  # a subsequence, in order
    whole = project_items(items, profile=profile, path=path, noun=noun, note=note)
    streamed = project_items(
        kept, profile=profile, path=path, noun=noun, count=collector.count, note=note
    )
    assert streamed == whole


@settings(max_examples=200, deadline=None)
@given(
    items=st.lists(st.sampled_from(["a", "b/", "c" * 50, "d/" * 20, "e\nf"]), max_size=120),
    tool=st.sampled_from(["ls", "find", "grep"]),
)
def test_the_kept_items_give_the_card_of_the_whole_stream(items, tool):
    """``ls`` shows directories first: the first directories and the first other entries of
    the whole are among the kept ones."""
    collector = _collected(items, PROFILES["file_listing"])
    whole = project_transcript(tool_name=tool, arguments={}, result_items=items)
    streamed = project_transcript(
        tool_name=tool, arguments={}, result_items=collector.items, result_count=collector.count
    )
    assert streamed == whole


def test_what_is_kept_does_not_grow_with_the_stream():
    for profile in (PROFILES["file_listing"], PROFILES["search_matches"], UNCAPPED):
        collector = ItemCollector(profile=profile, path=PATH, noun="matches")
        for n in range(200_000):
            collector.add(f"src/f{n % 97}.py:{n}:{'x' * (n % 300)}")
        assert collector.count == 200_000
        assert len(collector.items) < 400
        assert sum(len(item) for item in collector.items) < 40 * profile.overflow_bytes


def test_a_stream_of_150_entries_projects_as_the_spec_says():
    entries = [f"e{n:03}" for n in range(150)]
    collector = _collected(entries, PROFILES["file_listing"])
    text = project_items(
        collector.items, profile="file_listing", path=PATH, noun="entries", count=150
    )
    assert text == "\n".join(
        [*entries[:119], f"Showing 119 of 150 entries; 31 omitted. Full result: {PATH}."]
    )


def test_a_note_closes_the_answer_inline_and_stands_before_the_footer_otherwise():
    note = "(Stopped at the 30 s time limit after 7 entries; 3 entries matched so far.)"
    inline = project_items(["a", "b"], profile="file_listing", path=PATH, noun="entries", note=note)
    assert inline == f"a\nb\n{note}"
    many = [f"e{n}" for n in range(200)]
    text = project_items(many, profile="file_listing", path=PATH, noun="entries", note=note)
    assert text.split("\n")[-2:] == [
        note,
        f"Showing 118 of 200 entries; 82 omitted. Full result: {PATH}.",
    ]
    long = project_items(
        many, profile="file_listing", path=PATH, noun="entries", note="n" * 1000 + "\nx"
    )
    assert long.split("\n")[-2] == "n" * (NOTE_MAX_BYTES - 3) + "…"
