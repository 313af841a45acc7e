/*
 * What every page's script shares: the page's configuration, the REST API with the session
 * (CSRF header on writes), DOM helpers that only ever set text, times and durations, and a
 * websocket that reconnects and says so. The admin loads it too, for the times' hover form.
 */
(function (root) {
  "use strict";
  const Toolcore = (root.Toolcore = root.Toolcore || {});

  function config() {
    const node = document.getElementById("toolcore-config");
    return node ? JSON.parse(node.textContent) : {};
  }

  function cookie(name) {
    for (const part of document.cookie.split(";")) {
      const [key, ...rest] = part.trim().split("=");
      if (key === name) return decodeURIComponent(rest.join("="));
    }
    return "";
  }

  class ApiError extends Error {
    constructor(status, body) {
      const error = (body && body.error) || {};
      super(error.message || `The server answered ${status}.`);
      this.status = status;
      this.code = error.code || "http_" + status;
      this.field = error.field;
    }
  }

  /* fetch under /api/v1 with the session: JSON in and out, errors as ApiError. */
  async function api(path, options) {
    const opts = Object.assign({ method: "GET" }, options || {});
    const headers = { Accept: "application/json" };
    if (opts.body !== undefined) headers["Content-Type"] = "application/json";
    if (opts.method !== "GET") headers["X-CSRFToken"] = cookie("csrftoken");
    const response = await fetch(config().api + path, {
      method: opts.method,
      headers,
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
      credentials: "same-origin",
    });
    const text = await response.text();
    let body = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch (_) {
      if (response.ok) throw new ApiError(response.status, null); // not the API's JSON
    }
    if (!response.ok) throw new ApiError(response.status, body);
    return body;
  }

  /* An element with attributes and children; strings become text nodes, never HTML. */
  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key === "hidden") node.hidden = Boolean(value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  function pad(n) {
    return String(n).padStart(2, "0");
  }

  /*
   * Times (docs/web.md, "Times"): shown in UTC with seconds and the zone, the same for every
   * reader ("2026-11-29 18:43:01 UTC", as the server's `when` writes it); on hover, the reader's
   * local time and zone ("2026-11-29 13:43:01 EST, your time (America/New_York)").
   */
  function utcText(iso) {
    const d = new Date(iso);
    if (!iso || Number.isNaN(d.getTime())) return "—";
    const date = `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}`;
    return `${date} ${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())} UTC`;
  }

  function localText(iso) {
    const d = new Date(iso);
    if (!iso || Number.isNaN(d.getTime())) return "";
    const format = new Intl.DateTimeFormat("en-US", {
      year: "numeric",
      month: "2-digit",
      day: "2-digit",
      hour: "2-digit",
      minute: "2-digit",
      second: "2-digit",
      hourCycle: "h23",
      timeZoneName: "short",
    });
    const part = {};
    for (const { type, value } of format.formatToParts(d)) part[type] = value;
    const zone = format.resolvedOptions().timeZone;
    const shown = `${part.year}-${part.month}-${part.day} ${part.hour}:${part.minute}:${part.second} ${part.timeZoneName}`;
    return zone ? `${shown}, your time (${zone})` : `${shown}, your time`;
  }

  /* A <time> showing `iso` in UTC, the reader's local time on hover. */
  function timeNode(iso) {
    if (!iso) return null;
    return h("time", { datetime: iso, title: localText(iso) || null }, utcText(iso));
  }

  /* The hover form for the times the server wrote (`when`): each <time> without a title. */
  function localizeTimes(root) {
    for (const node of root.querySelectorAll("time[datetime]:not([title])")) {
      const local = localText(node.getAttribute("datetime"));
      if (local) node.title = local;
    }
  }

  /*
   * "23 ms", "4.2 s", "42 s", "3 min 5 s", "2 h 10 min", "3 d 4 h" from milliseconds, each part
   * cut, never rounded up: conversations/times.py's duration_text (tested against it).
   * `wholeSeconds` counts in seconds from 0 ("0 s", "7 s"): a clock that ticks every second.
   */
  function duration(ms, options) {
    const millis = Math.max(0, Math.floor(ms));
    const whole = options && options.wholeSeconds;
    if (!whole && millis < 1000) return `${millis} ms`;
    if (!whole && millis < 10000) return `${Math.floor(millis / 1000)}.${Math.floor((millis % 1000) / 100)} s`;
    const s = Math.floor(millis / 1000);
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
    return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
  }

  function requestId() {
    if (root.crypto && root.crypto.randomUUID) return root.crypto.randomUUID();
    return `r-${Date.now()}-${Math.random().toString(16).slice(2)}`;
  }

  const FIRST_DELAY_MS = 500;
  const LAST_DELAY_MS = 10000;

  /*
   * A websocket that reconnects: `onOpen()` once the server's first frame says the socket is
   * live (subscribe there), `onFrame(frame)` for each frame, `onState(state)` with
   * "connecting", "open", "reconnecting" or "closed" (4401: the session ended; no retry).
   * Retries back off from half a second to ten, and start again from half a second once a
   * connection is live.
   *
   * What says "live" is the socket's first frame (docs/realtime.md): `hello` on
   * /ws/conversations/ (not passed to `onFrame`), the `snapshot` on /ws/workbench/ (passed on:
   * it is the page's start). `options.liveOn` names it; "hello" by default.
   */
  class Socket {
    constructor(path, handlers, options) {
      this.path = path;
      this.handlers = handlers;
      this.liveOn = (options && options.liveOn) || "hello";
      this.delay = FIRST_DELAY_MS;
      this.ws = null;
      this.live = false;
      this.stopped = false;
      this.timer = null;
    }

    url() {
      const scheme = location.protocol === "https:" ? "wss:" : "ws:";
      return `${scheme}//${location.host}${this.path}`;
    }

    start() {
      this.stopped = false;
      this.handlers.onState(this.ws ? "reconnecting" : "connecting");
      const ws = new WebSocket(this.url());
      this.ws = ws;
      this.live = false;
      ws.addEventListener("message", (event) => {
        if (ws !== this.ws) return;
        let frame;
        try {
          frame = JSON.parse(event.data);
        } catch (_) {
          return;
        }
        if (!this.live && frame.type === this.liveOn) {
          this.live = true;
          this.delay = FIRST_DELAY_MS;
          this.handlers.onState("open");
          this.handlers.onOpen();
        }
        if (frame.type !== "hello") this.handlers.onFrame(frame);
      });
      ws.addEventListener("close", (event) => {
        if (ws !== this.ws) return;
        if (event.code === 4401) {
          this.stopped = true;
          this.handlers.onState("closed");
          return;
        }
        if (this.stopped) return;
        this.handlers.onState("reconnecting");
        this.timer = setTimeout(() => this.start(), this.delay);
        this.delay = Math.min(this.delay * 2, LAST_DELAY_MS);
      });
    }

    send(frame) {
      if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return false;
      this.ws.send(JSON.stringify(frame));
      return true;
    }

    /* Drops the connection as a network failure would (the tests use it); it reconnects. */
    drop() {
      if (this.ws) this.ws.close();
    }
  }

  /* Shows the socket's state in the page's status line. */
  function connectionLine(node) {
    const words = {
      connecting: "Connecting…",
      open: "Live",
      reconnecting: "Reconnecting…",
      closed: "Your session ended: log in again to follow this page.",
    };
    return (state) => {
      node.dataset.state = state;
      node.textContent = words[state] || state;
    };
  }

  /*
   * An MCP server's tool, `mcp__<server>__<tool>`: {server, tool}, else null. The pattern is the
   * server's (tools/catalog.py MCP_TOOL_NAME, in the page's configuration): the naming is read
   * in one place.
   */
  let mcpPattern;
  function mcpTool(name) {
    if (mcpPattern === undefined) {
      const source = config().mcpToolName;
      mcpPattern = source ? new RegExp(source, "s") : null;
    }
    const match = mcpPattern && typeof name === "string" ? mcpPattern.exec(name) : null;
    return match ? { server: match[1], tool: match[2] } : null;
  }

  Toolcore.config = config;
  Toolcore.mcpTool = mcpTool;
  Toolcore.api = api;
  Toolcore.ApiError = ApiError;
  Toolcore.h = h;
  Toolcore.append = append;
  Toolcore.clear = clear;
  Toolcore.utcText = utcText;
  Toolcore.localText = localText;
  Toolcore.timeNode = timeNode;
  Toolcore.localizeTimes = localizeTimes;
  Toolcore.duration = duration;
  Toolcore.requestId = requestId;
  Toolcore.Socket = Socket;
  Toolcore.connectionLine = connectionLine;

  // The times the server wrote get their hover form once the page is parsed.
  if (typeof document !== "undefined") {
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", () => localizeTimes(document));
    else localizeTimes(document);
  }
})(typeof self !== "undefined" ? self : this);
