// Runs every case of tests/projections/vectors/fold.json through static/toolcore/fold.js in
// Node (tests/projections/test_fold_js.py). Prints one JSON line: {"passed", "failures"}.
"use strict";
const fs = require("fs");
const path = require("path");

const root = path.resolve(__dirname, "..", "..");
const fold = require(path.join(root, "static", "toolcore", "fold.js"));
const vectors = JSON.parse(
  fs.readFileSync(path.join(__dirname, "vectors", "fold.json"), "utf-8"),
);

// JSON values compared as values: key order does not matter.
function same(a, b) {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  return ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && same(a[k], b[k]));
}

function runCase(c) {
  let state = null;
  for (let i = 0; i < c.steps.length; i++) {
    const step = c.steps[i];
    const before = JSON.stringify(state);
    if ("error" in step) {
      let refused = null;
      try {
        fold.applyToolUpdate(state, step.update);
      } catch (e) {
        refused = e;
      }
      if (!(refused instanceof fold.ToolUpdateError)) return `step ${i + 1}: not refused`;
      if (refused.field !== step.error.field) return `step ${i + 1}: field ${refused.field}`;
      if (JSON.stringify(state) !== before) return `step ${i + 1}: state changed on refusal`;
      continue;
    }
    const next = fold.applyToolUpdate(state, step.update);
    if (JSON.stringify(state) !== before) return `step ${i + 1}: prev modified`;
    if (next === state) return `step ${i + 1}: prev returned`;
    if ("outputDelta" in next) return `step ${i + 1}: outputDelta held`;
    if (!same(next, step.expect)) {
      return `step ${i + 1}: got ${JSON.stringify(next).slice(0, 300)}`;
    }
    state = next;
  }
  return null;
}

const failures = [];
let passed = 0;
for (const c of vectors.cases) {
  const problem = runCase(c);
  if (problem === null) passed++;
  else failures.push({ name: c.name, problem });
}
process.stdout.write(JSON.stringify({ passed, failures }) + "\n");
process.exit(failures.length ? 1 : 0);
