/*
 * A card's interaction (docs/web.md, "Approval and question cards"): the approval form (Allow
 * once, Always allow with the rule it saves, Deny), the question form of `ask_user`, and the
 * record of a resolved one (the question asked and the answer recorded). Methods of
 * `Toolcore.Card` (cards.js), which its `renderInteraction` calls; they resolve over the
 * socket through the card's context (`ctx.resolve`).
 */
(function (root) {
  "use strict";
  const T = root.Toolcore;
  const { h, clear } = T;

  Object.assign(T.Card.prototype, {
      approvalForm(request) {
        const rules = Array.isArray(request.suggestedRules) ? request.suggestedRules : [];
        const status = h("p", { class: "interaction-status", role: "status" });
        const prompt = h("p", { id: `card-${this.n}-ask` }, h("strong", null, "Approval needed. "), request.reason || "This tool needs approval.");
        let chosen = 0;
        const always = h("button", { type: "button", class: "secondary" });
        const label = () => {
          const rule = rules[chosen];
          clear(always).append("Always allow ", h("code", null, rule ? rule.pattern : ""));
          always.setAttribute("aria-label", rule ? `Always allow: save the rule ${rule.toolName || ""} ${rule.pattern}` : "Always allow");
        };
        const group = h("div", { class: "interaction approval", role: "group", "aria-labelledby": `card-${this.n}-ask` }, prompt);
        if (rules.length > 1) {
          const select = h("select", { id: `card-${this.n}-rule`, onchange: (e) => { chosen = Number(e.target.value); label(); } },
            rules.map((rule, i) => h("option", { value: i }, rule.pattern)));
          group.append(h("p", { class: "rule-choice" }, h("label", { for: select.id }, "Rule to save with Always allow"), " ", select));
        }
        const buttons = [];
        const send = (body, doing) => {
          buttons.forEach((b) => (b.disabled = true));
          status.textContent = doing;
          this.ctx.resolve(this.id, Object.assign({ kind: "approval" }, body)).then(
            (frame) => {
              this.record = { interaction: { kind: "approval", request }, resolution: frame.resolution, resolvedBy: frame.resolvedBy };
              this.interactionKey = null;
              this.render();
            },
            (error) => {
              status.textContent = error.message;
              buttons.forEach((b) => (b.disabled = false));
            },
          );
        };
        const once = h("button", { type: "button", class: "primary", onclick: () => send({ decision: "allow" }, "Allowing…") }, "Allow once");
        always.addEventListener("click", () => send({ decision: "allow", persist: true, rule: chosen }, "Allowing and saving the rule…"));
        const deny = h("button", { type: "button", class: "danger", onclick: () => send({ decision: "deny" }, "Denying…") }, "Deny");
        buttons.push(once, always, deny);
        if (rules.length) label();
        else always.hidden = true;
        group.append(h("div", { class: "actions" }, once, rules.length ? always : null, deny), status);
        if (!rules.length) group.append(h("p", { class: "muted" }, "No rule can be saved for this call: allow it once or deny it."));
        return group;
      },

      questionForm(request) {
        const questions = Array.isArray(request.questions) ? request.questions : [];
        const status = h("p", { class: "interaction-status", role: "status" });
        const readers = [];
        const form = h("form", { class: "interaction questions", "aria-labelledby": `card-${this.n}-q` },
          h("p", { id: `card-${this.n}-q` }, h("strong", null, questions.length === 1 ? "A question for you" : "Questions for you")));
        questions.forEach((q, qi) => {
          const base = `card-${this.n}-q${qi}`;
          const fieldset = h("fieldset", null, h("legend", null, q.question));
          const options = Array.isArray(q.options) ? q.options : [];
          const inputs = options.map((option, oi) => {
            const input = h("input", { type: q.multiple ? "checkbox" : "radio", name: base, id: `${base}-o${oi}`, value: option });
            fieldset.append(h("div", { class: "option" }, input, h("label", { for: input.id }, option)));
            return input;
          });
          const free = h(options.length ? "input" : "textarea", { id: `${base}-free`, name: `${base}-free`, rows: options.length ? null : 2 });
          if (options.length) free.type = "text";
          fieldset.append(h("div", { class: "free" }, h("label", { for: free.id }, options.length ? "Another answer" : "Your answer"), free));
          form.append(fieldset);
          readers.push(() => {
            const text = free.value.trim();
            if (q.multiple) {
              const picked = inputs.filter((i) => i.checked).map((i) => i.value);
              if (text) picked.push(text);
              return picked.length ? picked : null;
            }
            if (text) return text;
            const picked = inputs.find((i) => i.checked);
            return picked ? picked.value : null;
          });
        });
        const submit = h("button", { type: "submit", class: "primary" }, questions.length === 1 ? "Send answer" : "Send answers");
        form.append(h("div", { class: "actions" }, submit), status);
        form.addEventListener("submit", (event) => {
          event.preventDefault();
          const answers = {};
          for (let i = 0; i < questions.length; i++) {
            const value = readers[i]();
            if (value === null) {
              status.textContent = `Answer “${questions[i].question}” first.`;
              return;
            }
            answers[questions[i].id] = value;
          }
          submit.disabled = true;
          status.textContent = "Sending…";
          this.ctx.resolve(this.id, { kind: "input", value: { answers } }).then(
            (frame) => {
              this.record = { interaction: { kind: "input", request }, resolution: frame.resolution, resolvedBy: frame.resolvedBy };
              this.interactionKey = null;
              this.render();
            },
            (error) => {
              status.textContent = error.message;
              submit.disabled = false;
            },
          );
        });
        return form;
      },

      /* A resolved interaction: the question asked and the answer recorded. */
      recordView(record, state) {
        const { interaction, resolution, resolvedBy } = record;
        const request = interaction.request || {};
        const by = resolvedBy ? ` by ${resolvedBy}` : "";
        const node = h("div", { class: "interaction record" });
        if (interaction.kind === "approval") {
          node.append(h("p", null, h("strong", null, "Approval asked. "), request.reason || ""));
          let answer = state.status === "declined" ? "Denied." : "";
          if (resolution && resolution.decision === "deny") answer = `Denied${by}.`;
          else if (resolution && resolution.persist) {
            const rules = request.suggestedRules || [];
            const rule = typeof resolution.rule === "number" ? rules[resolution.rule] : rules.find((r) => r.pattern === resolution.rule) || rules[0];
            answer = `Always allowed${by}`;
            node.append(h("p", { class: "answer" }, `${answer}; rule saved: `, h("code", null, rule ? rule.pattern : "")));
            return node;
          } else if (resolution) answer = `Allowed once${by}.`;
          if (answer) node.append(h("p", { class: "answer" }, answer));
          return node;
        }
        const answers = (resolution && resolution.value && resolution.value.answers) || {};
        const list = h("dl", { class: "answers" });
        for (const q of request.questions || []) {
          const value = answers[q.id];
          list.append(
            h("dt", null, q.question),
            h("dd", null, value === undefined ? "…" : Array.isArray(value) ? value.join(", ") : String(value)),
          );
        }
        node.append(h("p", null, h("strong", null, resolution ? `Answered${by}` : "Questions asked")), list);
        return node;
      }
  });
})(this);
