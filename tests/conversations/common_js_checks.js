// Runs static/toolcore/common.js in Node for tests/conversations/test_common_js.py: reads
// {"durations": [ms…], "times": [iso…]} on stdin and prints one JSON object with what the
// script shows for each, and the story of two reconnecting sockets (a fake WebSocket and a
// fake setTimeout: nothing touches the network or waits).
"use strict";
const path = require("path");

const root = path.resolve(__dirname, "..", "..");
const { Toolcore } = require(path.join(root, "static", "toolcore", "common.js"));

// --- a socket's story ---------------------------------------------------------------------------

class FakeWebSocket {
  constructor(url) {
    this.url = url;
    this.readyState = FakeWebSocket.OPEN;
    this.listeners = {};
    FakeWebSocket.made.push(this);
  }
  addEventListener(type, listener) {
    (this.listeners[type] = this.listeners[type] || []).push(listener);
  }
  emit(type, event) {
    for (const listener of this.listeners[type] || []) listener(event);
  }
  receive(frame) {
    this.emit("message", { data: JSON.stringify(frame) });
  }
  drop(code) {
    this.readyState = 3;
    this.emit("close", { code: code || 1006 });
  }
  close() {
    this.drop(1000);
  }
}
FakeWebSocket.OPEN = 1;
FakeWebSocket.made = [];

const timers = [];
global.WebSocket = FakeWebSocket;
global.location = { protocol: "http:", host: "toolcore.test" };
global.setTimeout = (fn, delay) => {
  timers.push({ fn, delay });
  return timers.length;
};

/* Connect, go live, drop, fail once before live, go live again, drop: what the page sees. */
function story(socketPath, liveFrame, options) {
  FakeWebSocket.made = [];
  timers.length = 0;
  const log = [];
  const socket = new Toolcore.Socket(
    socketPath,
    {
      onState: (state) => log.push(`state ${state}`),
      onOpen: () => log.push("open"),
      onFrame: (frame) => log.push(`frame ${frame.type}`),
    },
    options,
  );
  const next = () => {
    const timer = timers.shift();
    log.push(`retry after ${timer.delay} ms`);
    timer.fn();
    return FakeWebSocket.made[FakeWebSocket.made.length - 1];
  };
  socket.start();
  let ws = FakeWebSocket.made[0];
  log.push(`url ${ws.url}`);
  ws.receive(liveFrame);
  ws.receive({ type: "launch.changed" });
  ws.drop();
  ws = next();
  ws.drop(); // fails before it is live: the delay grows
  ws = next();
  ws.receive(liveFrame); // live again: the delay starts over
  ws.drop();
  next().drop(4401); // the session ended: no retry
  log.push(`timers left ${timers.length}`);
  return log;
}

// --- main -------------------------------------------------------------------------------------

let input = "";
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => {
  const asked = JSON.parse(input);
  const out = {
    durations: asked.durations.map((ms) => Toolcore.duration(ms)),
    elapsed: asked.durations.map((ms) => Toolcore.duration(ms, { wholeSeconds: true })),
    utc: asked.times.map((iso) => Toolcore.utcText(iso)),
    local: asked.times.map((iso) => Toolcore.localText(iso)),
    workbench: story("/ws/workbench/", { type: "snapshot", launches: [] }, { liveOn: "snapshot" }),
    conversations: story("/ws/conversations/", { type: "hello", protocolVersion: 1 }),
  };
  process.stdout.write(JSON.stringify(out));
});
