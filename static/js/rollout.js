// Rollout pages (repository_app/rollouts/): the form shows which servers a choice resolves
// to as soon as it changes; a rollout's page follows each server's state live (a late
// joiner gets the whole rollout first, then each change; rows are keyed by server).
"use strict";

(function () {
  const choice = document.getElementById("rollout-choice");
  if (choice) {
    choice.addEventListener("change", function (event) {
      // Picking a server, a repository or a label also picks that way of choosing.
      const field = event.target;
      const kind = { repository_of: "repository", label: "label", servers: "servers" }[field.name];
      if (kind) {
        const radio = choice.querySelector('input[name="choice"][value="' + kind + '"]');
        if (radio) radio.checked = true;
      }
      if (field.name !== "label") choice.requestSubmit();
    });
  }

  const card = document.getElementById("rollout-card");
  if (!card || !window.Live) return;
  const pk = card.dataset.rollout;
  const time = function (iso) { return iso ? iso.slice(11, 19) : ""; };

  function showTarget(t) {
    const row = card.querySelector('tr[data-server="' + CSS.escape(t.server) + '"]');
    if (!row) return;
    const state = row.querySelector('[data-k="state"]');
    state.textContent = t.state;
    state.className = "rollout-" + t.state;
    row.querySelector('[data-k="reason"]').textContent = t.reason || "";
    row.querySelector('[data-k="message"]').textContent = t.message || "";
    row.querySelector('[data-k="started_at"]').textContent = time(t.started_at);
    row.querySelector('[data-k="ended_at"]').textContent = time(t.ended_at);
  }

  function showState(state, summary) {
    const el = document.getElementById("rollout-state");
    el.textContent = state;
    el.className = "rollout-" + state;
    document.getElementById("rollout-summary").textContent = summary || "";
  }

  function showRollout(r) {
    r.targets.forEach(showTarget);
    showState(r.state, r.summary);
  }

  async function resync() {
    const response = await fetch(card.dataset.api, { credentials: "same-origin" });
    if (response.ok) showRollout(await response.json());
  }

  Live.connect("/ws/rollouts/" + encodeURIComponent(pk) + "/", {
    "rollout.snapshot": function (e) { showRollout(e.rollout); },
    "rollout.target": function (e) { showTarget(e); },
    "rollout.state": function (e) { showState(e.state, e.summary); },
  }, resync);
})();
