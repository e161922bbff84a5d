// A model's checks with their last result on the page's server (the model page and the Try
// page): read from /api/v1/models/<name>/checks, read again when a run ends (the pages
// call Checks.refresh on a "check.result" event), and "Run checks" for who may.
window.Checks = (function () {
  "use strict";
  function csrfToken() {
    const m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }

  function api(model, tail) {
    return "/api/v1/models/" + encodeURIComponent(model) + "/checks" + (tail || "") + window.location.search;
  }

  function cell(text, cls) {
    const td = document.createElement("td");
    td.textContent = text;
    if (cls) td.className = cls;
    return td;
  }

  function verdict(run) {
    if (!run) return ["not run here yet", "muted"];
    if (run.state === "queued" || run.state === "running") return [run.state + "…", "warning"];
    if (run.passed === true) return ["passed", "ok"];
    if (run.passed === false) return ["failed", "error"];
    return ["did not run", "error"];
  }

  async function refresh(card) {
    const model = card.dataset.model;
    const body = card.querySelector("tbody");
    let data;
    try {
      const response = await fetch(api(model), { credentials: "same-origin", headers: { "Accept": "application/json" } });
      data = await response.json();
      if (!response.ok) throw new Error(data.message || response.statusText);
    } catch (e) {
      card.querySelector("[data-k=checks-note]").textContent = "checks not read: " + e.message;
      return;
    }
    body.replaceChildren();
    data.checks.forEach(function (c) {
      const tr = document.createElement("tr");
      tr.dataset.check = c.name;
      const [word, cls] = verdict(c.last_run);
      tr.appendChild(cell(c.name));
      const state = cell(word, cls);
      state.dataset.k = "verdict";
      tr.appendChild(state);
      tr.appendChild(cell(c.last_run && c.last_run.worst !== null ? String(c.last_run.worst) : "—"));
      const last = cell(c.last_run ? (c.last_run.message || "") + (c.last_run.trigger ? " (" + c.last_run.trigger + ")" : "") : "");
      if (c.last_run && c.last_run.restore) {
        const offer = document.createElement("a");
        offer.href = c.last_run.restore.url;
        offer.dataset.k = "restore";
        offer.textContent = " Restore config #" + c.last_run.restore.number + "…";
        last.appendChild(offer);
      }
      tr.appendChild(last);
      body.appendChild(tr);
    });
    card.querySelector("[data-k=checks-note]").textContent = data.checks.length ? "" : "No checks yet: keep a tried request's answer as one (Try it).";
    const run = card.querySelector("[data-k=run-checks]");
    if (run) run.disabled = !data.checks.length || run.dataset.refused === "1";
  }

  async function runAll(card) {
    const note = card.querySelector("[data-k=checks-note]");
    const response = await fetch(api(card.dataset.model, "/run"), {
      method: "POST", credentials: "same-origin",
      headers: { "Accept": "application/json", "X-CSRFToken": csrfToken() },
    });
    let data = {};
    try { data = await response.json(); } catch (e) { data = { message: response.statusText }; }
    note.textContent = response.ok ? data.runs.length + " queued" : data.message;
    refresh(card);
  }

  function all() { return document.querySelectorAll("[data-checks-card]"); }

  document.addEventListener("DOMContentLoaded", function () {
    all().forEach(function (card) {
      const run = card.querySelector("[data-k=run-checks]");
      if (run) run.addEventListener("click", function () { runAll(card); });
      refresh(card);
    });
  });

  return { refresh: function () { all().forEach(refresh); } };
})();
