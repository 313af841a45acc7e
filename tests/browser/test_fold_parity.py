"""The pages' fold in Chromium: static/toolcore/fold.js as the browser loads it passes every
vector of tests/projections/vectors/fold.json and bounds outputs as Python does (the same
checks tests/projections/test_fold_js.py makes in Node)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.projections.fold_cases import check_outputs, output_cases

pytestmark = pytest.mark.browser

VECTORS = json.loads(
    (Path(__file__).parents[1] / "projections" / "vectors" / "fold.json").read_text("utf-8")
)

RUN_VECTORS = """(vectors) => {
  const fold = window.Toolcore.fold;
  const same = (a, b) => {
    if (a === b) return true;
    if (typeof a !== "object" || typeof b !== "object" || !a || !b) return false;
    if (Array.isArray(a) !== Array.isArray(b)) return false;
    const ka = Object.keys(a), kb = Object.keys(b);
    return ka.length === kb.length && ka.every((k) => k in b && same(a[k], b[k]));
  };
  const failures = [];
  for (const c of vectors.cases) {
    let state = null;
    c.steps.forEach((step, i) => {
      const before = JSON.stringify(state);
      if ("error" in step) {
        try {
          fold.applyToolUpdate(state, step.update);
          failures.push(`${c.name}: step ${i + 1} not refused`);
        } catch (e) {
          if (e.field !== step.error.field) failures.push(`${c.name}: step ${i + 1} field ${e.field}`);
        }
        if (JSON.stringify(state) !== before) failures.push(`${c.name}: step ${i + 1} changed`);
        return;
      }
      const next = fold.applyToolUpdate(state, step.update);
      if (JSON.stringify(state) !== before) failures.push(`${c.name}: step ${i + 1} prev modified`);
      if (!same(next, step.expect)) failures.push(`${c.name}: step ${i + 1} ${JSON.stringify(next).slice(0, 200)}`);
      state = next;
    });
  }
  return failures;
}"""

RUN_OUTPUTS = """(sent) => {
  const fold = window.Toolcore.fold;
  const answer = { bound: [], streamed: [], rendered: [], sizes: sent.sizes.map(fold.sizeWords) };
  for (const c of sent.cases) {
    const bound = fold.boundToolOutput(c.text);
    let streamed = null;
    for (const chunk of c.chunks) streamed = fold.appendToolOutput(streamed, chunk);
    answer.bound.push(bound);
    answer.streamed.push(streamed);
    answer.rendered.push(fold.renderToolOutput(bound));
  }
  return JSON.stringify(answer);
}"""


@pytest.fixture
def fold_page(page):
    page.goto("/accounts/login/")
    page.add_script_tag(url="/static/toolcore/fold.js")
    return page


def test_the_browser_fold_passes_every_vector(fold_page):
    assert fold_page.evaluate(RUN_VECTORS, VECTORS) == []


def test_the_browser_bounded_output_is_the_python_one(fold_page):
    sent = output_cases()
    # JSON text both ways: lone surrogates travel as \\uXXXX escapes, as the wire carries them.
    answer = fold_page.evaluate(f"(text) => ({RUN_OUTPUTS})(JSON.parse(text))", json.dumps(sent))
    check_outputs(sent, json.loads(answer))
