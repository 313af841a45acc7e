"""Texts for checking a port of the bounded output (static/toolcore/fold.js) against
projections/tool_output.py: the Node test and the browser test send the same cases."""

from __future__ import annotations

import random
from typing import Any

from projections.tool_output import append_tool_output, bound_tool_output, render_tool_output
from projections.units import size_words

# Code points of every cost class: ASCII, escapes (short and \u00XX), 2, 3 and 4 UTF-8 bytes,
# and lone surrogates (cost 6), never a high one right before a low one (JSON would pair them).
ALPHABET = ["a", "b", " ", "\n", "\t", '"', "\\", "\x01", "\x1f", "é", "ж", "€", "中", "😀", "𝄞"]
LONE = ["\ud800", "\udfff"]


def _text(rng: random.Random, size: int) -> str:
    parts = []
    for _ in range(size):
        if rng.random() < 0.01:
            parts.append(rng.choice(LONE) + "x")
        else:
            parts.append(rng.choice(ALPHABET) if rng.random() < 0.5 else "a")
    return "".join(parts)


def _chunks(rng: random.Random, text: str) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(0, 40))))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if a < b]


def output_cases(seed: int = 20261129) -> dict[str, Any]:
    """``{"cases": [{"text", "chunks"}], "sizes": [n]}``: texts of every cost class around the
    cut (whole at 16,320 JSON bytes, cut above), split in random chunks, and byte counts for
    ``size_words`` around its unit and rounding edges."""
    rng = random.Random(seed)
    lengths = [0, 10, 5000, 16320, 16321, 20000, 60000]
    texts = [_text(rng, n) for n in lengths] + [
        _text(rng, rng.randint(1, 50000)) for _ in range(25)
    ]
    texts += ["a" * 16320, "a" * 16321, "\n" * 8160 + "x", "😀" * 5000, '"' * 9000]
    cases = [{"text": t, "chunks": _chunks(rng, t) if t else []} for t in texts]
    sizes = [0, 1, 2, 1023, 1024, 1075, 1076, 10239, 1048575, 1048576, 1101004, 7 * 1048576 + 52428]
    sizes += [rng.randint(0, 1 << 34) for _ in range(200)]
    return {"cases": cases, "sizes": sizes}


def check_outputs(sent: dict[str, Any], answer: dict[str, Any]) -> None:
    """Asserts the port's ``{bound, streamed, rendered, sizes}`` are Python's, case by case."""
    for case, bound, streamed, rendered in zip(
        sent["cases"], answer["bound"], answer["streamed"], answer["rendered"], strict=True
    ):
        expect = bound_tool_output(case["text"])
        assert bound == expect
        assert rendered == render_tool_output(expect)
        python_streamed = None
        for chunk in case["chunks"]:
            python_streamed = append_tool_output(python_streamed, chunk)
        assert streamed == python_streamed
    assert answer["sizes"] == [size_words(n) for n in sent["sizes"]]
