// The fleet overview, live: /ws/fleet/ relays the repository and server groups of every
// server the page shows. Each column keeps what its server last said (up or down, Triton's
// states); a cell follows fleet/overview.py's `cell` rule.
"use strict";

(function () {
  const data = JSON.parse(document.getElementById("fleet-data").textContent);
  const columns = {};
  const order = [];

  function keep(c) {
    columns[c.name] = { up: c.up, reason: c.reason, models: Object.assign({}, c.models), onDisk: new Set(c.on_disk) };
    if (order.indexOf(c.name) < 0) order.push(c.name);
  }
  data.columns.forEach(keep);

  function cell(col, model) {
    const info = col.up ? col.models[model] : undefined;
    if (info) return { state: info.state, label: Live.label(info), tone: Live.tone(info), reason: info.reason || "" };
    const present = col.onDisk.has(model);
    if (!col.up && present) return { state: "unknown", label: "unknown", tone: "neutral", reason: col.reason };
    if (present) return { state: "not loaded", label: "not loaded", tone: "neutral", reason: "" };
    return { state: "absent", label: "—", tone: "neutral", reason: data.absent };
  }

  function modelHref(model, server) {
    return data.modelUrl.replace("__model__", encodeURIComponent(model)) + "?server=" + encodeURIComponent(server);
  }

  function paint(td, model, info) {
    td.dataset.state = info.state;
    const link = info.state !== "absent";
    let el = td.querySelector("[data-cell]");
    if (!el || (el.tagName === "A") !== link) {
      const next = document.createElement(link ? "a" : "span");
      next.dataset.cell = "";
      if (link) next.href = modelHref(model, td.dataset.server);
      if (el) el.replaceWith(next); else td.appendChild(next);
      el = next;
    }
    el.textContent = info.label;
    el.className = "state tone-" + info.tone;
    el.title = info.reason || "";
  }

  const tbody = document.querySelector("#fleet-matrix tbody");

  function rowOf(model) {
    return tbody.querySelector('tr[data-model="' + CSS.escape(model) + '"]');
  }

  // A model no shown server had when the page was rendered: a row of its own, in order.
  function addRow(model) {
    if (rowOf(model)) return;
    const tr = document.createElement("tr");
    tr.dataset.model = model;
    const th = document.createElement("th");
    th.scope = "row";
    th.textContent = model;
    tr.appendChild(th);
    order.forEach(function (server) {
      const td = document.createElement("td");
      td.dataset.server = server;
      tr.appendChild(td);
      paint(td, model, cell(columns[server], model));
    });
    const after = Array.from(tbody.querySelectorAll("tr[data-model]")).find(function (row) { return row.dataset.model > model; });
    tbody.insertBefore(tr, after || null);
    const empty = tbody.querySelector("tr:not([data-model])");
    if (empty) empty.remove();
  }

  function card(server) {
    return document.querySelector('[data-server-card="' + CSS.escape(server) + '"]');
  }

  function renderColumn(server) {
    const col = columns[server];
    tbody.querySelectorAll('td[data-server="' + CSS.escape(server) + '"]').forEach(function (td) {
      const model = td.parentNode.dataset.model;
      paint(td, model, cell(col, model));
    });
    const note = document.querySelector('#fleet-matrix th[data-server="' + CSS.escape(server) + '"] [data-k="column-note"]');
    if (note) {
      note.hidden = col.up;
      note.textContent = col.up ? "" : col.reason.replace(/^Triton /, "");
    }
    const box = card(server);
    if (!box) return;
    const health = box.querySelector('[data-k="health"]');
    health.textContent = "";
    const word = document.createElement("span");
    word.className = col.up ? "ok" : "error";
    word.textContent = col.up ? "up" : "down";
    health.appendChild(word);
    if (!col.up) health.appendChild(document.createTextNode(" " + col.reason));
    const ready = Object.values(col.models).filter(function (m) { return m.state === "READY"; }).length;
    box.querySelector('[data-k="models"]').textContent = ready + " ready · " + col.onDisk.size + " in its repository";
  }

  function serverOf(event) {
    return event.group ? event.group.slice(event.group.indexOf(".") + 1) : "";
  }

  function applyStates(event) {
    const server = serverOf(event);
    const col = columns[server];
    if (!col) return;
    if (event.triton) {  // a poller's whole state: it watches this server (now live)
      col.up = Boolean(event.triton.up);
      col.reason = col.up ? "" : (event.triton.reason || "Triton unreachable: " + event.triton.message);
      const note = card(server) && card(server).querySelector('[data-k="not-watched"]');
      if (note) note.hidden = true;
    }
    if (event.full) col.models = col.up ? Object.assign({}, event.models) : {};
    else Object.assign(col.models, event.models || {});
    Object.keys(event.models || {}).forEach(addRow);
    renderColumn(server);
  }

  function startedAction(event) {
    const col = columns[serverOf(event)];
    if (!col || event.phase !== "started") return;
    const busy = event.action === "unload" ? "UNLOADING" : "LOADING";
    col.models[event.model] = { state: busy, label: busy, tone: "busy", reason: event.action + " by " + event.by };
    addRow(event.model);
    renderColumn(serverOf(event));
  }

  function gpuText(gpus) {
    const util = gpus.map(function (g) { return g.utilization; }).filter(function (v) { return v !== null && v !== undefined; });
    const used = gpus.map(function (g) { return g.memory_used_bytes; }).filter(function (v) { return v !== null && v !== undefined; });
    const total = gpus.map(function (g) { return g.memory_total_bytes; }).filter(Boolean);
    const parts = [gpus.length + " GPU" + (gpus.length === 1 ? "" : "s")];
    const sum = function (xs) { return xs.reduce(function (a, b) { return a + b; }, 0); };
    if (util.length) parts.push((100 * sum(util) / util.length).toFixed(0) + "% busy");
    if (used.length && total.length) parts.push((sum(used) / 2 ** 30).toFixed(1) + " of " + (sum(total) / 2 ** 30).toFixed(1) + " GiB");
    return parts.join(" · ");
  }

  function applyMetrics(event) {
    const box = card(serverOf(event));
    if (!box) return;
    const rates = Object.values(event.models || {}).map(function (m) { return m.requests_per_s; })
      .filter(function (v) { return v !== null && v !== undefined; });
    box.querySelector('[data-k="load"]').textContent = rates.length
      ? rates.reduce(function (a, b) { return a + b; }, 0).toFixed(1) + " req/s" : "—";
    const gpus = Object.values(event.gpus || {});
    box.querySelector('[data-k="gpus"]').textContent = gpus.length ? gpuText(gpus) : "none in its metrics";
  }

  const query = data.labels.length
    ? "?" + data.labels.map(function (l) { return "label=" + encodeURIComponent(l); }).join("&") : "";

  async function resync() {
    const response = await fetch(data.statesUrl + query, { credentials: "same-origin" });
    if (!response.ok) return;
    const fresh = await response.json();
    fresh.columns.filter(function (c) { return columns[c.name]; }).forEach(keep);
    fresh.rows.forEach(addRow);
    order.forEach(renderColumn);
  }

  Live.connect("/ws/fleet/" + query, {
    "models.states": applyStates,
    "model.action": startedAction,
    "server.metrics": applyMetrics,
  }, resync);
})();
