/*
 * What every page's script shares: the page's configuration, the REST API with the session
 * (CSRF header on writes), DOM helpers that only ever set text, times, and a websocket that
 * reconnects and says so.
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

  /* "12:04:05" in local time, or "Nov 29, 12:04:05" when not today. */
  function clock(iso) {
    if (!iso) return "";
    const d = new Date(iso);
    const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
    const now = new Date();
    if (d.toDateString() === now.toDateString()) return time;
    return `${d.toLocaleDateString(undefined, { month: "short", day: "numeric" })}, ${time}`;
  }

  /* "4 s", "3 min 5 s", "2 h 10 min" from milliseconds. */
  function duration(ms) {
    const s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
    return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  }

  function requestId() {
    if (root.crypto && root.crypto.randomUUID) return root.crypto.randomUUID();
    return `r-${Date.now()}-${Math.random().toString(16).slice(2)}`;
  }

  /*
   * A websocket that reconnects: `onOpen()` after the server's hello (subscribe there),
   * `onFrame(frame)` for each frame after it, `onState(state)` with "connecting", "open",
   * "reconnecting" or "closed" (4401: the session ended; no retry). Retries back off from
   * half a second to ten.
   */
  class Socket {
    constructor(path, handlers) {
      this.path = path;
      this.handlers = handlers;
      this.delay = 500;
      this.ws = null;
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
      ws.addEventListener("message", (event) => {
        let frame;
        try {
          frame = JSON.parse(event.data);
        } catch (_) {
          return;
        }
        if (frame.type === "hello") {
          this.delay = 500;
          this.handlers.onState("open");
          this.handlers.onOpen();
          return;
        }
        this.handlers.onFrame(frame);
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
        this.delay = Math.min(this.delay * 2, 10000);
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

  Toolcore.config = config;
  Toolcore.api = api;
  Toolcore.ApiError = ApiError;
  Toolcore.h = h;
  Toolcore.append = append;
  Toolcore.clear = clear;
  Toolcore.clock = clock;
  Toolcore.duration = duration;
  Toolcore.requestId = requestId;
  Toolcore.Socket = Socket;
  Toolcore.connectionLine = connectionLine;
})(typeof self !== "undefined" ? self : this);
