// The Server page's charts: the stored history of the chosen range (/server/history.json),
// sweeps and config changes drawn on it, then live points from the poller's websocket
// events. Config comes from the page's #server-config JSON (no inline script).
"use strict";

(function () {
  const config = JSON.parse(document.getElementById("server-config").textContent);
  // One chart per figure. `src`: where its series come from (models, the server's CPU
  // figures, or each GPU); `field`: the history's column (`live`: the event's, if named
  // otherwise). Idle series are all zeros, which Plotly's autorange draws from -1 to 1:
  // every y axis starts at 0 and reaches at least `floor`, and autoranges (from 0) once
  // data exceeds it. Memory is drawn in GiB (`scale`, `unit`): Plotly's own ticks would
  // read 25 GB of bytes as "25B" (billions).
  const GIB = 1073741824;
  const CHARTS = [
    { id: "chart-rps", src: "models", field: "requests_per_s", floor: 1 },
    { id: "chart-failures", src: "models", field: "failures_per_s", floor: 1 },
    { id: "chart-queue", src: "models", field: "queue_us", floor: 100 },
    { id: "chart-compute", src: "models", field: "compute_us", floor: 100 },
    { id: "chart-latency", src: "models", field: "p99_us", floor: 100, suffix: " p99" },
    { id: "chart-latency", src: "models", field: "p50_us", floor: 100, suffix: " p50" },
    { id: "chart-batch", src: "models", field: "batch_size", floor: 1 },
    { id: "chart-pending", src: "models", field: "pending", floor: 1 },
    { id: "chart-cpu-util", src: "server", field: "cpu_utilization", floor: 1, name: "CPU" },
    { id: "chart-cpu-mem", src: "server", field: "cpu_memory_used_bytes", floor: 1, name: "used", scale: GIB, unit: " GiB" },
    { id: "chart-cpu-mem", src: "server", field: "cpu_memory_total_bytes", floor: 1, name: "total", scale: GIB, unit: " GiB" },
    { id: "chart-gpu-util", src: "gpus", field: "utilization", floor: 1 },
    { id: "chart-gpu-mem", src: "gpus", field: "memory_used_bytes", floor: 1, scale: GIB, unit: " GiB" },
    { id: "chart-gpu-power", src: "gpus", field: "power_w", live: "power_usage", floor: 10 },
  ];
  const ids = Array.from(new Set(CHARTS.map(function (c) { return c.id; })));
  const floors = {};
  const units = {};
  CHARTS.forEach(function (c) { floors[c.id] = c.floor; units[c.id] = c.unit || ""; });
  function scaled(chart, value) {
    return value === null || value === undefined || !chart.scale ? value : value / chart.scale;
  }
  const MARKER_COLORS = { sweep: "rgba(181, 71, 8, 0.12)", config: "#6941c6" };

  let current = null;   // the loaded history (its range, until, markers)
  let traces = {};      // chart id -> series name -> trace index
  let autoranged = {};  // chart id -> true once a value exceeded its floor
  let queued = [];      // live events that arrived while the history was loading
  let reloadTimer = null;
  const picker = document.getElementById("range-picker");
  const status = document.getElementById("history-status");

  function layout(id, shapes, annotations) {
    const rows = annotations.reduce(function (n, a) { return Math.max(n, a.yshift / LABEL_ROW_PX + 1); }, 0);
    return {
      margin: { t: rows ? 14 + LABEL_ROW_PX * rows : 10, r: 10, b: 30, l: 60 },
      yaxis: { rangemode: "tozero", range: [0, floors[id]], autorange: false, ticksuffix: units[id], hoverformat: units[id] ? ".2f" : "" },
      xaxis: { type: "date", range: xRange() },
      showlegend: true,
      shapes: shapes,
      annotations: annotations,
    };
  }

  function xRange() {
    if (!current) return undefined;
    const until = Math.max(current.until, Date.now() / 1000);
    return [new Date((until - current.span) * 1000), new Date(until * 1000)];
  }

  function traceName(chart, name) {
    return (chart.name || name) + (chart.suffix || "");
  }

  // Sweeps as shaded spans (to now while running), config changes as dotted lines; the
  // first chart names them.
  function markerShapes(markers) {
    const now = Date.now() / 1000;
    return markers.map(function (m) {
      if (m.kind === "sweep") {
        return { type: "rect", xref: "x", yref: "paper", x0: new Date(m.t * 1000), x1: new Date((m.end || now) * 1000),
                 y0: 0, y1: 1, fillcolor: MARKER_COLORS.sweep, line: { width: 0 }, layer: "below", name: m.label };
      }
      return { type: "line", xref: "x", yref: "paper", x0: new Date(m.t * 1000), x1: new Date(m.t * 1000),
               y0: 0, y1: 1, line: { color: MARKER_COLORS.config, width: 1, dash: "dot" }, name: m.label };
    });
  }

  // Their labels above the first chart, in rows: a label nearer the one before it in a row
  // than LABEL_GAP of the range goes up a row; past LABEL_ROWS it shrinks to its first
  // letter. The whole label (which sweep, which config, when) shows on hover.
  const LABEL_ROWS = 3, LABEL_ROW_PX = 12, LABEL_GAP = 0.06;
  function markerLabels(markers) {
    const gap = (current ? current.span : 3600) * LABEL_GAP;
    const lastInRow = [];
    return markers.slice().sort(function (a, b) { return a.t - b.t; }).map(function (m) {
      let row = lastInRow.findIndex(function (t) { return m.t - t >= gap; });
      if (row < 0 && lastInRow.length < LABEL_ROWS) row = lastInRow.length;
      const crowded = row < 0;
      if (crowded) row = LABEL_ROWS - 1;
      lastInRow[row] = m.t;
      const word = m.kind === "sweep" ? "sweep" : "config";
      return { x: new Date(m.t * 1000), y: 1, xref: "x", yref: "paper", yanchor: "bottom", yshift: row * LABEL_ROW_PX,
               showarrow: false, text: crowded ? word.charAt(0) : word,
               hovertext: m.label + " · " + new Date(m.t * 1000).toLocaleString(),
               font: { size: 10, color: m.kind === "sweep" ? "#b54708" : MARKER_COLORS.config } };
    });
  }

  function fit(id, value) {
    if (autoranged[id] || !(value > floors[id])) return;
    autoranged[id] = true;
    Plotly.relayout(id, { "yaxis.autorange": true });
  }

  function seriesOf(data, chart) {
    if (chart.src === "server") return data.server && data.server.t.length ? { "": data.server } : {};
    return data[chart.src] || {};
  }

  // Draw a loaded history: every chart from scratch.
  function draw(data) {
    traces = {};
    autoranged = {};
    const perChart = {};
    ids.forEach(function (id) { perChart[id] = []; traces[id] = {}; });
    CHARTS.forEach(function (chart) {
      const series = seriesOf(data, chart);
      Object.keys(series).sort().forEach(function (name) {
        const col = series[name];
        if (!(chart.field in col)) return;
        const label = traceName(chart, name);
        traces[chart.id][label] = perChart[chart.id].length;
        perChart[chart.id].push({
          x: col.t.map(function (t) { return new Date(t * 1000); }),
          y: col[chart.field].map(function (v) { return scaled(chart, v); }),
          name: label,
          mode: "lines",
          line: chart.suffix === " p50" ? { dash: "dot" } : {},
        });
      });
    });
    const shapes = markerShapes(data.markers);
    ids.forEach(function (id, i) {
      const labels = i === 0 ? markerLabels(data.markers) : [];
      Plotly.react(id, perChart[id], layout(id, shapes, labels), { displayModeBar: false, responsive: true });
      let top = 0;
      perChart[id].forEach(function (tr) { tr.y.forEach(function (v) { if (v > top) top = v; }); });
      fit(id, top);
    });
    showPresence(data.gpu_metrics_present, data.cpu_metrics_present, hasQuantiles(data));
    listMarkers(data.markers);
  }

  function hasQuantiles(data) {
    return Object.values(data.models || {}).some(function (col) { return "p99_us" in col || "p50_us" in col; });
  }

  // What this server does not export is said in words, and its charts are hidden.
  const seen = { gpu: false, cpu: false, quantiles: false };
  function showPresence(gpu, cpu, quantiles) {
    seen.gpu = seen.gpu || Boolean(gpu);
    seen.cpu = seen.cpu || Boolean(cpu);
    seen.quantiles = seen.quantiles || Boolean(quantiles);
    const gpuCharts = document.getElementById("gpu-charts");
    const cpuCharts = document.getElementById("cpu-charts");
    const reveal = (gpuCharts.hidden && seen.gpu) || (cpuCharts.hidden && seen.cpu);
    gpuCharts.hidden = !seen.gpu;
    cpuCharts.hidden = !seen.cpu;
    document.getElementById("gpu-note").hidden = seen.gpu;
    document.getElementById("cpu-note").hidden = seen.cpu;
    document.getElementById("latency-note").hidden = seen.quantiles;
    if (reveal) window.dispatchEvent(new Event("resize"));  // Plotly sized the hidden charts at 0
  }

  function listMarkers(markers) {
    const list = document.getElementById("markers");
    list.replaceChildren();
    markers.slice().reverse().forEach(function (m) {
      const li = document.createElement("li");
      li.className = "marker-" + m.kind;
      const a = document.createElement("a");
      a.href = m.url;
      a.textContent = m.label;
      const when = document.createElement("span");
      when.className = "muted small";
      when.textContent = " " + new Date(m.t * 1000).toLocaleString() + (m.kind === "sweep" && !m.end ? " (running)" : "");
      li.append(a, when);
      list.append(li);
    });
    document.getElementById("markers-none").hidden = markers.length > 0;
  }

  // One live event is drawn with one extendTraces and one addTraces per chart, whatever the
  // number of models: a call per model and chart redrew each chart once per model, which on
  // a server with dozens of models kept the page's main thread busy for seconds per event.
  function push(batches, chart, name, t, raw) {
    if (raw === null || raw === undefined) return;
    const value = scaled(chart, raw);
    const id = chart.id;
    const label = traceName(chart, name);
    fit(id, value);
    const batch = batches[id] || (batches[id] = { x: [], y: [], indices: [], added: [] });
    if (!(label in traces[id])) {  // appended after the existing traces, in this order
      traces[id][label] = Object.keys(traces[id]).length;
      batch.added.push({ x: [t], y: [value], name: label, mode: "lines", line: chart.suffix === " p50" ? { dash: "dot" } : {} });
      return;
    }
    batch.x.push([t]);
    batch.y.push([value]);
    batch.indices.push(traces[id][label]);
  }

  function live(e) {
    if (!current) { queued.push(e); return; }
    if (e.time <= current.until) return;  // already in the stored history
    const t = new Date(e.time * 1000);
    const batches = {};
    CHARTS.forEach(function (chart) {
      const key = chart.live || chart.field;
      if (chart.src === "models") {
        Object.entries(e.models || {}).forEach(function (kv) { push(batches, chart, kv[0], t, kv[1][key]); });
      } else if (chart.src === "server") {
        if (e.cpu) push(batches, chart, "", t, e.cpu[key]);
      } else {
        Object.entries(e.gpus || {}).forEach(function (kv) { push(batches, chart, kv[0], t, kv[1][key]); });
      }
    });
    Object.entries(batches).forEach(function (kv) {
      const batch = kv[1];
      if (batch.indices.length) Plotly.extendTraces(kv[0], { x: batch.x, y: batch.y }, batch.indices);
      if (batch.added.length) Plotly.addTraces(kv[0], batch.added);
    });
    const quantiles = Object.values(e.models || {}).some(function (m) { return m.p99_us !== null && m.p99_us !== undefined; });
    showPresence(e.gpu_metrics_present, e.cpu_metrics_present, quantiles);
    ids.forEach(function (id) { Plotly.relayout(id, { "xaxis.range": xRange() }); });
  }

  async function load(range) {
    current = null;
    picker.querySelectorAll("button").forEach(function (b) { b.setAttribute("aria-pressed", String(b.dataset.range === range)); });
    status.textContent = "loading…";
    document.body.dataset.historyRange = "";
    let data;
    try {
      const response = await fetch(config.historyUrl + "?range=" + encodeURIComponent(range), { credentials: "same-origin", headers: { Accept: "application/json" } });
      data = await response.json();
      if (!response.ok) throw new Error(data.message || response.statusText);
    } catch (err) {
      status.textContent = "history unavailable: " + err.message + " (live points only)";
      data = { range: range, until: Date.now() / 1000, models: {}, server: { t: [] }, gpus: {}, markers: [], step_s: 0 };
    }
    current = { range: range, until: data.until, span: config.spans[range] };
    draw(data);
    if (data.step_s) {
      status.textContent = "history at " + (data.step_s < 60 ? data.step_s + " s" : data.step_s / 60 + " min") + " steps, then live";
    }
    // For tests and scripts: which range is drawn, and up to when it came from the history.
    document.body.dataset.historyUntil = String(data.until);
    document.body.dataset.historyRange = range;
    const pending = queued;
    queued = [];
    pending.forEach(live);
    // Reload now and then: live points pile up at the poller's pace, stored ones do not.
    clearTimeout(reloadTimer);
    reloadTimer = setTimeout(function () { load(range); }, 5 * 60 * 1000);
  }

  picker.addEventListener("click", function (event) {
    const button = event.target.closest("button[data-range]");
    if (!button) return;
    const url = new URL(location.href);
    url.searchParams.set("range", button.dataset.range);
    history.replaceState(null, "", url);
    load(button.dataset.range);
  });

  Live.connect("/ws/server/", {
    "server.metrics": live,
    "models.states": function (e) { if (e.triton) document.getElementById("triton-banner").hidden = e.triton.up; },
  }, null);
  load(config.range);
})();
