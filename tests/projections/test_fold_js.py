"""static/toolcore/fold.js, the browser's port of the fold, against the Python one in Node.

The pages fold ``tool.updated`` with a JavaScript port of ``apply_tool_update``
(docs/web.md): it must pass every vector of vectors/fold.json, and bound, stream and render
outputs exactly as projections/tool_output.py does, costs per code point included (JavaScript
strings are UTF-16). The browser tests run the vectors again in Chromium
(tests/browser/test_fold_parity.py). Skipped, saying why, where Node is not installed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from .fold_cases import check_outputs, output_cases

HERE = Path(__file__).parent
NODE = shutil.which("node") or shutil.which("nodejs")
VECTORS = json.loads((HERE / "vectors" / "fold.json").read_text("utf-8"))

pytestmark = pytest.mark.skipif(
    NODE is None, reason="Node.js not found: the JS fold port is checked by the browser tests only"
)


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
    cases = output_cases()
    done = _node("fold_outputs.js", json.dumps(cases))
    assert done.returncode == 0, done.stderr
    check_outputs(cases, json.loads(done.stdout))
