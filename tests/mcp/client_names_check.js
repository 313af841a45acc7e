// Runs static/toolcore/common.js in Node for tests/mcp/test_client_pages.py: reads
// {"pattern": MCP_TOOL_NAME's source, "names": [...]} on stdin and prints what the cards read of
// each name (Toolcore.mcpTool: {server, tool} or null), the pattern given as a page gives it.
"use strict";
const path = require("path");

const root = path.resolve(__dirname, "..", "..");
const { Toolcore } = require(path.join(root, "static", "toolcore", "common.js"));

let input = "";
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => {
  const { pattern, names } = JSON.parse(input);
  const config = { textContent: JSON.stringify({ mcpToolName: pattern }) };
  global.document = { getElementById: (id) => (id === "toolcore-config" ? config : null) };
  process.stdout.write(JSON.stringify(names.map((name) => Toolcore.mcpTool(name))));
});
