/*
 * The workbench (/workbench/): the user's launches live over /ws/workbench/ (a snapshot, then
 * launch.changed and launch.removed), start and stop, and a paged log viewer: the newest lines
 * first, older pages as the user scrolls up, new lines while the launch runs. The DOM keeps at
 * most MAX_LINES lines; what scrolled out can be loaded again.
 */
(function (root) {
  "use strict";
  const T = root.Toolcore;
  const { h, api, clear, timeNode } = T;

  const PAGE_LINES = 200;
  const TAIL_LINES = 500; // the API's largest page
  const MAX_LINES = 3000;
  const TAIL_EVERY_MS = 1000;
  const NEAR_EDGE_PX = 40;

  const config = T.config();
  const rows = document.getElementById("launches");
  const empty = document.getElementById("launches-empty");
  const launches = new Map(); // id → launch

  // --- the list ------------------------------------------------------------------------------

  /* A launch's badge: its label, icon and style (every style in style.css, light and dark). */
  function status(launch) {
    if (launch.status === "running") return { label: "Running", icon: "◌", style: "in_progress" };
    if (launch.status === "killed") return { label: "Stopped", icon: "■", style: "stopped" };
    if (launch.status === "lost") return { label: "Lost", icon: "!", style: "indeterminate" };
    if (launch.exitCode === 0) return { label: "Exited 0", icon: "✓", style: "completed" };
    if (launch.exitCode === null || launch.exitCode === undefined) {
      return { label: launch.signal ? `Exited (${launch.signal})` : "Exited", icon: "✕", style: "failed" };
    }
    return { label: `Exited ${launch.exitCode}`, icon: "✕", style: "failed" };
  }

  function row(launch) {
    const shown = status(launch);
    const stop =
      launch.status === "running"
        ? h("button", { type: "button", class: "danger", "aria-label": `Stop ${launch.name}`, onclick: (e) => stopLaunch(launch, e.target) }, "Stop")
        : null;
    return h(
      "tr",
      { "data-launch-id": launch.id, "aria-selected": String(log.id === launch.id) },
      h("th", { scope: "row" }, h("button", { type: "button", class: "quiet", "aria-label": `Show the log of ${launch.name}`, onclick: () => log.open(launch.id) }, launch.name)),
      h("td", null, h("code", null, launch.command.length > 200 ? launch.command.slice(0, 200) + "…" : launch.command)),
      h("td", null, h("span", { class: `badge badge-${shown.style}` }, h("span", { class: "badge-icon", "aria-hidden": "true" }, shown.icon), h("span", { class: "badge-label" }, shown.label))),
      h("td", null, timeNode(launch.startedAt), launch.finishedAt ? h("div", { class: "muted" }, "ended ", timeNode(launch.finishedAt)) : null),
      h("td", null, stop),
    );
  }

  function upsert(launch) {
    const known = launches.get(launch.id);
    // A launch ends once: a "running" that comes after its end is older news (the answer to
    // a start or a stop can arrive after the socket's launch.changed that ended it).
    if (known && known.status !== "running" && launch.status === "running") return;
    launches.set(launch.id, Object.assign({}, known || {}, launch));
    const node = row(launches.get(launch.id));
    const old = rows.querySelector(`tr[data-launch-id="${launch.id}"]`);
    if (old) old.replaceWith(node);
    else rows.prepend(node);
    empty.hidden = launches.size > 0;
    if (log.id === launch.id) log.changed(launches.get(launch.id));
  }

  function remove(id) {
    launches.delete(id);
    const old = rows.querySelector(`tr[data-launch-id="${id}"]`);
    if (old) old.remove();
    empty.hidden = launches.size > 0;
    if (log.id === id) log.close();
  }

  function snapshot(list) {
    launches.clear();
    clear(rows);
    for (const launch of list.slice().reverse()) upsert(launch);
    empty.hidden = launches.size > 0;
    if (log.id && !launches.has(log.id)) log.close();
    else if (log.id) log.changed(launches.get(log.id));
  }

  async function stopLaunch(launch, button) {
    button.disabled = true;
    try {
      upsert(await api(`/launches/${launch.id}/stop`, { method: "POST" }));
    } catch (error) {
      button.disabled = false;
      document.getElementById("log-info").textContent = error.message;
    }
  }

  // --- the log viewer ---------------------------------------------------------------------------

  const log = {
    id: null,
    first: 0, // offset of the first line shown
    count: 0, // lines shown
    following: true,
    busy: false,
    timer: null,
    tailing: false,
    again: false,
    section: document.getElementById("log"),
    view: document.getElementById("log-view"),
    list: document.getElementById("log-lines"),
    olderButton: document.getElementById("log-older"),
    endButton: document.getElementById("log-end"),
    info: document.getElementById("log-info"),
    summary: document.getElementById("log-summary"),
    summaryBox: document.getElementById("log-summary-box"),

    path(offset, limit) {
      const at = offset === null ? "" : `&offset=${offset}`;
      return `/launches/${this.id}/log?limit=${limit}${at}`;
    },

    line(offset, text) {
      return h("li", null, h("span", { class: "n", "aria-hidden": "true" }, String(offset + 1)), text);
    },

    atBottom() {
      return this.view.scrollHeight - this.view.scrollTop - this.view.clientHeight < NEAR_EDGE_PX;
    },

    async open(id) {
      this.close();
      this.id = id;
      const launch = launches.get(id);
      for (const tr of rows.querySelectorAll("tr")) tr.setAttribute("aria-selected", String(tr.dataset.launchId === id));
      document.getElementById("log-heading").textContent = `Log of ${launch ? launch.name : "the launch"}`;
      this.section.hidden = false;
      this.following = true;
      this.endButton.hidden = true;
      const page = await api(this.path(null, PAGE_LINES));
      if (this.id !== id) return;
      clear(this.list);
      this.first = page.offset;
      this.count = 0;
      this.append(page.lines, page.offset);
      this.olderButton.hidden = this.first === 0;
      this.view.scrollTop = this.view.scrollHeight;
      this.describe(page);
      this.changed(launch);
      this.view.dataset.ready = "true";
    },

    close() {
      clearTimeout(this.timer);
      this.timer = null;
      this.id = null;
      this.section.hidden = true;
      this.summaryBox.hidden = true;
      delete this.view.dataset.ready;
      clear(this.list);
    },

    describe(page) {
      const shown = this.count ? `lines ${this.first + 1}–${this.first + this.count}` : "no lines yet";
      this.info.textContent = `${page.totalLines} lines; showing ${shown}${page.truncated ? " (the capture stopped at 16 MiB)" : ""}.`;
    },

    /* Lines from `offset` on; the first replaces the last line shown when it is that line. */
    append(lines, offset) {
      let start = 0;
      const last = this.first + this.count - 1;
      if (this.count && offset === last && lines.length) {
        this.list.lastElementChild.replaceWith(this.line(offset, lines[0]));
        start = 1;
      }
      for (let i = start; i < lines.length; i++) this.list.append(this.line(offset + i, lines[i]));
      this.count += lines.length - start;
      while (this.count > MAX_LINES) {
        this.list.firstElementChild.remove();
        this.first += 1;
        this.count -= 1;
        this.olderButton.hidden = false;
      }
    },

    async older() {
      if (this.busy || !this.id || this.first === 0) return;
      this.busy = true;
      const id = this.id;
      const offset = Math.max(0, this.first - PAGE_LINES);
      try {
        const page = await api(this.path(offset, this.first - offset));
        if (this.id !== id) return;
        const before = this.view.scrollHeight;
        const nodes = page.lines.map((text, i) => this.line(offset + i, text));
        this.list.prepend(...nodes);
        this.first = offset;
        this.count += nodes.length;
        this.view.scrollTop += this.view.scrollHeight - before;
        while (this.count > MAX_LINES) {
          this.list.lastElementChild.remove();
          this.count -= 1;
          this.following = false; // the newest lines left the page: "jump to the newest" brings them back
          this.endButton.hidden = false;
        }
        this.olderButton.hidden = this.first === 0;
        this.describe(page);
      } finally {
        this.busy = false;
      }
    },

    /* New lines while the launch runs (and once more when it ended). */
    async tail() {
      this.timer = null;
      if (!this.id || !this.following) return;
      if (this.tailing) {
        this.again = true; // one read at a time: the lines it appends decide the next offset
        return;
      }
      this.tailing = true;
      try {
        await this.tailOnce();
      } finally {
        this.tailing = false;
      }
      if (this.again) {
        this.again = false;
        this.schedule(0);
      }
    },

    async tailOnce() {
      const id = this.id;
      const offset = this.count ? this.first + this.count - 1 : this.first;
      const follow = this.atBottom();
      let page;
      try {
        page = await api(this.path(offset, TAIL_LINES));
      } catch (_) {
        this.schedule();
        return;
      }
      if (this.id !== id) return;
      if (page.offset === offset) this.append(page.lines, offset);
      if (follow) this.view.scrollTop = this.view.scrollHeight;
      this.describe(page);
      if (page.nextOffset !== null || page.status === "running") this.schedule(page.nextOffset !== null ? 0 : TAIL_EVERY_MS);
    },

    schedule(delay) {
      if (this.timer === null) this.timer = setTimeout(() => this.tail(), delay === undefined ? TAIL_EVERY_MS : delay);
    },

    changed(launch) {
      if (!launch) return;
      if (launch.summary) {
        this.summary.textContent = launch.summary;
        this.summaryBox.hidden = false;
      }
      this.schedule(launch.status === "running" ? TAIL_EVERY_MS : 0);
    },
  };

  log.view.addEventListener("scroll", () => {
    if (log.view.scrollTop < NEAR_EDGE_PX) log.older();
  });
  log.olderButton.addEventListener("click", () => log.older());
  log.endButton.addEventListener("click", () => log.open(log.id));

  // --- start a launch ---------------------------------------------------------------------------

  const form = document.getElementById("launch-form");
  if (form) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const line = document.getElementById("launch-status");
      const name = form.elements.name.value.trim();
      const command = form.elements.command.value.trim();
      if (!name || !command) {
        line.textContent = "A name and a command, please.";
        return;
      }
      const body = { name, command };
      if (form.elements.cwd.value.trim()) body.cwd = form.elements.cwd.value.trim();
      const submit = form.querySelector("button[type=submit]");
      submit.disabled = true;
      line.textContent = "Starting…";
      try {
        const launch = await api("/launches", { method: "POST", body });
        upsert(launch);
        line.textContent = `Started ${launch.name}.`;
        form.reset();
        log.open(launch.id);
      } catch (error) {
        line.textContent = error.message;
      } finally {
        submit.disabled = false;
      }
    });
  }

  // --- live -----------------------------------------------------------------------------------

  // The workbench socket sends no hello: its snapshot, the first frame of every connection,
  // says it is live (docs/realtime.md).
  const socket = new T.Socket(
    config.socket,
    {
      onState: T.connectionLine(document.getElementById("connection")),
      onOpen: () => {},
      onFrame: (frame) => {
        if (frame.type === "snapshot") {
          snapshot(frame.launches);
          document.body.dataset.ready = "true";
        } else if (frame.type === "launch.changed") upsert(frame.launch);
        else if (frame.type === "launch.removed") remove(frame.id);
      },
    },
    { liveOn: "snapshot" },
  );
  socket.start();
  T.page = { socket, log };
})(typeof self !== "undefined" ? self : this);
