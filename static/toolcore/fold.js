/*
 * The fold of `tool.updated` in JavaScript: apply_tool_update and the bounded output it needs,
 * ported from projections/fold.py, projections/tool_output.py and projections/json_cost.py.
 *
 * The browser pages and Node load the same file (a plain script in the page, `require` in
 * Node). tests/projections/vectors/fold.json is the contract both ports pass
 * (tests/projections/test_fold_js.py in Node, tests/browser/test_fold_parity.py in Chromium).
 *
 * Costs are per code point, as Python counts them. JavaScript strings are UTF-16: a surrogate
 * pair is one code point (cost 4, 4 UTF-8 bytes) and a lone surrogate another (cost 6, its
 * `\uXXXX` escape; 3 UTF-8 bytes), so cuts never split a pair.
 */
(function (root, factory) {
  "use strict";
  const fold = factory();
  if (typeof module === "object" && module.exports) {
    module.exports = fold;
  } else {
    root.Toolcore = root.Toolcore || {};
    root.Toolcore.fold = fold;
  }
})(typeof self !== "undefined" ? self : this, function () {
  "use strict";

  const TOOL_OUTPUT_MAX_BYTES = 16384;
  const HEAD = 4096;
  const OVERHEAD = 64;
  const TAIL = TOOL_OUTPUT_MAX_BYTES - HEAD - OVERHEAD; // 12224
  const WHOLE_MAX_BYTES = HEAD + TAIL; // 16320: an output costing at most this is kept whole
  // projections/vocabulary.py FINAL_TOOL_STATUSES (tests/projections/test_vocabulary.py compares).
  const FINAL_STATUSES = new Set(["completed", "failed", "declined", "cancelled", "indeterminate"]);
  const KIB = 1024;
  const MIB = 1024 * 1024;

  class ToolUpdateError extends Error {
    constructor(field, problem) {
      super(field ? `${field}: ${problem}` : problem);
      this.name = "ToolUpdateError";
      this.field = field;
    }
  }

  // JSON cost of one code point below U+0080: '"' and '\' 2, \b \t \n \f \r 2, other controls 6.
  const ASCII_COSTS = new Uint8Array(0x80);
  for (let c = 0; c < 0x80; c++) {
    if (c === 0x22 || c === 0x5c || c === 8 || c === 9 || c === 10 || c === 12 || c === 13) {
      ASCII_COSTS[c] = 2;
    } else {
      ASCII_COSTS[c] = c < 0x20 ? 6 : 1;
    }
  }

  function isHigh(unit) {
    return unit >= 0xd800 && unit <= 0xdbff;
  }

  function isLow(unit) {
    return unit >= 0xdc00 && unit <= 0xdfff;
  }

  /* Cost and UTF-8 size of the code point of a single UTF-16 unit (not half of a pair). */
  function unitCost(unit) {
    if (unit < 0x80) return ASCII_COSTS[unit];
    if (unit < 0x800) return 2;
    return unit >= 0xd800 && unit <= 0xdfff ? 6 : 3;
  }

  function unitUtf8(unit) {
    if (unit < 0x80) return 1;
    return unit < 0x800 ? 2 : 3;
  }

  /* The JSON bytes of the body of `s` written as a JSON string with non-ASCII kept. */
  function jsonCost(s) {
    let cost = 0;
    const n = s.length;
    for (let i = 0; i < n; i++) {
      const unit = s.charCodeAt(i);
      if (isHigh(unit) && i + 1 < n && isLow(s.charCodeAt(i + 1))) {
        cost += 4;
        i++;
      } else {
        cost += unitCost(unit);
      }
    }
    return cost;
  }

  /* UTF-8 bytes of s[start:stop] (UTF-16 indices on code point boundaries). */
  function utf8Between(s, start, stop) {
    let size = 0;
    for (let i = start; i < stop; i++) {
      const unit = s.charCodeAt(i);
      if (isHigh(unit) && i + 1 < stop && isLow(s.charCodeAt(i + 1))) {
        size += 4;
        i++;
      } else {
        size += unitUtf8(unit);
      }
    }
    return size;
  }

  function utf8Size(s) {
    return utf8Between(s, 0, s.length);
  }

  /* [end, cost]: the longest prefix of `s` costing at most `limit` ends at UTF-16 index end. */
  function prefixWithin(s, limit) {
    let cost = 0;
    let i = 0;
    const n = s.length;
    while (i < n) {
      const unit = s.charCodeAt(i);
      const pair = isHigh(unit) && i + 1 < n && isLow(s.charCodeAt(i + 1));
      const c = pair ? 4 : unitCost(unit);
      if (cost + c > limit) break;
      cost += c;
      i += pair ? 2 : 1;
    }
    return [i, cost];
  }

  /* [start, cost]: the longest suffix of s[from:] costing at most `limit` starts at `start`. */
  function suffixWithin(s, limit, from) {
    const floor = from || 0;
    let cost = 0;
    let i = s.length;
    while (i > floor) {
      const unit = s.charCodeAt(i - 1);
      const pair = isLow(unit) && i - 2 >= floor && isHigh(s.charCodeAt(i - 2));
      const c = pair ? 4 : unitCost(unit);
      if (cost + c > limit) break;
      cost += c;
      i -= pair ? 2 : 1;
    }
    return [i, cost];
  }

  /* {text} when it costs at most 16320 JSON bytes, else head, omittedBytes, tail. */
  function boundToolOutput(text) {
    if (jsonCost(text) <= WHOLE_MAX_BYTES) return { text };
    const [head] = prefixWithin(text, HEAD);
    const [tailStart] = suffixWithin(text, TAIL, head);
    return {
      text: text.slice(0, head),
      omittedBytes: utf8Between(text, head, tailStart),
      tail: text.slice(tailStart),
    };
  }

  /*
   * The bounded output of the text of `prev` followed by `delta`: any chunking of a text gives
   * exactly boundToolOutput of the whole text. The head never moves; once cut, the tail becomes
   * tail + delta less its shortest prefix that brings it within TAIL, counted in omittedBytes.
   */
  function appendToolOutput(prev, delta) {
    if (prev === null || prev === undefined) return boundToolOutput(delta);
    if (!delta) return prev;
    if (!("tail" in prev)) return boundToolOutput(prev.text + delta);
    const joined = prev.tail + delta;
    const [drop] = suffixWithin(joined, TAIL);
    return {
      text: prev.text,
      omittedBytes: prev.omittedBytes + utf8Between(joined, 0, drop),
      tail: drop ? joined.slice(drop) : joined,
    };
  }

  /* `N` tenths of `unit`, rounded half up, as "X.Y". */
  function tenths(n, unit) {
    const t = Math.floor((n * 20 + unit) / (2 * unit));
    return `${Math.floor(t / 10)}.${t % 10}`;
  }

  /* 1 byte, N bytes, X.Y KiB, X.Y MiB: one decimal rounded half up, unit chosen first. */
  function sizeWords(n) {
    if (n === 1) return "1 byte";
    if (n < KIB) return `${n} bytes`;
    if (n < MIB) return `${tenths(n, KIB)} KiB`;
    return `${tenths(n, MIB)} MiB`;
  }

  function omittedMarker(out) {
    return `[${sizeWords(out.omittedBytes)} of output not shown]`;
  }

  /* The text of a bounded output, with [SIZE of output not shown] where it was cut. */
  function renderToolOutput(out) {
    if (!("tail" in out)) return out.text;
    return `${out.text}\n${omittedMarker(out)}\n${out.tail}`;
  }

  function isFinal(state) {
    return typeof state.status === "string" && FINAL_STATUSES.has(state.status);
  }

  /*
   * The state after `update`: a new object of exactly the fields received so far. `prev` (null
   * for an unseen call) is never modified. `output` with `outputDelta` is refused before
   * anything else. An update to a final call changes nothing; otherwise present fields replace
   * held ones, `outputDelta` is appended with appendToolOutput and never held, `startedAt` is
   * written once, `finishedAt` once and only when the status after this update is final.
   */
  function applyToolUpdate(prev, update) {
    if ("output" in update && "outputDelta" in update) {
      throw new ToolUpdateError("outputDelta", "output and outputDelta cannot come together");
    }
    const state = prev ? Object.assign({}, prev) : {};
    if (isFinal(state)) return state;
    for (const field of Object.keys(update)) {
      const value = update[field];
      if (field === "outputDelta") {
        state.output = appendToolOutput("output" in state ? state.output : null, value);
      } else if (field !== "startedAt" && field !== "finishedAt") {
        state[field] = value;
      }
    }
    if ("startedAt" in update && !("startedAt" in state)) state.startedAt = update.startedAt;
    if ("finishedAt" in update && !("finishedAt" in state) && isFinal(state)) {
      state.finishedAt = update.finishedAt;
    }
    return state;
  }

  return {
    TOOL_OUTPUT_MAX_BYTES,
    HEAD,
    TAIL,
    OVERHEAD,
    FINAL_STATUSES,
    ToolUpdateError,
    jsonCost,
    utf8Size,
    boundToolOutput,
    appendToolOutput,
    renderToolOutput,
    omittedMarker,
    sizeWords,
    isFinal,
    applyToolUpdate,
  };
});
