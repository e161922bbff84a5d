// The trace page: start and stop Triton's tracing of the model (the API), read the traced
// requests, and draw each as a timeline (Plotly bars: one row per model, the ensemble's or
// BLS model's steps under their parent). A "trace.state" event reads them again.
(function () {
  "use strict";
  const model = JSON.parse(document.getElementById("trace-model").textContent);
  const api = "/api/v1/models/" + encodeURIComponent(model) + "/trace";
  const statusEl = document.getElementById("trace-status");
  const list = document.getElementById("trace-list");
  const COLORS = { "queue": "#f79009", "compute input": "#2e90fa", "infer": "#12b76a", "compute output": "#7a5af8", "response": "#98a2b3" };

  function csrfToken() {
    const m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }

  async function call(url, method, body) {
    const response = await fetch(url + window.location.search, {
      method: method, credentials: "same-origin",
      headers: { "Accept": "application/json", "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
      body: body ? JSON.stringify(body) : undefined,
    });
    let data = {};
    try { data = await response.json(); } catch (e) { data = { message: response.statusText }; }
    return { ok: response.ok, data: data };
  }

  function describe(session) {
    if (!session) return "Not traced yet.";
    const what = "the next " + session.count + " request" + (session.count === 1 ? "" : "s") + " (by " + session.by + ")";
    if (session.ended_at) return "Ended: " + session.ended_why + ". Traced " + what + ".";
    if (session.state === "succeeded") return "Tracing " + what + " until " + session.expires_at.slice(11, 19) + " UTC.";
    if (session.state === "failed") return "Not turned on: " + (session.error || "failed");
    return "Turning tracing on (" + session.state + ")…";
  }

  function flatten(span, depth, rows) {
    rows.push({ span: span, depth: depth });
    (span.children || []).forEach(function (c) { flatten(c, depth + 1, rows); });
    return rows;
  }

  function draw(timeline) {
    const box = document.createElement("div");
    box.className = "trace-timeline";
    box.dataset.trace = timeline.id;
    const title = document.createElement("h3");
    title.textContent = "request " + timeline.id + " · " + timeline.total_ms.toFixed(3) + " ms";
    box.appendChild(title);
    const rows = flatten(timeline, 0, []);
    const labels = rows.map(function (r) { return "\u00a0".repeat(r.depth * 3) + r.span.model + " #" + r.span.id; });
    const traces = Object.keys(COLORS).map(function (part) {
      const base = [], widths = [], ys = [];
      rows.forEach(function (r, i) {
        r.span.parts.filter(function (p) { return p.name === part; }).forEach(function (p) {
          base.push(p.start_ms); widths.push(p.ms); ys.push(labels[i]);
        });
      });
      return { type: "bar", orientation: "h", name: part, base: base, x: widths, y: ys, marker: { color: COLORS[part] },
               hovertemplate: part + ": %{x:.3f} ms<extra></extra>" };
    });
    const chart = document.createElement("div");
    chart.className = "trace-chart";
    box.appendChild(chart);
    const table = document.createElement("table");
    table.className = "trace-parts";
    const head = document.createElement("tr");
    ["Model", "Total ms"].concat(Object.keys(COLORS)).forEach(function (t) { const th = document.createElement("th"); th.textContent = t; head.appendChild(th); });
    table.appendChild(head);
    rows.forEach(function (r, i) {
      const tr = document.createElement("tr");
      tr.dataset.model = r.span.model;
      const cells = [labels[i], r.span.total_ms.toFixed(3)].concat(Object.keys(COLORS).map(function (part) {
        const p = r.span.parts.find(function (q) { return q.name === part; });
        return p ? p.ms.toFixed(3) : "—";
      }));
      cells.forEach(function (t) { const td = document.createElement("td"); td.textContent = t; tr.appendChild(td); });
      table.appendChild(tr);
    });
    box.appendChild(table);
    list.appendChild(box);
    if (window.Plotly) {
      Plotly.newPlot(chart, traces, {
        barmode: "overlay", height: 60 + 28 * rows.length, margin: { l: 160, r: 10, t: 10, b: 30 },
        xaxis: { title: "ms from the request's start" }, yaxis: { autorange: "reversed", type: "category" },
        showlegend: true, legend: { orientation: "h" },
      }, { displayModeBar: false, responsive: true });
    }
  }

  async function read() {
    const answer = await call(api, "GET");
    if (!answer.ok) { statusEl.textContent = answer.data.message || "not read"; return; }
    const data = answer.data;
    statusEl.textContent = describe(data.session);
    const unavailable = document.getElementById("trace-unavailable");
    unavailable.hidden = !data.unavailable;
    unavailable.textContent = data.unavailable || "";
    list.replaceChildren();
    document.getElementById("trace-none").hidden = data.timelines.length > 0;
    data.timelines.slice(0, 20).forEach(draw);
  }

  document.getElementById("trace-form").addEventListener("submit", async function (event) {
    event.preventDefault();
    document.querySelectorAll("#trace-form .field-error").forEach(function (el) { el.textContent = ""; });
    const answer = await call(api, "POST", {
      count: document.getElementById("trace-count").value, minutes: document.getElementById("trace-minutes").value,
    });
    if (!answer.ok) {
      const field = answer.data.field && document.querySelector('#trace-form [data-field="' + answer.data.field + '"]');
      if (field) field.textContent = answer.data.message; else statusEl.textContent = answer.data.message;
      return;
    }
    statusEl.textContent = describe(answer.data.session);
  });
  document.getElementById("trace-stop").addEventListener("click", async function () {
    const answer = await call(api + "/stop", "POST");
    statusEl.textContent = answer.data.message || "";
    read();
  });
  document.getElementById("trace-read").addEventListener("click", read);
  Live.connect("/ws/models/" + encodeURIComponent(model) + "/", {
    "trace.state": function (e) { if (e.model === model) read(); },
  }, read);
})();
