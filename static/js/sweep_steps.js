// The steps of an ensemble's or a BLS model's sweep (each level row's extra.steps): one
// stacked chart per step (queue, compute input, infer, output per request of that step,
// vs level), so each step reads like the level breakdown above, and the Steps table for the
// knee level (or the last level). sweep.js calls render() with every other chart.
"use strict";

window.SweepSteps = (function () {
  const PARTS = [["queue", "queue_us"], ["compute input", "compute_input_us"], ["compute infer", "compute_infer_us"], ["compute output", "compute_output_us"]];

  function ms(us) { return us === null || us === undefined ? null : us / 1000; }
  function stepsOf(p) { return p.extra && Array.isArray(p.extra.steps) ? p.extra.steps : []; }
  function same(a, b) { return a.model === b.model && String(a.version) === String(b.version); }
  function find(p, step) { return stepsOf(p).filter(function (s) { return same(s, step); })[0] || null; }
  function cell(v, digits) { return v === null || v === undefined ? "—" : Number(v).toFixed(digits); }

  // Every step the levels have, in step order (a level lists them in order).
  function stepList(levels) {
    const list = [];
    levels.forEach(function (p) {
      stepsOf(p).forEach(function (s) { if (!list.some(function (t) { return same(t, s); })) list.push(s); });
    });
    return list;
  }

  // The step's chart: rendered by the page for a stored sweep, added here as a live sweep's
  // first level with steps arrives. Looked up by its data-step attribute, never by a
  // selector built from a name.
  function chartFor(label) {
    const box = document.getElementById("step-charts");
    const found = Array.prototype.filter.call(box.querySelectorAll("[data-step]"), function (el) { return el.dataset.step === label; })[0];
    if (found) return found;
    const card = document.createElement("section");
    card.className = "card step-chart";
    const title = document.createElement("h3");
    title.textContent = label;
    const chart = document.createElement("div");
    chart.className = "chart";
    chart.dataset.step = label;
    card.appendChild(title);
    card.appendChild(chart);
    box.appendChild(card);
    return chart;
  }

  function renderTable(levels, list, summary, levelLabel) {
    const withSteps = levels.filter(function (p) { return stepsOf(p).length; });
    const knee = withSteps.filter(function (p) { return p.level === summary.knee_level; })[0];
    const shown = knee || withSteps[withSteps.length - 1];
    const caption = document.getElementById("steps-level");
    const table = document.getElementById("steps-table");
    if (!shown || !table) return;
    const which = !knee ? "the last level" : summary.knee_reason === "end" ? "the last settled level" : "the knee";
    if (caption) caption.textContent = " at " + levelLabel + " " + shown.level + " (" + which + ")";
    const head = table.rows[0].outerHTML;
    const rows = list.map(function (step) {
      const s = find(shown, step);
      const tr = document.createElement("tr");
      const values = s === null ? [step.model, step.version] : [
        s.model, s.version, cell(s.request_count, 0), cell(s.avg_batch_size, 2),
        cell(ms(s.queue_us), 3) + " ms", cell(ms(s.compute_input_us), 3) + " ms",
        cell(ms(s.compute_infer_us), 3) + " ms", cell(ms(s.compute_output_us), 3) + " ms",
        s.compute_share === null || s.compute_share === undefined ? "—" : Math.round(100 * s.compute_share) + " %",
      ];
      values.forEach(function (v) { const td = document.createElement("td"); td.textContent = String(v); tr.appendChild(td); });
      tr.dataset.step = step.model;
      return tr.outerHTML;
    });
    table.innerHTML = head + rows.join("");
  }

  function render(good, x, xTitle, base, cfg, summary) {
    const card = document.getElementById("steps-card");
    if (!card) return;
    const list = stepList(good);
    if (!list.length) return;
    card.hidden = false;
    const names = list.map(function (s) { return s.model; });
    list.forEach(function (step) {
      const label = names.filter(function (n) { return n === step.model; }).length > 1 ? step.model + ":" + step.version : step.model;
      const traces = PARTS.map(function (part) {
        return { type: "bar", name: part[0], x: x, y: good.map(function (p) { const s = find(p, step); return s ? ms(s[part[1]]) : null; }) };
      });
      Plotly.react(chartFor(label), traces, Object.assign({}, base, { barmode: "stack", xaxis: { title: { text: xTitle } }, yaxis: { title: { text: "avg ms per request" } } }), cfg);
    });
    renderTable(good, list, summary || {}, xTitle.split(" (")[0]);
  }

  return { render: render };
})();
