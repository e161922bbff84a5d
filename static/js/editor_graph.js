// The ensemble's step graph in the config editor: models as boxes, ensemble tensors as
// arrows from the step that writes them to the steps that read them, drawn as plain SVG
// from the JSON the page embeds (#ensemble-data, from repository_app/editor/ensemble_view.py)
// and again from each live check's answer (editor_form.js "editor:checked"), so it follows
// the form. Columns are the longest path from the ensemble's inputs.
"use strict";

(function () {
  const box = document.getElementById("ensemble-graph");
  const dataNode = document.getElementById("ensemble-data");
  if (!box || !dataNode) return;
  const SVG = "http://www.w3.org/2000/svg";
  const W = 170, H = 44, COL = 250, ROW = 78, PAD = 24;

  function el(name, attrs, text) {
    const node = document.createElementNS(SVG, name);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // Column of each node: the longest path from "in" (bounded, so a cycle cannot loop).
  function columns(graph) {
    const depth = {};
    graph.nodes.forEach(function (n) { depth[n.id] = n.kind === "inputs" ? 0 : 1; });
    for (let round = 0; round < graph.nodes.length; round++) {
      let moved = false;
      graph.edges.forEach(function (e) {
        if (e.to === "out" || e.from === e.to) return;
        if (depth[e.from] + 1 > depth[e.to] && depth[e.from] + 1 <= graph.nodes.length) {
          depth[e.to] = depth[e.from] + 1;
          moved = true;
        }
      });
      if (!moved) break;
    }
    let last = 1;
    graph.nodes.forEach(function (n) { if (n.kind === "step") last = Math.max(last, depth[n.id]); });
    depth.out = last + 1;
    return depth;
  }

  function draw(graph) {
    box.innerHTML = "";
    if (!graph || !graph.nodes) return;
    const depth = columns(graph);
    const perColumn = {};
    const at = {};
    graph.nodes.forEach(function (n) {
      const col = depth[n.id];
      const row = perColumn[col] || 0;
      perColumn[col] = row + 1;
      at[n.id] = { x: PAD + col * COL, y: PAD + row * ROW };
    });
    const rows = Math.max.apply(null, Object.values(perColumn));
    const width = PAD * 2 + depth.out * COL + W;
    const height = PAD * 2 + rows * ROW;
    const svg = el("svg", { viewBox: "0 0 " + width + " " + height, width: width, height: height, class: "graph" });
    const defs = el("defs");
    const marker = el("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" });
    marker.appendChild(el("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#475467" }));
    defs.appendChild(marker);
    svg.appendChild(defs);

    // Several tensors between the same two boxes: spread their labels.
    const pairCount = {};
    graph.edges.forEach(function (e) {
      const pair = e.from + ">" + e.to;
      const nth = pairCount[pair] || 0;
      pairCount[pair] = nth + 1;
      const a = at[e.from], b = at[e.to];
      if (!a || !b) return;
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
      const bend = Math.max(40, (x2 - x1) / 2);
      const g = el("g", { class: "edge" + (e.missing ? " missing" : "") + (e.unused ? " unused" : ""),
        "data-tensor": e.tensor, "data-from": e.from, "data-to": e.to });
      g.appendChild(el("title", {}, e.tensor + (e.from_tensor ? " (written by " + e.from_tensor + ")" : "")
        + (e.to_tensor ? " → read as " + e.to_tensor : "")
        + (e.missing ? ": no step writes this tensor" : "") + (e.unused ? ": nothing reads this tensor" : "")));
      g.appendChild(el("path", { d: "M " + x1 + " " + y1 + " C " + (x1 + bend) + " " + y1 + ", " + (x2 - bend) + " " + y2 + ", " + x2 + " " + y2,
        fill: "none", "marker-end": "url(#arrow)" }));
      g.appendChild(el("text", { x: (x1 + x2) / 2, y: (y1 + y2) / 2 - 6 + nth * 14, "text-anchor": "middle", class: "edge-label" }, e.tensor));
      svg.appendChild(g);
    });
    graph.nodes.forEach(function (n) {
      const p = at[n.id];
      const g = el("g", { class: "node " + n.kind, "data-id": n.id });
      if (n.kind === "step") {
        g.setAttribute("data-model", n.label);
        g.setAttribute("data-step", String(n.step));
      }
      g.appendChild(el("rect", { x: p.x, y: p.y, width: W, height: H, rx: 6 }));
      const label = n.kind === "step" ? (n.step + 1) + ". " + n.label : n.label;
      g.appendChild(el("text", { x: p.x + W / 2, y: p.y + H / 2 + 4, "text-anchor": "middle" }, label));
      if (n.kind === "step" && n.version !== undefined && n.version !== -1 && n.version !== 0) {
        g.appendChild(el("text", { x: p.x + W / 2, y: p.y + H - 4, "text-anchor": "middle", class: "node-note" }, "version " + n.version));
      }
      svg.appendChild(g);
    });
    box.appendChild(svg);
    box.dataset.drawn = String((parseInt(box.dataset.drawn || "0", 10)) + 1);
  }

  draw(JSON.parse(dataNode.textContent).graph);
  const form = document.getElementById("editor-form");
  if (form) {
    form.addEventListener("editor:checked", function (event) {
      if (event.detail && event.detail.ensemble_graph) draw(event.detail.ensemble_graph);
    });
  }
})();
