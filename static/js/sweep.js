// The sweep page: points keyed by level/window (so a resync or a late event never
// duplicates or drops one), live over /ws/sweeps/<id>/. The charts redraw from events alone
// (each level's event carries the verdict so far and the pace); the page fetches its
// snapshot over HTTP only when it opens or reconnects, on a gap in the events' sequence, and
// on an event type it does not know.
"use strict";

window.SweepPage = (function () {
  const points = new Map();
  let sweep = null;
  let dataUrl = "";
  let renderQueued = false;
  let clockOffset = 0;  // server clock - this browser's clock, ms (for the ETA)
  let histogramEdges = [];  // µs: the bins of the windows' inter-response histograms
  const FINISHED = ["succeeded", "failed", "cancelled", "interrupted"];
  const COLORS = { p50: "#12b76a", p95: "#f79009", p99: "#d92d20", avg: "#667085" };

  function key(p) { return p.level + "|" + p.window; }
  function merge(list) { (list || []).forEach(function (p) { points.set(key(p), p); }); }
  function ms(us) { return us === null || us === undefined ? null : us / 1000; }
  function chosenKey() {
    const pct = sweep && sweep.params ? sweep.params.percentile : 95;
    return pct === "avg" ? "avg_us" : "p" + pct + "_us";
  }
  function chosenLabel() {
    const pct = sweep && sweep.params ? sweep.params.percentile : 95;
    return pct === "avg" ? "avg" : "p" + pct;
  }
  function levelRows() {
    return Array.from(points.values()).filter(function (p) { return p.window === -1; })
      .sort(function (a, b) { return a.level - b.level; });
  }
  function windowRows() {
    return Array.from(points.values()).filter(function (p) { return p.window >= 0; });
  }

  function applySweep(s) {
    if (!s) return;
    if (s.server_now) clockOffset = Date.parse(s.server_now) - Date.now();
    sweep = Object.assign(sweep || {}, s);
  }
  function measured(p) { return (p.requests > 0 || p.throughput > 0) && !(p.extra && p.extra.cancelled); }
  function roundsOf(p) {
    if (!measured(p)) return 0;
    return (p.extra && p.extra.rounds && p.extra.rounds.length) || 1;
  }
  function roundOf(w) { return (w.extra && w.extra.round) || 1; }
  // A level that did not settle is drawn hollow: it stays on the chart, out of the verdict.
  function symbols(list) { return list.map(function (p) { return p.stable === false ? "circle-open" : "circle"; }); }
  function spreadText(p) {
    const e = p.extra || {};
    const v = [e.throughput_spread, e.latency_spread].filter(function (x) { return x !== null && x !== undefined; });
    return v.length ? " (spread " + Math.round(100 * Math.max.apply(null, v)) + "%)" : "";
  }
  // A level's interval of its median throughput (the built-in engine's extra.interval;
  // rows stored before it, and perf_analyzer's, have none and read as before).
  function intervalOf(p) {
    const i = p.extra && p.extra.interval;
    return i && i.throughput && i.throughput.length === 2 ? i : null;
  }
  function marginOf(p) {
    const i = intervalOf(p);
    return i ? Math.max(i.throughput[1] - p.throughput, p.throughput - i.throughput[0], 0) : null;
  }
  function intervalTitle(p) {
    const i = intervalOf(p);
    if (!i) return "";
    const n = function (v) { return Math.round(v).toLocaleString("en-US"); };
    return Math.round(100 * i.confidence) + "% interval of the median over " + i.windows + " windows: " + n(i.throughput[0]) + "–" + n(i.throughput[1]) + " infer/s";
  }
  function settledByInterval(p) { const i = intervalOf(p); return p.stable !== false && !!i && i.settled_by === "interval"; }
  function withinText(p) {
    const m = marginOf(p);
    return m !== null && p.throughput > 0 ? "within ±" + Math.round(100 * m / p.throughput) + "%" : "";
  }

  function schedule() {
    if (renderQueued) return;
    renderQueued = true;
    requestAnimationFrame(function () { renderQueued = false; render(); });
  }

  function setText(id, text) { const el = document.getElementById(id); if (el) el.textContent = text; }

  function renderStatus() {
    const state = sweep.state;
    const stateEl = document.getElementById("sweep-state");
    stateEl.textContent = state + (sweep.cancel_requested && state === "running" ? " (cancelling…)" : "")
      // Pages only read: a worker's watchdog, not this page, declares the job interrupted.
      + (sweep.heartbeat_stale && state === "running" ? " (no heartbeat for 20 s: its worker seems gone)" : "");
    stateEl.className = "state-" + state;
    setText("queue-position", state === "queued" && sweep.queue_position
      ? "position " + sweep.queue_position + " in the queue for " + sweep.server : "");
    const err = document.getElementById("sweep-error");
    err.hidden = !sweep.error; err.textContent = sweep.error || "";
    if (window.JobPlacement) JobPlacement.render(sweep.placement);
    const show = function (id, on) { const b = document.getElementById(id); if (b) b.hidden = !on; };
    show("btn-cancel", state === "queued" || state === "running");
    show("btn-resume", ["failed", "cancelled", "interrupted"].indexOf(state) >= 0);
    show("btn-rerun", FINISHED.indexOf(state) >= 0);
    if (sweep.summary && sweep.summary.recommendation) {
      const rec = document.getElementById("recommendation");
      rec.innerHTML = ""; const strong = document.createElement("strong");
      strong.textContent = sweep.summary.recommendation; rec.appendChild(strong);
    }
    // How sure the verdict is, and whether the machine itself was the noise (summaries
    // stored before these lack them: hidden).
    [["verdict-caveat", "caveat"], ["verdict-sureness", "sureness_text"], ["host-note", "host_note"]].forEach(function (pair) {
      const el = document.getElementById(pair[0]);
      if (!el || !sweep.summary) return;
      el.textContent = sweep.summary[pair[1]] || "";
      el.hidden = !sweep.summary[pair[1]];
    });
  }

  // The ETA from what this run actually needed: seconds per window (wall clock, so the
  // time between windows and between levels counts) and windows per level so far.
  function renderProgress(levels, windows) {
    const rounds = Math.max(1, sweep.rounds || (sweep.params && sweep.params.rounds) || 1);
    const total = (sweep.levels_total || 1) * rounds;
    const roundsDone = {};
    levels.forEach(function (p) { roundsDone[p.level] = roundsOf(p); });
    const done = levels.reduce(function (a, p) { return a + roundsOf(p); }, 0);
    const bar = document.getElementById("progress-bar");
    bar.style.width = Math.min(100, 100 * done / total) + "%";
    const open = windows.filter(function (w) { return roundOf(w) > (roundsDone[w.level] || 0); });
    const current = open.length ? open.reduce(function (a, w) { return roundOf(w) > roundOf(a) || (roundOf(w) === roundOf(a) && w.level > a.level) ? w : a; }) : null;
    const currentLevel = current ? current.level : null;
    const inCurrent = current ? open.filter(function (w) { return w.level === current.level && roundOf(w) === roundOf(current); }).length : 0;
    const windowS = (sweep.params.measurement_window_ms || 1000) / 1000;
    const finishedWindows = levels.reduce(function (a, p) { return a + (measured(p) ? ((p.extra && p.extra.windows) || 0) : 0); }, 0);
    const perLevel = done ? finishedWindows / done : Math.max(3, inCurrent);
    const thisRun = windows.length - (sweep.windows_before_start || 0);
    const elapsed = sweep.started_at ? (Date.now() + clockOffset - Date.parse(sweep.started_at)) / 1000 : 0;
    const perWindow = thisRun > 0 && elapsed > 0 ? elapsed / thisRun : windowS * 1.2;
    const left = Math.max(0, (total - done) * perLevel - inCurrent) * perWindow;
    let text = done + " / " + total + (rounds > 1 ? " level rounds" : " levels");
    if (sweep.state === "running") {
      if (current !== null) text += " · measuring level " + currentLevel + (rounds > 1 ? " (round " + roundOf(current) + ")" : "") + " (window " + inCurrent + ")";
      text += " · about " + Math.round(left) + " s left";
    } else {
      text += " · " + sweep.state;
    }
    setText("progress-text", text);
    return current;
  }

  function render() {
    if (!sweep) return;
    renderStatus();
    const levels = levelRows();
    const windows = windowRows();
    const current = renderProgress(levels, windows);
    const good = levels.filter(measured);
    const x = good.map(function (p) { return p.level; });
    const xTitle = sweep.params.mode === "request_rate" ? "request rate (infer/s)" : "concurrency";
    const summary = sweep.summary || {};
    const knee = good.filter(function (p) { return p.level === summary.knee_level; });
    const best = good.filter(function (p) { return p.level === summary.best_level; });
    const hover = good.map(function (p) {
      if (p.stable === false) return "did not settle" + spreadText(p) + (intervalOf(p) ? "; " + intervalTitle(p) : "");
      return settledByInterval(p) ? "settled " + withinText(p) + " (" + intervalTitle(p) + ")" : intervalTitle(p);
    });
    // The legend above the plot area: at the bottom (Plotly's place for a horizontal
    // legend) it sat on the x axis title.
    const base = { margin: { l: 55, r: 15, t: 40, b: 45 }, showlegend: true, legend: { orientation: "h", x: 0, xanchor: "left", y: 1.02, yanchor: "bottom" } };
    const cfg = { displayModeBar: false, responsive: true };
    const unsettled = good.some(function (p) { return p.stable === false; })
      ? [{ x: [null], y: [null], name: "hollow: did not settle", mode: "markers", marker: { symbol: "circle-open", size: 9, color: "#667085" } }] : [];
    const errorBars = good.map(function (p) {
      const r = (p.extra && p.extra.rounds) || [];
      if (r.length < 2) return 0;
      const v = r.map(function (q) { return q.throughput; });
      return (Math.max.apply(null, v) - Math.min.apply(null, v)) / 2;
    });
    // Without rounds, each level's interval of its median (asymmetric): how sure it is.
    const useIntervals = !errorBars.some(function (v) { return v > 0; }) && good.some(function (p) { return intervalOf(p); });
    const intervalUp = good.map(function (p) { const i = intervalOf(p); return i ? Math.max(0, i.throughput[1] - p.throughput) : 0; });
    const intervalDown = good.map(function (p) { const i = intervalOf(p); return i ? Math.max(0, p.throughput - i.throughput[0]) : 0; });
    const tputErrors = useIntervals
      ? { type: "data", symmetric: false, array: intervalUp, arrayminus: intervalDown, visible: true }
      : { type: "data", array: errorBars, visible: errorBars.some(function (v) { return v > 0; }) };

    Plotly.react("chart-throughput", [
      { x: x, y: good.map(function (p) { return p.throughput; }), text: hover, name: "throughput", mode: "lines+markers", marker: { symbol: symbols(good), size: 9 },
        error_y: tputErrors },
      { x: knee.map(function (p) { return p.level; }), y: knee.map(function (p) { return p.throughput; }), name: "knee", mode: "markers", marker: { size: 14, symbol: "star", color: "#d92d20" } },
      { x: best.map(function (p) { return p.level; }), y: best.map(function (p) { return p.throughput; }), name: "best within budget", mode: "markers", marker: { size: 12, symbol: "diamond-open", color: "#12b76a" } },
    ].concat(unsettled), Object.assign({}, base, { xaxis: { title: { text: xTitle } }, yaxis: { title: { text: "infer/s" }, rangemode: "tozero" } }), cfg);

    const budget = sweep.params.latency_threshold_ms;
    const latTraces = ["p50", "p95", "p99"].map(function (name) {
      return { x: x, y: good.map(function (p) { return ms(p[name + "_us"]); }), text: hover, name: name, mode: "lines+markers", line: { color: COLORS[name] }, marker: { symbol: symbols(good), size: 8, color: COLORS[name] } };
    });
    const shapes = budget ? [{ type: "line", xref: "paper", x0: 0, x1: 1, y0: budget, y1: budget, line: { dash: "dash", color: "#d92d20" } }] : [];
    Plotly.react("chart-latency", latTraces.concat(knee.length ? [{ x: [knee[0].level], y: [ms(knee[0][chosenKey()])], name: "knee", mode: "markers", marker: { size: 14, symbol: "star", color: "#d92d20" } }] : []).concat(unsettled),
      Object.assign({}, base, { shapes: shapes, xaxis: { title: { text: xTitle } }, yaxis: { title: { text: "ms" + (budget ? " (budget " + budget + " ms)" : "") }, rangemode: "tozero" } }), cfg);

    Plotly.react("chart-tput-latency", [
      { x: good.map(function (p) { return ms(p[chosenKey()]); }), y: good.map(function (p) { return p.throughput; }), text: x.map(String), hovertext: hover, name: chosenLabel(), mode: "lines+markers+text", textposition: "top center", marker: { symbol: symbols(good), size: 9 } },
    ].concat(unsettled), Object.assign({}, base, { xaxis: { title: { text: chosenLabel() + " latency (ms)" } }, yaxis: { title: { text: "infer/s" }, rangemode: "tozero" } }), cfg);

    const parts = [["queue", "queue_us"], ["compute input", "compute_input_us"], ["compute infer", "compute_infer_us"], ["compute output", "compute_output_us"]];
    const bars = parts.map(function (pair) {
      return { type: "bar", name: pair[0], x: x, y: good.map(function (p) { return ms(p[pair[1]]); }) };
    });
    bars.push({ type: "bar", name: "network + client", x: x, y: good.map(function (p) {
      return p.avg_us === null || p.server_request_us === null ? null : Math.max(0, (p.avg_us - p.server_request_us) / 1000);
    }) });
    Plotly.react("chart-breakdown", bars, Object.assign({}, base, { barmode: "stack", xaxis: { title: { text: xTitle } }, yaxis: { title: { text: "avg ms" } } }), cfg);

    // The level being measured (its current round), else the last one measured.
    let shown = current;
    if (shown === null && windows.length) {
      shown = windows.reduce(function (a, w) { return roundOf(w) > roundOf(a) || (roundOf(w) === roundOf(a) && w.level > a.level) ? w : a; });
    }
    const trace = shown === null ? [] : windows.filter(function (w) { return w.level === shown.level && roundOf(w) === roundOf(shown); }).sort(function (a, b) { return a.window - b.window; });
    const first = trace.length ? trace[0].window : 0;
    Plotly.react("chart-windows", [
      { x: trace.map(function (w) { return w.window - first + 1; }), y: trace.map(function (w) { return w.throughput; }), name: shown === null ? "no window yet" : xTitle + " " + shown.level + (roundOf(shown) > 1 ? ", round " + roundOf(shown) : ""), mode: "lines+markers" },
    ], Object.assign({}, base, { xaxis: { title: { text: "window" }, dtick: 1 }, yaxis: { title: { text: "infer/s" }, rangemode: "tozero" } }), cfg);

    renderStreaming(good, x, xTitle, base, cfg);
    renderPositions(good, x, xTitle, base, cfg);
    if (window.SweepSteps) SweepSteps.render(good, x, xTitle, base, cfg, summary);  // ensembles, BLS
    renderHistogram(trace, shown, xTitle, base, cfg);
    renderGoodput(good, x, xTitle, base, cfg);
    renderTraced(good, x, xTitle, base, cfg);
    renderTable(levels);
  }

  function extraOf(p, k) { const v = p.extra && p.extra[k]; return v === null || v === undefined ? null : v; }
  // A card whose chart has data: shown, then drawn (Plotly sizes a visible element only).
  function reveal(id, on) {
    const card = document.getElementById(id);
    if (card) card.hidden = !on;
    return !!card && on;
  }

  // Goodput (requests/s that met every objective) beside the requests/s they are out of.
  function renderGoodput(good, x, xTitle, base, cfg) {
    if (!reveal("card-goodput", good.some(function (p) { return extraOf(p, "goodput") !== null; }))) return;
    const batch = (sweep.params && sweep.params.batch_size) || 1;
    const share = good.map(function (p) { const v = extraOf(p, "good_share"); return v === null ? "" : Math.round(100 * v) + "% of requests met every objective"; });
    Plotly.react("chart-goodput", [
      { x: x, y: good.map(function (p) { return p.throughput / batch; }), name: "requests/s", mode: "lines+markers", line: { color: "#667085" } },
      { x: x, y: good.map(function (p) { return extraOf(p, "goodput"); }), text: share, name: "goodput: " + (sweep.params.goodput || ""), mode: "lines+markers", line: { color: "#12b76a" } },
    ], Object.assign({}, base, { xaxis: { title: { text: xTitle } }, yaxis: { title: { text: "requests/s" }, rangemode: "tozero" } }), cfg);
  }

  // A traced sample per level (trace_sample): the median of each part of a request,
  // stacked, each bar's text its share ("queue 70 %").
  const TRACED = [["queue", "traced_queue_us", "#f79009"], ["compute input", "traced_compute_input_us", "#2e90fa"],
    ["infer", "traced_infer_us", "#12b76a"], ["compute output", "traced_compute_output_us", "#7a5af8"], ["response", "traced_response_us", "#98a2b3"]];
  function renderTraced(good, x, xTitle, base, cfg) {
    if (!reveal("card-traced", good.some(function (p) { return extraOf(p, "traced") !== null; }))) return;
    const summary = document.getElementById("traced-summary");
    summary.replaceChildren();
    good.forEach(function (p, i) {
      const total = extraOf(p, "traced_total_us");
      if (!total) return;
      const li = document.createElement("li");
      li.dataset.level = p.level;
      li.textContent = xTitle + " " + x[i] + ": " + TRACED.map(function (t) {
        const v = extraOf(p, t[1]);
        return v === null ? null : t[0] + " " + Math.round(100 * v / total) + " %";
      }).filter(Boolean).join(" · ") + " of " + duration(total) + " (" + extraOf(p, "traced") + " traced)";
      summary.appendChild(li);
    });
    Plotly.react("chart-traced", TRACED.map(function (t) {
      return { type: "bar", name: t[0], x: x, y: good.map(function (p) { return extraOf(p, t[1]); }), marker: { color: t[2] } };
    }), Object.assign({}, base, { barmode: "stack", xaxis: { title: { text: xTitle }, type: "category" }, yaxis: { title: { text: "µs (median of the traced requests)" }, rangemode: "tozero" } }), cfg);
  }

  function duration(us) {
    const n = function (v) { return String(parseFloat(v.toPrecision(3))); };
    if (us >= 1e6) return n(us / 1e6) + " s";
    if (us >= 1000) return n(us / 1000) + " ms";
    return n(us) + " µs";
  }

  // The inter-response histogram of the level on show: its windows' counts summed, redrawn
  // as each window arrives; the bins from the first to the last one with a count.
  function renderHistogram(trace, shown, xTitle, base, cfg) {
    const counts = [];
    trace.forEach(function (w) {
      (extraOf(w, "inter_response_histogram") || []).forEach(function (c, i) { counts[i] = (counts[i] || 0) + c; });
    });
    const total = counts.reduce(function (a, c) { return a + (c || 0); }, 0);
    if (!reveal("card-histogram", total > 0)) return;
    const edges = histogramEdges;
    // A bar is named by where its bin starts (short, so the labels do not collide); its
    // whole range is in the hover text.
    const label = function (i) { return i === 0 ? "< " + duration(edges[0]) : duration(edges[i - 1]); };
    const range = function (i) {
      if (i === 0) return "under " + duration(edges[0]);
      if (i >= edges.length) return duration(edges[edges.length - 1]) + " or more";
      return duration(edges[i - 1]) + " to " + duration(edges[i]);
    };
    let lo = 0, hi = counts.length - 1;
    while (lo < hi && !counts[lo]) lo++;
    while (hi > lo && !counts[hi]) hi--;
    const bins = [];
    for (let i = lo; i <= hi; i++) bins.push(i);
    Plotly.react("chart-histogram", [
      { type: "bar", x: bins.map(label), y: bins.map(function (i) { return counts[i] || 0; }), hovertext: bins.map(range), name: xTitle + " " + shown.level + ": " + total + " gaps", marker: { color: "#2e90fa" } },
    ], Object.assign({}, base, { bargap: 0.05, xaxis: { title: { text: "inter-response time (from)" }, type: "category", tickangle: -45, automargin: true }, yaxis: { title: { text: "responses" }, rangemode: "tozero" } }), cfg);
  }

  // Streaming sweeps (decoupled models): per-response figures from each level's extra.
  // Where one response is one token, responses/s is tokens/s.
  function renderStreaming(good, x, xTitle, base, cfg) {
    if (!document.getElementById("chart-first-response")) return;
    const extra = function (p, k) { const v = p.extra && p.extra[k]; return v === null || v === undefined ? null : v; };
    const times = function (prefix) {
      return ["p50", "p90", "p95", "p99"].map(function (name) {
        return { x: x, y: good.map(function (p) { return ms(extra(p, prefix + "_" + name + "_us")); }), name: name, mode: "lines+markers", line: { color: COLORS[name] } };
      });
    };
    const axes = function (y) { return Object.assign({}, base, { xaxis: { title: { text: xTitle } }, yaxis: { title: { text: y }, rangemode: "tozero" } }); };
    Plotly.react("chart-first-response", times("first_response"), axes("ms"), cfg);
    Plotly.react("chart-inter-response", times("inter_response"), axes("ms"), cfg);
    const tokenOutput = sweep.params && sweep.params.token_output;
    Plotly.react("chart-responses", [
      { x: x, y: good.map(function (p) { return extra(p, "response_throughput"); }), name: tokenOutput ? "responses/s" : "responses/s (tokens/s where one response is one token)", mode: "lines+markers" },
    ], axes("responses/s"), cfg);
    // Tokens counted from a tensor: their own charts (otherwise they are the responses).
    const counted = !!tokenOutput && good.some(function (p) { return extra(p, "output_token_throughput") !== null; });
    if (reveal("card-tokens", counted)) {
      Plotly.react("chart-tokens", [
        { x: x, y: good.map(function (p) { return extra(p, "output_token_throughput"); }), name: "tokens/s (elements of " + tokenOutput + ")", mode: "lines+markers" },
      ], axes("tokens/s"), cfg);
    }
    if (reveal("card-tokens-per-user", counted)) {
      Plotly.react("chart-tokens-per-user", [
        { x: x, y: good.map(function (p) { return extra(p, "output_token_throughput_per_user"); }), name: "tokens/s per request, after its first token", mode: "lines+markers" },
      ], axes("tokens/s"), cfg);
    }
  }

  // Sequence sweeps (sequence models, built-in engine): each level's requests by their
  // position in the sequence (first, middle, last), from its extra.
  function renderPositions(good, x, xTitle, base, cfg) {
    if (!document.getElementById("chart-position-throughput")) return;
    const extra = function (p, k) { const v = p.extra && p.extra[k]; return v === null || v === undefined ? null : v; };
    const colors = { first: "#12b76a", middle: "#667085", last: "#d92d20" };
    const traces = function (suffix, scale) {
      return ["first", "middle", "last"].map(function (name) {
        return { x: x, y: good.map(function (p) { return scale(extra(p, name + "_" + suffix)); }), name: name, mode: "lines+markers", line: { color: colors[name] }, marker: { color: colors[name] } };
      });
    };
    const axes = function (y) { return Object.assign({}, base, { xaxis: { title: { text: xTitle } }, yaxis: { title: { text: y }, rangemode: "tozero" } }); };
    Plotly.react("chart-position-throughput", traces("throughput", function (v) { return v; }), axes("infer/s"), cfg);
    Plotly.react("chart-position-latency", traces("p95_us", ms), axes("p95 ms"), cfg);
  }

  function cell(v, digits) {
    if (v === null || v === undefined) return "—";
    return typeof v === "number" ? v.toFixed(digits === undefined ? 2 : digits) : String(v);
  }

  function gpuCell(extra) {
    if (!extra || (extra.gpu_utilization == null && extra.gpu_memory_bytes == null)) return "—";
    const parts = [];
    if (extra.gpu_utilization != null) parts.push((100 * extra.gpu_utilization).toFixed(0) + " %");
    if (extra.gpu_memory_bytes != null) parts.push((extra.gpu_memory_bytes / 2 ** 30).toFixed(1) + " GiB");
    return parts.join(" · ");
  }

  function escapeHtml(text) {
    return String(text).replace(/[&<>"']/g, function (c) { return { "&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;", "'": "&#39;" }[c]; });
  }

  // Load from several hosts: each one's share of the level's requests (its last windows).
  function hostsCell(extra) {
    const hosts = extra && extra.load_hosts;
    if (!hosts || !hosts.length) return "";
    const total = hosts.reduce(function (sum, h) { return sum + (h.requests || 0); }, 0);
    return "<div class=\"small muted load-hosts\" title=\"hosts that generated the load: each one's completed requests\">" + hosts.map(function (h) {
      const share = total ? " (" + Math.round(100 * h.requests / total) + " %)" : "";
      return escapeHtml(h.host) + ": " + Number(h.requests) + share + (h.errors ? ", " + Number(h.errors) + " errors" : "");
    }).join(" · ") + "</div>";
  }

  // The load generator's machine was busy during the level (engine/host_load.py).
  function hostCell(extra) {
    const h = extra && extra.host;
    if (!h || !(h.busy >= 0.9 || h.steal >= 0.05)) return "";
    return "<div class=\"small warning host-busy\" title=\"the load generator's machine during this level; see the note above\">host " + Math.round(100 * h.busy) + "% busy" + (h.steal >= 0.05 ? ", " + Math.round(100 * h.steal) + "% steal" : "") + "</div>";
  }

  function renderTable(levels) {
    const table = document.getElementById("levels-table");
    const head = table.rows[0].outerHTML;
    table.innerHTML = head + levels.map(function (p) {
      const partial = p.extra && p.extra.cancelled ? " (partial)" : "";
      // Request rate: the engine could not keep the schedule, so the load was lower.
      const behind = p.extra && p.extra.behind_schedule
        ? " <span class=\"warning\" title=\"every load thread was waiting for a reply: fewer requests were sent than the level asks\">(sent " + cell(p.extra.send_rate, 0) + "/s)</span>"
        : "";
      const rounds = (p.extra && p.extra.rounds) || [];
      let tput = cell(p.throughput, 1);
      if (rounds.length > 1 && p.extra.round_spread !== null && p.extra.round_spread !== undefined) {
        tput += " ± " + Math.round(100 * p.extra.round_spread) + "% (" + rounds.length + " rounds)";
      } else if (marginOf(p) !== null) {
        tput = "<span class=\"interval\" title=\"" + escapeHtml(intervalTitle(p)) + "\">" + tput + " ± " + cell(marginOf(p), 1) + "</span>";
      }
      let stable = p.stable === false ? "<span class=\"warning\">no" + spreadText(p) + "</span>" : (p.stable ? "yes" : "—");
      if (settledByInterval(p)) stable = "<span title=\"" + escapeHtml(intervalTitle(p)) + "\">" + withinText(p) + "</span>";
      return "<tr data-level=\"" + p.level + "\"" + (p.stable === false ? " class=\"unsettled\"" : "") + "><td>" + p.level + partial + behind + hostsCell(p.extra) + hostCell(p.extra) + "</td><td>" + tput + "</td><td>" + cell(ms(p.p50_us)) + " ms</td><td>" + cell(ms(p.p95_us)) + " ms</td><td>" + cell(ms(p.p99_us)) + " ms</td><td>" + cell(ms(p.avg_us)) + " ms</td><td>" + cell(ms(p.queue_us)) + " ms</td><td>" + cell(ms(p.compute_infer_us)) + " ms</td><td>" + gpuCell(p.extra) + "</td><td>" + cell(p.extra && p.extra.windows, 0) + "</td><td>" + stable + "</td><td>" + p.errors + "</td></tr>";
    }).join("");
  }

  async function resync() {
    const r = await fetch(dataUrl, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!r.ok) return;
    const data = await r.json();
    merge(data.points);
    applySweep(data.sweep);
    schedule();
  }

  function say(text, cls) { const el = document.getElementById("action-message"); el.textContent = text; el.className = "small " + (cls || ""); }

  function bindButtons() {
    [["btn-cancel", false], ["btn-resume", false], ["btn-rerun", true]].forEach(function (pair) {
      const button = document.getElementById(pair[0]);
      if (!button) return;
      button.addEventListener("click", async function () {
        button.disabled = true;
        const r = await Live.post(button.dataset.url);
        button.disabled = false;
        say(r.body.message || "", r.ok ? "ok" : "error");
        if (r.ok && pair[1] && r.body.sweep) location.href = "/sweeps/" + r.body.sweep + "/";
        else resync();
      });
    });
  }

  function start(options) {
    dataUrl = options.dataUrl;
    histogramEdges = options.histogramEdges || [];
    if (options.initial) { merge(options.initial.points); applySweep(options.initial.sweep); }
    bindButtons();
    schedule();
    Live.connect(options.wsPath, {
      "sweep.snapshot": function (e) { merge(e.points); applySweep(e.sweep); schedule(); },
      "sweep.window": function (e) { merge([e.point]); schedule(); },
      "sweep.level": function (e) {
        merge([e.point]);
        // A level just measured: its worker is alive (heartbeat_stale is read on the server).
        applySweep({ levels_total: e.levels_total, summary: e.summary, started_at: e.started_at, server_now: e.server_now, windows_before_start: e.windows_before_start, heartbeat_stale: false });
        schedule();
      },
      "sweep.state": function (e) {
        applySweep({ state: e.state, error: e.error, cancel_requested: e.cancel_requested, queue_position: e.queue_position, placement: e.placement });
        schedule();
      },
      "sweep.summary": function (e) { applySweep({ state: e.state, error: e.error, summary: e.summary }); schedule(); },
      "*": resync,  // a type this page cannot apply: read the whole state instead
    }, resync);
  }

  return { start: start, points: points, state: function () { return sweep; } };
})();
