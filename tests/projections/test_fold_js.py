"""static/toolcore/fold.js, the browser's port of the fold, against the Python one in Node.

The pages fold ``tool.updated`` with a JavaScript port of ``apply_tool_update``
(docs/web.md): it must pass every vector of vectors/fold.json, and bound, stream and render
outputs exactly as projections/tool_output.py does, costs per code point included (JavaScript
strings are UTF-16). The browser tests run the vectors again in Chromium
(tests/browser/test_fold_parity.py). Skipped, saying why, where Node is not installed.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from projections.tool_output import append_tool_output, bound_tool_output, render_tool_output
from projections.units import size_words

HERE = Path(__file__).parent
NODE = shutil.which("node") or shutil.which("nodejs")
VECTORS = json.loads((HERE / "vectors" / "fold.json").read_text("utf-8"))

pytestmark = pytest.mark.skipif(
    NODE is None, reason="Node.js not found: the JS fold port is checked by the browser tests only"
)

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


def _node(script: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [NODE, str(HERE / script)],
        input=stdin,
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="surrogatepass",
        timeout=120,
    )


def test_the_js_fold_passes_every_vector():
    done = _node("fold_vectors.js")
    result = json.loads(done.stdout)
    assert result["failures"] == [], result["failures"]
    assert result["passed"] == len(VECTORS["cases"]) and done.returncode == 0


def test_the_js_bounded_output_is_the_python_one():
    rng = random.Random(20261129)
    sizes = [0, 10, 5000, 16320, 16321, 20000, 60000]
    texts = [_text(rng, size) for size in sizes] + [
        _text(rng, rng.randint(1, 50000)) for _ in range(25)
    ]
    texts += ["a" * 16320, "a" * 16321, "\n" * 8160 + "x", "😀" * 5000, '"' * 9000]
    cases = [{"text": t, "chunks": _chunks(rng, t) if t else []} for t in texts]
    byte_counts = [
        0,
        1,
        2,
        1023,
        1024,
        1075,
        1076,
        10239,
        1048575,
        1048576,
        1101004,
        7 * 1048576 + 52428,
    ]
    byte_counts += [rng.randint(0, 1 << 34) for _ in range(200)]
    stdin = json.dumps({"cases": cases, "sizes": byte_counts})
    done = _node("fold_outputs.js", stdin)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    for case, bound, streamed, rendered in zip(
        cases, answer["bound"], answer["streamed"], answer["rendered"], strict=True
    ):
        expect = bound_tool_output(case["text"])
        assert bound == expect
        assert rendered == render_tool_output(expect)
        python_streamed = None
        for chunk in case["chunks"]:
            python_streamed = append_tool_output(python_streamed, chunk)
        assert streamed == python_streamed
    assert answer["sizes"] == [size_words(n) for n in byte_counts]
