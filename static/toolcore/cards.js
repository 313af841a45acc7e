/*
 * Tool cards: one per call, one presentation from streamed arguments to settlement (docs/web.md).
 *
 * A card shows its folded `tool.updated` state (static/toolcore/fold.js) and only bounded
 * payloads: the bounded input, a preview of at most six lines of the bounded output (or of the
 * transcript projection once the response is known), times, and an approval or question form
 * while the call waits on the user. Details are fetched on demand.
 */
(function (root) {
  "use strict";
  const T = root.Toolcore;
  const { h, clear, timeNode, duration } = T;
  const ELAPSED = { wholeSeconds: true }; // a running call's clock ticks in whole seconds
  const fold = T.fold;

  const PREVIEW_LINES = 6;
  const PREVIEW_LINE_CHARS = 400; // a very long line is cut on screen; Details has it whole
  const MESSAGE_TEXT_CHARS = 16384; // a message's text block shows this much at most
  const EXIT_READ_TRIES = 3; // reads of how a command ended, when the server cannot answer
  const EXIT_RETRY_MS = 3000;

  // One badge per tool.updated status, in projections/vocabulary.py's order (a test compares).
  const STATUS = {
    pending: { label: "Pending", icon: "○" },
    awaiting_approval: { label: "Awaiting approval", icon: "?" },
    in_progress: { label: "Running", icon: "◌" },
    awaiting_input: { label: "Awaiting input", icon: "✎" },
    completed: { label: "Completed", icon: "✓" },
    failed: { label: "Failed", icon: "✕" },
    declined: { label: "Declined", icon: "⊘" },
    cancelled: { label: "Cancelled", icon: "–" },
    indeterminate: { label: "Indeterminate", icon: "!" },
  };
  const STATUS_HINT = {
    declined: "Settled: the call was not allowed to run.",
    cancelled: "Settled: the call was cancelled.",
    indeterminate: "Stopped while running: its effect could not be confirmed.",
  };

  /* Lines of a text by the README rule: a final newline ends the last line, no empty extra. */
  function lines(text) {
    if (!text) return [];
    const parts = text.split("\n");
    if (parts[parts.length - 1] === "") parts.pop();
    return parts;
  }

  function cutLine(line) {
    return line.length > PREVIEW_LINE_CHARS ? line.slice(0, PREVIEW_LINE_CHARS) + "…" : line;
  }

  function plural(n, noun) {
    return `${n} ${noun}${n === 1 ? "" : "s"}`;
  }

  function compactJson(value) {
    try {
      return JSON.stringify(value);
    } catch (_) {
      return String(value);
    }
  }

  /*
   * What the card shows of a call's result: the transcript projection when the response is
   * known, else the bounded output: its last lines for a command (`execute`), its first lines
   * otherwise. `{lines, more}`, `more` saying what is not shown, or null without output.
   */
  function preview(state, projection) {
    // A process's projection may hold no result lines (bash settles from its capture files):
    // its bounded output says more then.
    const lines_ = projection && Array.isArray(projection.resultPreview) ? projection.resultPreview : [];
    if (projection && (lines_.length || !state.output)) {
      const overflow = projection.previewOverflow;
      const more = overflow && overflow.hidden ? `${plural(overflow.hidden, overflow.noun || "line")} more` : "";
      return { lines: lines_, more };
    }
    const out = state.output;
    if (!out) return null;
    const cut = "tail" in out;
    const head = lines(out.text);
    const tail = cut ? lines(out.tail) : [];
    const all = head.length + tail.length;
    let shown;
    if (state.kind === "execute") {
      shown = cut ? tail.slice(-PREVIEW_LINES) : head.slice(-PREVIEW_LINES);
    } else {
      shown = head.slice(0, PREVIEW_LINES);
    }
    const parts = [];
    if (all > shown.length) parts.push(`${plural(all - shown.length, "line")} more`);
    if (cut) parts.push(`${fold.sizeWords(out.omittedBytes)} of output not shown`);
    return { lines: shown, more: parts.join(" · ") };
  }

  /* The bounded input as lines: a command's text, else `key: JSON` per argument. */
  function inputLines(state) {
    const input = state.input;
    if (input === undefined || input === null) return [];
    if (typeof input !== "object" || Array.isArray(input)) return [compactJson(input)];
    if (state.kind === "think" && Array.isArray(input.questions)) {
      return input.questions.map((q) => (q && typeof q.question === "string" ? q.question : compactJson(q)));
    }
    if (typeof input.command === "string") {
      const rest = Object.entries(input).filter(([k]) => k !== "command");
      return lines(input.command).concat(rest.map(([k, v]) => `${k}: ${compactJson(v)}`));
    }
    return Object.entries(input).map(([k, v]) => `${k}: ${compactJson(v)}`);
  }

  /*
   * A completed command's badge says how it ended (`exit` of the details or history: the
   * server's words): not green unless it exited 0. `undefined`: not known yet (being read),
   * neutral meanwhile rather than a success that may turn out to be an `Exit 3`.
   */
  function exitBadge(exit) {
    if (exit === undefined) {
      return h(
        "span",
        { class: "badge badge-checking", title: "Completed: reading how the command ended…" },
        h("span", { class: "badge-icon", "aria-hidden": "true" }, STATUS.completed.icon),
        h("span", { class: "badge-label" }, STATUS.completed.label),
      );
    }
    const background = exit.asyncRunId ? ` in the background (async run ${exit.asyncRunId})` : "";
    if (exit.succeeded) {
      return h(
        "span",
        { class: "badge badge-completed", title: `Completed: ${exit.summary}${background}.` },
        h("span", { class: "badge-icon", "aria-hidden": "true" }, STATUS.completed.icon),
        h("span", { class: "badge-label" }, STATUS.completed.label),
      );
    }
    return h(
      "span",
      { class: "badge badge-exit", title: `The command ran${background} and did not succeed; the call's outcome is completed.` },
      h("span", { class: "badge-icon", "aria-hidden": "true" }, "✕"),
      h("span", { class: "badge-label" }, exit.summary),
    );
  }

  function badge(status, since, exit) {
    if (status === "completed" && exit !== null) return exitBadge(exit);
    const known = STATUS[status] || { label: status || "Unknown", icon: "·" };
    const node = h(
      "span",
      { class: `badge badge-${status || "unknown"}`, title: STATUS_HINT[status] || null },
      h("span", { class: "badge-icon", "aria-hidden": "true" }, known.icon),
      h("span", { class: "badge-label" }, known.label),
    );
    if (status === "in_progress" && since) {
      node.append(h("span", { class: "elapsed", "data-since": since }, ` ${duration(Date.now() - Date.parse(since), ELAPSED)}`));
    }
    return node;
  }

  let serial = 0;

  /*
   * One call's card. `ctx` gives it `resolve(callId, body)` (a Promise of the `resolved`
   * frame), `details(callId)` (a Promise of GET …/details), `response(callId)` (a Promise of
   * GET /tool-calls/{id}), `merge(state)` and `announce(text)`.
   */
  class Card {
    constructor(id, ctx) {
      this.id = id;
      this.ctx = ctx;
      this.state = null;
      this.response = null; // the tool_call_response payload, once known
      this.record = null; // {interaction, resolution, resolvedBy} of a resolution seen here
      this.streamed = null; // arguments streaming before the message is stored
      this.n = ++serial;
      this.interactionKey = null;
      this.detailsOpen = false;
      this.askedResponse = false;
      // How its command ended (`exit` of details or history): undefined while not known,
      // null when there is none (not a command, or its run goes on in the background).
      this.exit = null;
      this.exitKnown = false; // said by history or details (null included)
      this.exitAsked = 0; // numbers the reads of it, so an older answer never wins
      this.readingExit = 0; // the read on its way, if any
      this.el = h("article", { class: "card", "data-call-id": id, "aria-labelledby": `card-${this.n}-name` });
      this.parts = {
        head: h("header", { class: "card-head" }),
        input: h("div", { class: "card-input" }),
        interaction: h("div", { class: "card-interaction" }),
        preview: h("div", { class: "card-preview" }),
        meta: h("footer", { class: "card-meta" }),
        details: h("section", { class: "card-details", id: `card-${this.n}-details`, hidden: true, "aria-label": "Details" }),
      };
      this.el.append(...Object.values(this.parts));
    }

    get status() {
      return this.state ? this.state.status : "pending";
    }

    setState(state) {
      const before = this.state ? this.state.status : null;
      this.state = state;
      this.render();
      const name = state.toolName || "A tool";
      if (before !== state.status && before !== null) {
        if (state.status === "awaiting_approval") this.ctx.announce(`${name} awaits your approval.`);
        else if (state.status === "awaiting_input") this.ctx.announce(`${name} has questions for you.`);
        else if (fold.isFinal(state)) this.ctx.announce(`${name}: ${STATUS[state.status].label.toLowerCase()}.`);
      }
    }

    setResponse(payload) {
      this.response = payload;
      if (!this.exitKnown && isCommand(payload.toolName) && payload.outcome === "completed" && !payload.asyncRunId) {
        this.exit = undefined; // it ran to its end in the foreground: read how (readExit)
      }
      if (payload.resolution && payload.interaction) {
        this.record = {
          interaction: payload.interaction,
          resolution: payload.resolution,
          resolvedBy: payload.resolvedBy,
        };
      }
      this.render();
    }

    /* How its command ended, as the server says it (history, details); null: none. */
    setExit(exit) {
      this.exit = exit || null;
      this.exitKnown = true;
      this.exitAsked += 1; // an answer still on its way is older than this
      this.readingExit = 0;
      this.render();
    }

    /*
     * Its final state arrived live (its response may come after it): a command that completed
     * is read at once, so the card never shows a green success before its exit is known.
     */
    endedLive() {
      const state = this.state || {};
      const background = this.response && this.response.asyncRunId;
      if (this.exitKnown || this.exit !== null || background) return;
      if (isCommand(state.toolName) && state.status === "completed") {
        this.exit = undefined;
        this.render();
      }
    }

    /* Its command's end was just recorded (the async run it became ended): read it. */
    exitChanged() {
      this.exit = undefined;
      this.exitKnown = false;
      this.exitAsked += 1;
      this.readingExit = 0;
      this.render();
    }

    /* Arguments streamed before the assistant's message is stored (`conversation.live`). */
    setStreamed(name, text) {
      this.streamed = { name, text };
      this.render();
    }

    render() {
      const state = this.state || {};
      this.renderHead(state);
      this.renderInput(state);
      this.renderInteraction(state);
      this.renderPreview(state);
      this.renderMeta(state);
      this.el.dataset.status = this.state ? state.status || "pending" : "streaming";
      if (this.exit) this.el.dataset.exit = this.exit.succeeded ? "succeeded" : "unsuccessful";
      else delete this.el.dataset.exit;
      if (this.wantsResponse()) this.ctx.wantResponse(this);
      if (this.exit === undefined && !this.readingExit) this.readExit();
    }

    renderHead(state) {
      const name = state.toolName || (this.streamed && this.streamed.name) || "tool";
      const mcp = T.mcpTool(name); // an MCP server's tool: its own name, and its server's
      T.append(clear(this.parts.head), [
        h("h3", { class: "tool-name", id: `card-${this.n}-name`, title: mcp ? name : null }, mcp ? mcp.tool : name),
        mcp ? h("span", { class: "tool-origin" }, `MCP · ${mcp.server}`) : null,
        badge(this.state ? state.status : "pending", state.startedAt, this.exit),
        state.title && state.title !== name ? h("span", { class: "card-title" }, state.title) : null,
      ]);
    }

    renderInput(state) {
      const node = clear(this.parts.input);
      if (!this.state && this.streamed) {
        node.append(
          h("p", { class: "muted" }, "Arguments streaming…"),
          h("pre", { class: "code" }, this.streamed.text),
        );
        return;
      }
      if (state.payloadOmitted) {
        node.append(
          h("p", { class: "muted" }, `Input and output not loaded here (${fold.sizeWords(state.payloadOmitted.bytes)}): open Details.`),
        );
        return;
      }
      if (state.inputOmitted) {
        node.append(h("p", { class: "muted" }, "Input too large to show."));
        return;
      }
      const all = inputLines(state);
      if (!all.length) return;
      const shown = all.slice(0, PREVIEW_LINES).map(cutLine);
      node.append(h("pre", { class: "code", "aria-label": "Input" }, shown.join("\n")));
      if (all.length > shown.length) {
        node.append(h("p", { class: "more" }, `${plural(all.length - shown.length, "line")} more`));
      }
    }

    renderPreview(state) {
      const node = clear(this.parts.preview);
      if (state.payloadOmitted) return;
      const shown = preview(state, this.response && this.response.userProjection);
      if (!shown || (!shown.lines.length && !shown.more)) return;
      node.append(h("pre", { class: "output", "aria-label": "Output preview" }, shown.lines.map(cutLine).join("\n")));
      if (shown.more) node.append(h("p", { class: "more" }, shown.more));
    }

    renderMeta(state) {
      // The times are drawn again; the Details button stays the same node, so a keyboard
      // user's focus survives the updates of a running call.
      const times = h("span", { class: "times" });
      if (state.startedAt) times.append(h("span", null, "Started ", timeNode(state.startedAt)));
      if (state.finishedAt) {
        times.append(h("span", null, "Finished ", timeNode(state.finishedAt)));
        if (state.startedAt) {
          times.append(h("span", null, `took ${duration(Date.parse(state.finishedAt) - Date.parse(state.startedAt))}`));
        }
      }
      if (this.times) this.times.replaceWith(times);
      else this.parts.meta.prepend(times);
      this.times = times;
      if (!this.state) return;
      if (!this.detailsButton) {
        this.detailsButton = h("button", {
          type: "button",
          class: "quiet details-toggle",
          "aria-controls": this.parts.details.id,
          onclick: () => this.toggleDetails(),
        });
        this.parts.meta.append(this.detailsButton);
      }
      const words = this.detailsOpen ? "Hide details" : "Details";
      this.detailsButton.textContent = words;
      this.detailsButton.setAttribute("aria-expanded", String(this.detailsOpen));
      this.detailsButton.setAttribute("aria-label", `${words} of ${state.toolName || "this call"}`);
    }

    // --- approvals and questions ---------------------------------------------------------------

    renderInteraction(state) {
      const interaction = state.interaction;
      const awaiting =
        interaction &&
        ((state.status === "awaiting_approval" && interaction.kind === "approval") ||
          (state.status === "awaiting_input" && interaction.kind === "input"));
      const key = JSON.stringify([awaiting ? "ask" : "record", interaction || null, this.record, fold.isFinal(state)]);
      if (key === this.interactionKey) return; // keep what the user is typing
      this.interactionKey = key;
      const node = clear(this.parts.interaction);
      if (awaiting) {
        node.append(interaction.kind === "approval" ? this.approvalForm(interaction.request || {}) : this.questionForm(interaction.request || {}));
        return;
      }
      const record = this.record || (interaction && fold.isFinal(state) ? { interaction } : null);
      if (record) node.append(this.recordView(record, state));
    }

    /*
     * Whether the card needs its call's response to show what it should: a settled card read
     * from history and not resolved on this page. Its output may be missing (a path tool's
     * items are in the transcript projection), and only the response keeps an interaction
     * and its recorded answer: the folded state drops an approval once it is allowed. The
     * page fetches it once, when the card comes into view (GET /tool-calls/{id}).
     */
    wantsResponse() {
      const state = this.state;
      if (!state || this.response || this.askedResponse || !fold.isFinal(state)) return false;
      if (state.payloadOmitted) return false;
      return !this.record;
    }

    fetchResponse() {
      if (!this.wantsResponse()) return;
      this.askedResponse = true;
      this.ctx.response(this.id).then((payload) => payload && this.setResponse(payload), () => {});
    }

    /*
     * How its command ended is not in the response nor in the card's state (their keys are
     * fixed): one details read per command that ended while the page watched it. The page has
     * it in history for the others.
     */
    readExit(tries = EXIT_READ_TRIES) {
      const asked = ++this.exitAsked;
      this.readingExit = asked;
      this.ctx.details(this.id).then(
        (details) => {
          if (asked === this.exitAsked) this.setExit(details.exit);
        },
        () => {
          if (asked !== this.exitAsked) return;
          if (tries > 1) setTimeout(() => asked === this.exitAsked && this.readExit(tries - 1), EXIT_RETRY_MS);
          else this.setExit(null); // unreadable: the plain outcome, as before the exit was known
        },
      );
    }

    // --- details, on demand ----------------------------------------------------------------------

    toggleDetails() {
      this.detailsOpen = !this.detailsOpen;
      this.parts.details.hidden = !this.detailsOpen;
      this.renderMeta(this.state || {});
      if (!this.detailsOpen) {
        clear(this.parts.details);
        return;
      }
      const node = clear(this.parts.details);
      node.append(h("p", { class: "muted", role: "status" }, "Loading details…"));
      this.ctx.details(this.id).then(
        (details) => this.renderDetails(details),
        (error) => clear(node).append(h("p", { class: "error", role: "alert" }, error.message)),
      );
    }

    renderDetails(details) {
      const node = clear(this.parts.details);
      if (!this.detailsOpen) return;
      if (details.toolUpdate) this.ctx.merge(details.toolUpdate);
      const outcome = details.outcome || details.state;
      node.append(h("h4", null, "Details"), h("p", null, `${details.outcome ? "Outcome" : "State"}: `, h("strong", null, outcome || "unknown")));
      if (details.exit) {
        const run = details.exit.asyncRunId ? ` (async run ${details.exit.asyncRunId})` : "";
        node.append(h("p", { class: "exit" }, `Process${run}: `, h("strong", null, details.exit.summary)));
      }
      if (Array.isArray(details.modelContent)) {
        const text = details.modelContent
          .map((block) => (block.type === "text" ? block.text : `[${block.type}]`))
          .join("\n");
        node.append(h("h5", null, "What the model sees"), h("pre", { class: "code model", tabindex: "0" }, text));
      }
      const out = details.toolUpdate && details.toolUpdate.output;
      node.append(h("h5", null, "Output"));
      if (!out) node.append(h("p", { class: "muted" }, "No output."));
      else {
        const box = h("div", { class: "bounded-output", tabindex: "0", "aria-label": "Bounded output" }, h("pre", null, out.text));
        if ("tail" in out) box.append(h("p", { class: "omitted" }, fold.omittedMarker(out)), h("pre", null, out.tail));
        node.append(box);
      }
      node.append(h("h5", null, "Files"));
      if (!details.assets.length) node.append(h("p", { class: "muted" }, "None."));
      else {
        const list = h("ul", { class: "assets" });
        for (const asset of details.assets) {
          list.append(
            h("li", null,
              h("a", { href: `${T.config().api}/assets/${encodeURIComponent(asset.id)}`, download: asset.path.split("/").pop() || asset.kind }, `${asset.kind} (${fold.sizeWords(asset.size)})`),
              asset.truncated ? h("span", { class: "muted" }, " truncated") : null,
              h("br"),
              h("span", { class: "sha" }, "SHA-256 ", h("code", null, asset.sha256)),
            ),
          );
        }
        node.append(list);
      }
    }
  }

  /* A call that runs a command: its card says how the command ended. */
  function isCommand(toolName) {
    return toolName === "bash";
  }

  /* A message of the transcript: its text blocks (tool calls have their own cards); null for
     a message of tool calls only. */
  function messageView(event) {
    const role = event.type === "user_message" ? "user" : "assistant";
    const content = (event.payload && event.payload.content) || [];
    if (!content.some((block) => block.type === "text")) return null;
    const body = h("div", { class: "message-body" });
    for (const block of content) {
      if (block.type !== "text") continue;
      const text = block.text || "";
      body.append(h("div", { class: "text" }, text.length > MESSAGE_TEXT_CHARS ? text.slice(0, MESSAGE_TEXT_CHARS) : text));
      if (text.length > MESSAGE_TEXT_CHARS) {
        body.append(h("p", { class: "more" }, `${plural(text.length - MESSAGE_TEXT_CHARS, "more character")} not shown`));
      }
    }
    return h(
      "article",
      { class: `message message-${role}`, "data-sequence": event.sequence },
      h("header", null, h("span", { class: "role" }, role === "user" ? "You" : "Assistant"), " ", timeNode(event.createdAt)),
      body,
    );
  }

  /* Every second: the elapsed time of running calls. */
  function tickElapsed() {
    for (const node of document.querySelectorAll(".elapsed[data-since]")) {
      node.textContent = ` ${duration(Date.now() - Date.parse(node.dataset.since), ELAPSED)}`;
    }
  }

  T.Card = Card;
  T.messageView = messageView;
  T.tickElapsed = tickElapsed;
  T.cardPreview = preview;
})(typeof self !== "undefined" ? self : this);
