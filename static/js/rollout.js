// Rollout pages (fleet/rollouts/): the form shows which servers a choice resolves
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
  // States only move forward. A resync's answer may be read before an event the socket
  // has already shown (its fetch starts when the socket opens): it never takes a row or
  // the rollout back (a rollout that ended would otherwise read "running" for good).
  const TARGET_RANK = { pending: 0, running: 1, succeeded: 2, failed: 2 };
  const ROLLOUT_RANK = { running: 0, succeeded: 1, partial: 1, failed: 1 };
  const older = function (ranks, next, shown) { return (ranks[next] || 0) < (ranks[shown] || 0); };

  function showTarget(t) {
    const row = card.querySelector('tr[data-server="' + CSS.escape(t.server) + '"]');
    if (!row) return;
    const state = row.querySelector('[data-k="state"]');
    if (older(TARGET_RANK, t.state, state.textContent)) return;
    state.textContent = t.state;
    state.className = "rollout-" + t.state;
    row.querySelector('[data-k="reason"]').textContent = t.reason || "";
    row.querySelector('[data-k="message"]').textContent = t.message || "";
    row.querySelector('[data-k="started_at"]').textContent = time(t.started_at);
    row.querySelector('[data-k="ended_at"]').textContent = time(t.ended_at);
  }

  function showState(state, summary) {
    const el = document.getElementById("rollout-state");
    if (older(ROLLOUT_RANK, state, el.textContent)) return;
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
    // How many answers were handled (what a test waits for before it reads the page).
    card.dataset.synced = String(Number(card.dataset.synced || 0) + 1);
  }

  Live.connect("/ws/rollouts/" + encodeURIComponent(pk) + "/", {
    "rollout.snapshot": function (e) { showRollout(e.rollout); },
    "rollout.target": function (e) { showTarget(e); },
    "rollout.state": function (e) { showState(e.state, e.summary); },
  }, resync);
})();
