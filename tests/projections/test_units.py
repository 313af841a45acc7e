"""Shared units: bounded reasons cut on a code point."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from projections.units import ELLIPSIS, REASON_MAX_BYTES, cut_text


def test_short_text_is_kept_whole():
    assert cut_text("bad path") == "bad path"
    assert cut_text("x" * REASON_MAX_BYTES) == "x" * REASON_MAX_BYTES


def test_long_text_is_cut_with_an_ellipsis_within_the_budget():
    cut = cut_text("x" * 900_000)
    assert cut == "x" * (REASON_MAX_BYTES - 3) + ELLIPSIS
    assert len(cut.encode()) == REASON_MAX_BYTES


def test_cut_never_splits_a_code_point():
    # 2-byte é: 1021 bytes of room hold 510 of them (1020 bytes), then the ellipsis.
    assert cut_text("é" * 600) == "é" * 510 + ELLIPSIS


@given(st.text(), st.integers(min_value=3, max_value=64))
def test_budget_never_exceeded_and_prefix_kept(text, budget):
    cut = cut_text(text, budget)
    assert len(cut.encode("utf-8", "surrogatepass")) <= budget
    if cut != text:
        assert cut.endswith(ELLIPSIS)
        assert text.startswith(cut[: -len(ELLIPSIS)])
