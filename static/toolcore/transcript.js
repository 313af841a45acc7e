/*
 * The transcript page (/c/<id>/): history pages, then live over /ws/conversations/.
 *
 * Start: subscribe with `after: null` (a snapshot: the cards of the latest turn and of every
 * unfinished call, and `lastSequence`), then read the newest history page; anything both hold
 * is merged (messages by sequence, cards by `rev`). From then on the socket's durable frames
 * (replay, conversation.event) arrive exactly once, in order, and `tool.updated` frames are
 * folded with the JavaScript fold when they continue a card's `rev`; a gap refetches the
 * card's details. After a reconnect the page subscribes again from its last sequence and reads
 * the snapshot over REST for the cards' states it may have missed.
 */
(function (root) {
  "use strict";
  const T = root.Toolcore;
  const { h, api, fold } = T;

  const HISTORY_PAGE = 50;
  const LIVE_TEXT_CHARS = 16384; // the tail of streamed text or arguments kept on screen
  const NEAR_BOTTOM_PX = 120;

  const config = T.config();
  const cid = config.conversationId;
  const items = document.getElementById("items");
  const older = document.getElementById("load-older");
  const transcript = document.getElementById("transcript");
  const empty = document.getElementById("transcript-empty");
  const announcer = document.getElementById("announcer");
  const { setOpenTurn } = T.commandBox(cid, config.canRunCommands); // the !command box (command.js)

  const cards = new Map(); // toolCallId → Card
  const placed = new Set(); // keys of items in the DOM: "m:<sequence>", "c:<toolCallId>"
  const refetching = new Set();
  const pendingResolves = new Map(); // requestId → {resolve, reject}
  const provisional = new Map(); // "<turnId>:text" or "<turnId>:<providerCallId>" → {node, text, card}
  let lastSequence = null; // the last durable event the page holds
  let ready = false; // the first history page is placed
  let queued = []; // frames that arrived before it
  let nextCursor = null;
  let loadingOlder = false;
  let subscribedOnce = false;

  function announce(text) {
    announcer.textContent = "";
    setTimeout(() => (announcer.textContent = text), 50);
  }

  function nearBottom() {
    const doc = document.documentElement;
    return doc.scrollHeight - (root.scrollY + root.innerHeight) < NEAR_BOTTOM_PX;
  }

  function scrollToEnd() {
    root.scrollTo({ top: document.documentElement.scrollHeight, behavior: "auto" });
  }

  // --- cards ---------------------------------------------------------------------------------

  const ctx = {
    resolve: resolveOverSocket,
    details: (id) => api(`/tool-calls/${id}/details`),
    response: (id) => api(`/tool-calls/${id}`).then((call) => (call.response ? call.response.payload : null)),
    merge: (state) => mergeState(state),
    wantResponse: (card) => responses.observe(card.el),
    announce,
  };

  // Settled cards from history that need their response fetch it once they come into view.
  const responses = {
    observer:
      "IntersectionObserver" in root
        ? new IntersectionObserver((entries) => {
            for (const entry of entries) {
              if (!entry.isIntersecting) continue;
              responses.observer.unobserve(entry.target);
              const card = cards.get(entry.target.dataset.callId);
              if (card) card.fetchResponse();
            }
          })
        : null,
    observe(node) {
      if (this.observer) this.observer.observe(node);
      else setTimeout(() => cards.get(node.dataset.callId).fetchResponse(), 0);
    },
  };

  function cardFor(id) {
    let card = cards.get(id);
    if (!card) {
      card = new T.Card(id, ctx);
      cards.set(id, card);
    }
    return card;
  }

  function rev(state) {
    return state && typeof state.rev === "number" ? state.rev : 0;
  }

  /* A whole state (snapshot, history, details): taken when newer than the one held. */
  function mergeState(state) {
    const card = cardFor(state.toolCallId);
    const held = card.state;
    const newer = rev(state) > rev(held);
    const fuller = rev(state) === rev(held) && held && held.payloadOmitted && !state.payloadOmitted;
    if (!held || newer || fuller) card.setState(state);
    return card;
  }

  /* A card's state read again, when updates were lost on the way. */
  function refetch(id) {
    if (refetching.has(id)) return;
    refetching.add(id);
    api(`/tool-calls/${id}/details`)
      .then((details) => {
        if (details.toolUpdate) {
          const card = mergeState(details.toolUpdate);
          placeLive(card);
          // How its command ended is read by the card itself, in order with its other reads.
          if (fold.isFinal(card.state)) card.endedLive();
        }
        if (details.userProjection && cards.has(id) && !cards.get(id).response) {
          cards.get(id).setResponse({ userProjection: details.userProjection, outcome: details.outcome });
        }
      })
      .catch(() => {})
      .finally(() => refetching.delete(id));
  }

  function onToolUpdated(frame) {
    const update = frame.update;
    const card = cards.get(update.toolCallId);
    const held = card ? rev(card.state) : 0;
    const from = typeof frame.revFrom === "number" ? frame.revFrom : update.rev;
    if (typeof update.rev === "number" && update.rev <= held) return; // already folded
    const omitted = card && card.state && card.state.payloadOmitted && "outputDelta" in update;
    if (from !== held + 1 || omitted) {
      refetch(update.toolCallId); // a gap in `rev`: updates were lost
      return;
    }
    let next;
    try {
      next = fold.applyToolUpdate(card ? card.state : null, update);
    } catch (_) {
      refetch(update.toolCallId);
      return;
    }
    const target = cardFor(update.toolCallId);
    const follow = nearBottom();
    target.setState(next);
    if (fold.isFinal(next)) target.endedLive();
    placeLive(target);
    if (follow) scrollToEnd();
  }

  // --- placing items -----------------------------------------------------------------------------

  function showEmpty() {
    empty.hidden = items.childElementCount > 0;
  }

  /* A card first seen live goes at the end (its message came first). */
  function placeLive(card) {
    if (!ready || placed.has(`c:${card.id}`)) return;
    placed.add(`c:${card.id}`);
    dropProvisional(card.state && card.state.turnId, true);
    items.append(card.el);
    showEmpty();
  }

  function messageNode(event) {
    return T.messageView(event);
  }

  function placeMessageLive(event) {
    const key = `m:${event.sequence}`;
    if (placed.has(key)) return;
    placed.add(key);
    if (event.type === "assistant_message") dropProvisional(event.turnId, false);
    const node = messageNode(event);
    if (!node) return;
    const follow = nearBottom();
    items.append(node);
    showEmpty();
    if (follow) scrollToEnd();
  }

  /* History items (newest first, as the API pages them) put before what is shown. */
  function placeHistory(page, { initial }) {
    const nodes = [];
    for (const item of page.items.slice().reverse()) {
      if (item.type === "message") {
        const key = `m:${item.event.sequence}`;
        if (placed.has(key)) continue;
        placed.add(key);
        const node = messageNode(item.event);
        if (node) nodes.push(node);
      } else {
        const state = Object.assign({}, item);
        delete state.type;
        delete state.exit; // how its command ended: beside the state, not in it
        // A settled card's page says how its command ended, or that it has no end (yet).
        const held = cardFor(state.toolCallId);
        if (item.exit || (!held.exitKnown && fold.isFinal(state))) held.setExit(item.exit);
        const card = mergeState(state);
        const key = `c:${card.id}`;
        if (placed.has(key)) {
          nodes.push(card.el); // an unplaced snapshot card shown at the end moves to its place
          continue;
        }
        placed.add(key);
        nodes.push(card.el);
      }
    }
    const before = document.documentElement.scrollHeight;
    const top = root.scrollY;
    items.prepend(...nodes);
    if (!initial) root.scrollTo({ top: top + document.documentElement.scrollHeight - before });
    nextCursor = page.nextCursor;
    older.hidden = !nextCursor;
    showEmpty();
  }

  async function loadOlder() {
    if (!nextCursor || loadingOlder) return;
    loadingOlder = true;
    older.disabled = true;
    older.textContent = "Loading older messages…";
    try {
      const page = await api(`/conversations/${cid}/history?limit=${HISTORY_PAGE}&before=${encodeURIComponent(nextCursor)}`);
      placeHistory(page, { initial: false });
    } finally {
      loadingOlder = false;
      older.disabled = false;
      older.textContent = "Load older messages";
    }
  }

  // --- streaming before the message is stored --------------------------------------------------

  function onLive(frame) {
    const key = frame.kind === "text" ? `${frame.turnId}:text` : `${frame.turnId}:${frame.providerCallId}`;
    let entry = provisional.get(key);
    if (!entry) {
      entry = { text: "", turnId: frame.turnId };
      if (frame.kind === "text") {
        entry.body = h("div", { class: "text" });
        entry.node = h("article", { class: "message message-assistant provisional", "aria-busy": "true" },
          h("header", null, h("span", { class: "role" }, "Assistant"), " ", h("span", { class: "muted" }, "writing…")), entry.body);
      } else {
        entry.card = new T.Card(`live-${frame.providerCallId}`, ctx);
        entry.node = entry.card.el;
        entry.node.classList.add("provisional");
      }
      provisional.set(key, entry);
      items.append(entry.node);
      showEmpty();
    }
    entry.text = (entry.text + frame.delta).slice(-LIVE_TEXT_CHARS);
    if (entry.body) entry.body.textContent = entry.text;
    else entry.card.setStreamed(streamedName(entry.text), entry.text);
  }

  function streamedName(text) {
    const found = /"name"\s*:\s*"([^"]{1,64})"/.exec(text);
    return found ? found[1] : "tool";
  }

  /* The stored message (or its calls' cards) replaces what streamed for its turn. */
  function dropProvisional(turnId, cardsOnly) {
    if (!turnId) return;
    for (const [key, entry] of provisional) {
      if (entry.turnId !== turnId || (cardsOnly && !entry.card)) continue;
      entry.node.remove();
      provisional.delete(key);
    }
  }

  // --- the socket ------------------------------------------------------------------------------

  function onEvent(event) {
    if (lastSequence !== null && event.sequence <= lastSequence) return;
    lastSequence = event.sequence;
    if (event.type === "user_message" || event.type === "assistant_message") {
      placeMessageLive(event);
      if (event.type === "user_message") setOpenTurn(event.turnId);
    } else if (event.type === "tool_call_response") {
      const card = cardFor(event.toolCallId);
      card.setResponse(event.payload);
      if (!card.state || !fold.isFinal(card.state)) setTimeout(() => {
        if (!card.state || !fold.isFinal(card.state)) refetch(event.toolCallId);
      }, 1000);
    } else if (event.type === "async_bash_event") {
      // The run a command became has ended: its card reads how (one details read).
      const card = cards.get(event.payload && event.payload.toolCallId);
      if (card) card.exitChanged();
    } else if (event.type === "turn_ended") {
      setOpenTurn(null);
      dropProvisional(event.turnId, false);
    }
  }

  function onFrame(frame) {
    if (frame.conversationId && frame.conversationId !== cid) return;
    if (frame.type === "resolved" || (frame.type === "error" && frame.requestId)) {
      settleResolve(frame);
      return;
    }
    if (!ready && frame.type !== "snapshot") {
      queued.push(frame);
      return;
    }
    switch (frame.type) {
      case "snapshot":
        onSnapshot(frame.snapshot);
        break;
      case "replay":
        for (const event of frame.events) onEvent(event);
        break;
      case "conversation.event":
        onEvent(frame.event);
        break;
      case "head":
        if (lastSequence === null || frame.sequence > lastSequence) lastSequence = frame.sequence;
        break;
      case "tool.updated":
        onToolUpdated(frame);
        break;
      case "conversation.live":
        onLive(frame);
        break;
      case "tool_call.changed":
        if (frame.call) {
          if (!cards.has(frame.call.id)) refetch(frame.call.id);
          if (frame.call.turnId) setOpenTurn(frame.call.turnId);
        }
        break;
      case "error":
        if (frame.code === "not_found") setConnection("closed", "This conversation no longer exists.");
        break;
      default:
        break;
    }
  }

  let snapshotCards = [];

  function onSnapshot(snapshot) {
    if (!snapshot) return;
    lastSequence = snapshot.lastSequence;
    setOpenTurn(snapshot.openTurn ? snapshot.openTurn.id : null);
    snapshotCards = snapshot.tools.slice().reverse(); // oldest first
    for (const state of snapshotCards) mergeState(state);
    if (!ready) loadFirstPage();
  }

  let loadingFirst = false;

  async function loadFirstPage() {
    if (loadingFirst) return;
    loadingFirst = true;
    try {
      const page = await api(`/conversations/${cid}/history?limit=${HISTORY_PAGE}`);
      placeHistory(page, { initial: true });
    } catch (error) {
      loadingFirst = false;
      setConnection("closed", `Could not load the conversation: ${error.message}`);
      return;
    }
    // Cards the snapshot knows that the first page does not hold (a long latest turn): last.
    for (const state of snapshotCards) {
      const card = cards.get(state.toolCallId);
      if (card && !placed.has(`c:${card.id}`)) {
        placed.add(`c:${card.id}`);
        items.append(card.el);
      }
    }
    ready = true;
    transcript.setAttribute("aria-busy", "false");
    const frames = queued;
    queued = [];
    for (const frame of frames) onFrame(frame);
    showEmpty();
    scrollToEnd();
    document.body.dataset.ready = "true";
  }

  const connection = document.getElementById("connection");
  const showConnection = T.connectionLine(connection);

  function setConnection(state, text) {
    showConnection(state);
    if (text) connection.textContent = text;
  }

  const socket = new T.Socket(config.socket, {
    onState: (state) => showConnection(state),
    onOpen: () => {
      const after = subscribedOnce ? lastSequence : null;
      subscribedOnce = true;
      socket.send({ type: "subscribe", conversationId: cid, after });
      if (after !== null) {
        // Ephemeral updates sent while away are not replayed: the snapshot has the cards.
        api(`/conversations/${cid}/snapshot`)
          .then((snapshot) => {
            for (const state of snapshot.tools) placeLive(mergeState(state));
            setOpenTurn(snapshot.openTurn ? snapshot.openTurn.id : null);
          })
          .catch(() => {});
      }
      // An answer lost with the old socket: the same request again (a requestId is an
      // idempotency key) answers what was recorded.
      for (const pending of pendingResolves.values()) socket.send(pending.frame);
    },
    onFrame,
  });

  // --- resolving over the socket ----------------------------------------------------------------

  function resolveOverSocket(callId, body) {
    return new Promise((resolve, reject) => {
      const requestId = T.requestId();
      const frame = Object.assign({ type: "resolve", toolCallId: callId, requestId }, body);
      if (!socket.send(frame)) {
        reject(new Error("Not connected: wait until the page is live again."));
        return;
      }
      pendingResolves.set(requestId, { frame, resolve, reject });
    });
  }

  function settleResolve(frame) {
    const pending = pendingResolves.get(frame.requestId);
    if (!pending) return;
    pendingResolves.delete(frame.requestId);
    if (frame.type === "resolved") pending.resolve(frame);
    else pending.reject(new Error(frame.message || frame.code));
  }

  // --- start -----------------------------------------------------------------------------------

  older.addEventListener("click", loadOlder);
  if ("IntersectionObserver" in root) {
    new IntersectionObserver((entries) => {
      if (ready && entries.some((e) => e.isIntersecting)) loadOlder();
    }).observe(older);
  }
  setInterval(T.tickElapsed, 1000);
  socket.start();
  // For the browser tests and curious users: the page's live parts.
  T.page = { socket, cards, lastSequence: () => lastSequence, placed };
})(typeof self !== "undefined" ? self : this);
