// The config search page: candidates keyed by config key (a resync or a late event never
// duplicates one), live over the search's queue job group (/ws/sweeps/<carrier>/). The page
// redraws from events alone: the Pareto chart grows as levels are measured (search.candidate),
// the ranking and the Pareto front come from the server (search.result), and what a run
// changes in the search, a budget taken from the current config's knee and the restore's
// message, comes as search.changed. It fetches its snapshot over HTTP only when it opens or
// reconnects, on a gap in the events' sequence, and on an event type it does not know.
"use strict";

window.SearchPage = (function () {
  const candidates = new Map();
  let search = null;
  let result = null;
  let options = {};
  let renderQueued = false;
  const FINISHED = ["succeeded", "failed", "cancelled", "interrupted"];

  // The two metrics candidates are judged on (search.metrics, named by the server):
  // infer/s and the request latency unless the search says otherwise (a decoupled model's
  // responses/s and first response p95, goodput).
  function metrics() {
    const pct = search && search.constraints ? search.constraints.percentile : 95;
    const lat = pct === "avg" ? "avg" : "p" + pct;
    return (search && search.metrics) || {
      throughput: { key: "throughput", label: "throughput", unit: "infer/s" },
      latency: { key: lat === "avg" ? "avg_us" : lat + "_us", label: lat, unit: "ms" },
    };
  }
  function latencyKey() { return metrics().latency.key; }
  function latencyLabel() { return metrics().latency.label; }
  // A level's figure: a field, or an `extra` entry (a streaming level's first response).
  function figure(lv, key) {
    if (lv[key] !== undefined && lv[key] !== null) return lv[key];
    const extra = lv.extra || {};
    return extra[key] === undefined ? null : extra[key];
  }
  function setText(id, text) { const el = document.getElementById(id); if (el) el.textContent = text; }
  function schedule() {
    if (renderQueued) return;
    renderQueued = true;
    requestAnimationFrame(function () { renderQueued = false; render(); });
  }
  function merge(list) { (list || []).forEach(function (c) { candidates.set(c.key, c); }); }
  function applyData(data) {
    if (data.search) search = Object.assign(search || {}, data.search);
    if (data.candidates) merge(data.candidates);
    if (data.result) result = data.result;
  }

  // A measured level as the chart draws it (`c`: its candidate, or a front point).
  function chartPoint(c, concurrency, throughput, latencyUs, rounds) {
    return { key: c.key, seq: c.seq, baseline: c.baseline, concurrency: concurrency,
      short: "#" + c.seq + " @" + concurrency,
      label: "#" + c.seq + " " + c.description + " @ concurrency " + concurrency + (rounds ? " (median of " + rounds + " rounds)" : ""),
      x: latencyUs / 1000, y: throughput };
  }
  // Each candidate's levels as it is judged: the medians of its re-measurement rounds
  // when it has them (effective_levels), else its one measurement.
  function points() {
    const m = metrics();
    const out = [];
    candidates.forEach(function (c) {
      if (c.state === "failed") return;
      const levels = (c.effective_levels && c.effective_levels.length) ? c.effective_levels : (c.levels || []);
      levels.forEach(function (lv) {
        const lat = figure(lv, m.latency.key);
        const y = figure(lv, m.throughput.key);
        if (lat === null || !(lv.throughput > 0) || y === null) return;
        out.push(chartPoint(c, lv.concurrency, y, lat, lv.rounds));
      });
    });
    return out;
  }
  // The Pareto front is the server's (result.front_points, sorted by latency): drawn, not
  // computed here.
  function front() {
    return ((result && result.front_points) || []).map(function (p) {
      return chartPoint(p, p.concurrency, p.throughput, p.latency_us, p.rounds);
    });
  }

  function renderChart() {
    const pts = points();
    const f = front();
    // One "best" marker: the recommended candidate at the concurrency it is judged at.
    const bp = result && result.best_point;
    const best = pts.filter(function (p) { return bp && p.key === bp[0] && p.concurrency === bp[1]; }).slice(0, 1);
    const current = pts.filter(function (p) { return p.baseline; });
    const c = search.constraints || {};
    const m = metrics();
    // The constraint lines on the axes they bound: the x axis's budget (the first response's
    // when the x axis is), the floor (infer/s) when the y axis is infer/s.
    const xBudget = m.latency.key.indexOf("first_response_") === 0 ? c.first_response_budget_ms : c.latency_budget_ms;
    const yFloor = m.throughput.key === "throughput" ? c.min_throughput : null;
    const shapes = [];
    if (xBudget) shapes.push({ type: "line", xref: "x", yref: "paper", x0: xBudget, x1: xBudget, y0: 0, y1: 1, line: { dash: "dash", color: "#d92d20" } });
    if (yFloor) shapes.push({ type: "line", xref: "paper", yref: "y", x0: 0, x1: 1, y0: yFloor, y1: yFloor, line: { dash: "dash", color: "#f79009" } });
    function trace(list, name, style, labelled) {
      return Object.assign({ type: "scatter", mode: labelled ? "markers+text" : "markers", name: name, x: list.map(function (p) { return p.x; }), y: list.map(function (p) { return p.y; }),
        hovertext: list.map(function (p) { return p.label; }), hoverinfo: "text+x+y",
        text: labelled ? list.map(function (p) { return p.short; }) : undefined, textposition: "top center", textfont: { size: 10 } }, style);
    }
    Plotly.react("chart-pareto", [
      trace(pts, "measured", { marker: { color: "#98a2b3", size: 8 } }, false),
      trace(f, "Pareto front", { mode: "lines+markers+text", marker: { color: "#1570ef", size: 10 }, line: { color: "#1570ef" } }, true),
      trace(current, "current config", { marker: { symbol: "circle-open", size: 14, color: "#101828" } }, false),
      // Labelled where the front's label does not already name it.
      trace(best, "best", { marker: { symbol: "star", size: 16, color: "#12b76a" } }, best.length > 0 && !f.some(function (p) { return p.key === best[0].key && p.concurrency === best[0].concurrency; })),
    ], {
      // The legend above the plot area: at the bottom it sat on the x axis title.
      margin: { l: 60, r: 15, t: 40, b: 45 }, legend: { orientation: "h", x: 0, xanchor: "left", y: 1.02, yanchor: "bottom" }, shapes: shapes,
      xaxis: { title: { text: latencyLabel() + " latency (ms)" + (xBudget ? " · budget " + xBudget + " ms" : "") }, rangemode: "tozero" },
      yaxis: { title: { text: m.throughput.label + " (" + m.throughput.unit + ")" + (yFloor ? " · floor " + yFloor : "") }, rangemode: "tozero" },
    }, { displayModeBar: false, responsive: true });
  }

  function fmt(v, scale, digits) {
    if (v === null || v === undefined) return "n/a";
    return (v / (scale || 1)).toFixed(digits === undefined ? 2 : digits);
  }
  function td(text) { const el = document.createElement("td"); el.textContent = text; return el; }

  function renderTable() {
    const body = document.querySelector("#ranking tbody");
    body.innerHTML = "";
    const finished = FINISHED.indexOf(search.state) >= 0;
    ((result && result.rows) || []).forEach(function (r) {
      const tr = document.createElement("tr");
      tr.dataset.key = r.key;
      if (result.best_key === r.key) tr.className = "best";
      else if (r.tied) tr.className = "tied";
      else if (!r.feasible) tr.className = "infeasible";
      const m = metrics();
      const objective = r.objective === null ? "—" : (search.objective === "min_latency" ? fmt(r.objective, 1000) + " ms" : fmt(r.objective, 1, 1) + " " + m.throughput.unit);
      // "#N" is the candidate's number everywhere (the chart's labels too); the rank has
      // its own column.
      [String(r.rank), "#" + r.seq + " " + r.description + (r.baseline ? " (current)" : ""), r.state + (r.state === "measured" && !r.feasible ? ", misses constraints" : ""),
        objective, fmt(r.throughput, 1, 1), r.latency_us === null ? "—" : latencyLabel() + " " + fmt(r.latency_us, 1000) + " ms",
        r.concurrency === null ? "—" : String(r.concurrency),
        (r.spread_text || (r.rounds ? r.rounds + " round" + (r.rounds > 1 ? "s" : "") : "one measurement")) + (r.tied ? " · tied with the best" : ""),
        r.gpu_memory_bytes ? fmt(r.gpu_memory_bytes, 1048576, 0) + " MB" : "n/a",
        (r.diff || []).join("; ") || "(same as current)", r.reason || ""].forEach(function (t) { tr.appendChild(td(t)); });
      const actions = document.createElement("td");
      const link = document.createElement("a");
      link.href = options.configUrl + "?key=" + encodeURIComponent(r.key); link.textContent = "config"; link.className = "small";
      actions.appendChild(link);
      if (options.canApply && finished && r.state === "measured") {
        const b = document.createElement("button");
        b.type = "button"; b.className = "secondary apply"; b.textContent = "Apply";
        b.addEventListener("click", function () { apply(r.key, b); });
        actions.appendChild(document.createTextNode(" ")); actions.appendChild(b);
      }
      tr.appendChild(actions);
      body.appendChild(tr);
    });
  }

  function renderStatus() {
    const state = search.state;
    const el = document.getElementById("search-state");
    el.textContent = state + (search.cancel_requested && state === "running" ? " (cancelling…)" : "")
      // Pages only read: a worker's watchdog, not this page, declares the job interrupted.
      + (search.heartbeat_stale && state === "running" ? " (no heartbeat for 20 s: its worker seems gone)" : "");
    el.className = "state-" + state;
    setText("queue-position", state === "queued" && search.queue_position ? "position " + search.queue_position + " in the queue" : "");
    const err = document.getElementById("search-error");
    err.hidden = !search.error; err.textContent = search.error || "";
    if (window.JobPlacement) JobPlacement.render(search.placement);
    const show = function (id, on) { const b = document.getElementById(id); if (b) b.hidden = !on; };
    show("btn-cancel", state === "queued" || state === "running");
    show("btn-resume", ["failed", "cancelled", "interrupted"].indexOf(state) >= 0);
    // Nothing to apply when the recommendation is to keep the current config.
    const bestRow = result && ((result.rows || []).find(function (r) { return r.key === result.best_key; }) || null);
    show("btn-apply-best", FINISHED.indexOf(state) >= 0 && !!(result && result.best_key) && !(bestRow && bestRow.baseline));
    if (result) setText("recommendation", result.recommendation);
    if (search.constraints_text) setText("constraints", search.constraints_text);
    if (search.budget_from) setText("budget-from", "(budget: " + search.budget_from + ")");
    setText("restore-message", search.restore_message ? "Restore: " + search.restore_message : "");
    const done = Array.from(candidates.values()).filter(function (c) { return c.state !== "measuring"; }).length;
    const measuring = Array.from(candidates.values()).filter(function (c) { return c.state === "measuring"; });
    const total = Math.max(search.planned_runs || 1, done);
    document.getElementById("progress-bar").style.width = Math.min(100, 100 * done / total) + "%";
    let text = done + " / " + total + " candidates" + (search.mode === "quick" ? " at most" : "");
    if (state === "running" && measuring.length) text += " · measuring " + measuring[0].description;
    else if (state !== "running") text += " · " + state;
    setText("progress-text", text);
  }

  function renderHeads() {
    const m = metrics();
    setText("head-throughput", m.throughput.label.charAt(0).toUpperCase() + m.throughput.label.slice(1) + " (" + m.throughput.unit + ")");
    setText("head-latency", m.latency.label.charAt(0).toUpperCase() + m.latency.label.slice(1));
    setText("chart-title", m.throughput.label.charAt(0).toUpperCase() + m.throughput.label.slice(1) + " vs " + m.latency.label + " latency");
  }

  function render() {
    if (!search) return;
    renderHeads();
    renderStatus();
    renderChart();
    renderTable();
  }

  async function resync() {
    const r = await fetch(options.dataUrl, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!r.ok) return;
    applyData(await r.json());
    schedule();
  }
  function say(text, cls) { const el = document.getElementById("action-message"); el.textContent = text; el.className = "small " + (cls || ""); }

  async function postForm(url, data) {
    const body = new URLSearchParams(data || {});
    const m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
    const r = await fetch(url, { method: "POST", body: body, credentials: "same-origin",
      headers: { "X-CSRFToken": m ? decodeURIComponent(m[1]) : "", Accept: "application/json" } });
    let json = {};
    try { json = await r.json(); } catch (e) { json = { message: r.statusText }; }
    return { ok: r.ok, body: json };
  }

  async function apply(key, button) {
    if (!confirm("Write this config to config.pbtxt and reload the model?")) return;
    button.disabled = true;
    const applyUrl = document.getElementById("btn-apply-best") ? document.getElementById("btn-apply-best").dataset.url : location.pathname + "apply";
    const r = await postForm(applyUrl, { key: key });
    button.disabled = false;
    say(r.body.message || "", r.ok ? "ok" : "error");
    resync();
  }

  function bindButtons() {
    ["btn-cancel", "btn-resume"].forEach(function (id) {
      const button = document.getElementById(id);
      if (!button) return;
      button.addEventListener("click", async function () {
        button.disabled = true;
        const r = await postForm(button.dataset.url);
        button.disabled = false;
        say(r.body.message || "", r.ok ? "ok" : "error");
        resync();
      });
    });
    const best = document.getElementById("btn-apply-best");
    if (best) best.addEventListener("click", function () { if (result && result.best_key) apply(result.best_key, best); });
  }

  function start(opts) {
    options = opts;
    if (opts.initial) applyData(opts.initial);
    bindButtons();
    schedule();
    Live.connect(opts.wsPath, {
      // The queue job's own state, first on each connection (the search comes over HTTP).
      "sweep.snapshot": function (e) {
        const job = e.sweep || {};
        Object.assign(search, { state: job.state, error: job.error, cancel_requested: job.cancel_requested,
          queue_position: job.queue_position, placement: job.placement, heartbeat_stale: job.heartbeat_stale });
        schedule();
      },
      "sweep.state": function (e) {
        search.state = e.state; search.error = e.error; search.cancel_requested = e.cancel_requested;
        search.queue_position = e.queue_position;
        if (e.placement) search.placement = e.placement;
        schedule();
      },
      // Only the search's worker measures candidates: it is alive (heartbeat_stale is read
      // on the server).
      "search.candidate": function (e) { merge([e.candidate]); search.heartbeat_stale = false; schedule(); },
      "search.result": function (e) {
        result = e.result;
        search.state = e.state;
        if (e.state === "running") search.heartbeat_stale = false;
        schedule();
      },
      "search.changed": function (e) {
        Object.assign(search, { constraints: e.constraints, metrics: e.metrics, constraints_text: e.constraints_text,
          budget_from: e.budget_from, restore_message: e.restore_message });
        schedule();
      },
      "*": resync,  // a type this page cannot apply: read the whole state instead
    }, resync);
  }

  return { start: start, front: front };
})();

// The Find best config form: the probe of the current config (a short sweep, queued like
// any), then its suggested budget and concurrency fill the fields the user has not edited.
window.SearchNewPage = (function () {
  let options = {};
  const touched = new Set();
  const FILLED = ["latency_budget", "first_response_budget", "concurrency_range", "counts"];

  function csrf() { const m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/); return m ? decodeURIComponent(m[1]) : ""; }
  function status(text) { const el = document.getElementById("probe-status"); if (el) el.textContent = text; }

  async function fill() {
    const r = await fetch(options.defaultsUrl, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!r.ok) return;
    const data = await r.json();
    FILLED.forEach(function (name) {
      const input = document.getElementById("id_" + name);
      if (input && !touched.has(name) && data.initial[name] !== undefined) input.value = data.initial[name];
    });
    if (data.suggestion) { const el = document.getElementById("probe-suggestion"); if (el) el.textContent = data.suggestion; }
  }

  async function watch(sweepId) {
    for (;;) {
      const r = await fetch("/sweeps/" + sweepId + "/data.json", { credentials: "same-origin", headers: { Accept: "application/json" } });
      if (!r.ok) { status("The probe's sweep cannot be read."); return; }
      const data = await r.json();
      const state = data.sweep.state;
      if (["succeeded", "failed", "cancelled", "interrupted"].indexOf(state) >= 0) {
        status("Probe (sweep #" + sweepId + ") " + state + ".");
        const button = document.getElementById("btn-probe");
        if (button) button.hidden = false;
        if (state === "succeeded") await fill();
        return;
      }
      const levels = data.points.filter(function (p) { return p.window === -1; }).length;
      status("Probe (sweep #" + sweepId + ") " + state + ": " + levels + " / " + data.sweep.levels_total + " levels…");
      await new Promise(function (resolve) { setTimeout(resolve, 1500); });
    }
  }

  function start(opts) {
    options = opts;
    FILLED.forEach(function (name) {
      const input = document.getElementById("id_" + name);
      if (input) input.addEventListener("input", function () { touched.add(name); });
    });
    const button = document.getElementById("btn-probe");
    if (button) {
      button.addEventListener("click", async function () {
        button.disabled = true;
        const r = await fetch(button.dataset.url, { method: "POST", credentials: "same-origin", headers: { "X-CSRFToken": csrf(), Accept: "application/json" } });
        let body = {};
        try { body = await r.json(); } catch (e) { body = { message: r.statusText }; }
        button.disabled = false;
        status(body.message || "");
        if (r.ok && body.sweep) { button.hidden = true; watch(body.sweep); }
      });
    }
    const el = document.getElementById("probe-status");
    if (el && el.dataset.sweep) watch(el.dataset.sweep);
  }

  return { start: start };
})();
