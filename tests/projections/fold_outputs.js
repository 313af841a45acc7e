// Bounds, streams and renders the texts Python sends on stdin with static/toolcore/fold.js
// (tests/projections/test_fold_js.py compares the answers with projections/tool_output.py).
// In: {"cases": [{"text", "chunks"}], "sizes": [n]}. Out: {"bound", "streamed", "rendered", "sizes"}.
"use strict";
const path = require("path");

const fold = require(path.resolve(__dirname, "..", "..", "static", "toolcore", "fold.js"));

let input = "";
process.stdin.setEncoding("utf-8");
process.stdin.on("data", (chunk) => {
  input += chunk;
});
process.stdin.on("end", () => {
  const { cases, sizes } = JSON.parse(input);
  const answer = { bound: [], streamed: [], rendered: [], sizes: sizes.map(fold.sizeWords) };
  for (const c of cases) {
    const bound = fold.boundToolOutput(c.text);
    let streamed = null;
    for (const chunk of c.chunks) streamed = fold.appendToolOutput(streamed, chunk);
    answer.bound.push(bound);
    answer.streamed.push(streamed);
    answer.rendered.push(fold.renderToolOutput(bound));
  }
  process.stdout.write(JSON.stringify(answer));
});
