/*
 * The `!command` box of the transcript page (docs/web.md): runs a command in the conversation's
 * workspace as a user turn (POST …/commands); a turn already open refuses it. The page tells
 * the box when a turn opens or ends (`setOpenTurn`), which the box shows (`data-turn`).
 */
(function (root) {
  "use strict";
  const T = root.Toolcore;
  const { api } = T;

  T.commandBox = function commandBox(cid, canRunCommands) {
    const form = document.getElementById("command-form");
    const input = document.getElementById("command-input");
    const context = document.getElementById("command-context");
    const commandStatus = document.getElementById("command-status");

    function setOpenTurn(turnId) {
      form.dataset.turn = turnId ? "open" : "none";
    }

    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const command = input.value.replace(/^\s*!/, "").trim();
      if (!command) {
        commandStatus.textContent = "Type a command first.";
        input.focus();
        return;
      }
      const submit = form.querySelector("button[type=submit]");
      submit.disabled = true;
      commandStatus.textContent = "Starting…";
      try {
        const answer = await api(`/conversations/${cid}/commands`, {
          method: "POST",
          body: { inputId: T.requestId(), command, includeInContext: context.checked },
        });
        setOpenTurn(answer.turnId);
        commandStatus.textContent = `Started: ${command.split("\n")[0]}`;
        input.value = "";
      } catch (error) {
        commandStatus.textContent =
          error.code === "turn_open" ? "A turn is open: commands wait until it ends." : error.message;
      } finally {
        submit.disabled = !canRunCommands;
      }
    });

    return { setOpenTurn };
  };
})(typeof self !== "undefined" ? self : this);
