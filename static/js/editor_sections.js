// Form mode of the config editor, the sections beyond the basics: the sequence batcher's
// strategy shows only its own fields; an ensemble's tensor maps suggest each step model's
// own inputs or outputs (datalists rendered from the models' config.pbtxt) and "Complete
// the maps" adds a row for every tensor of a step model that has none.
"use strict";

(function () {
  const form = document.getElementById("editor-form");
  if (!form || form.dataset.mode !== "form") return;

  // --- sequence batching: direct or oldest ---------------------------------------------
  const strategy = form.querySelector("select[name='cfg-seq_strategy']");
  function showStrategy() {
    const chosen = strategy.value || "direct"; // not set: Triton uses direct
    form.querySelectorAll(".strategy-fields").forEach(function (box) {
      box.hidden = box.dataset.strategy !== chosen;
    });
  }
  if (strategy) {
    strategy.addEventListener("change", showStrategy);
    showStrategy();
  }

  // --- ensemble tensor maps -------------------------------------------------------------
  const mapBox = document.getElementById("formset-step_map");
  const dataNode = document.getElementById("ensemble-data");
  const ensemble = dataNode ? JSON.parse(dataNode.textContent) : null;

  function stepModel(stepRow) {
    const input = form.querySelector("input[name='step-" + stepRow + "-model_name']");
    return input ? input.value.trim() : "";
  }

  function mapRows() {
    return mapBox ? Array.from(mapBox.querySelectorAll("tbody tr.ed-row")) : [];
  }

  function field(row, name) {
    return row.querySelector("[name$='-" + name + "']");
  }

  // Each row's model tensor suggests the inputs (input_map) or outputs (output_map) of
  // the model its step runs.
  function suggest() {
    mapRows().forEach(function (row) {
      const parent = field(row, "parent");
      const direction = field(row, "direction");
      const key = field(row, "key");
      if (!parent || !direction || !key) return;
      const model = stepModel(parent.value);
      key.setAttribute("list", "step-" + (direction.value === "output" ? "output" : "input") + "-" + model);
    });
  }

  function complete() {
    if (!ensemble || !mapBox) return;
    const io = ensemble.io || {};
    const present = new Set(mapRows().map(function (row) {
      const del = field(row, "DELETE");
      if (del && del.checked) return "";
      return [field(row, "parent").value, field(row, "direction").value, field(row, "key").value.trim()].join("|");
    }));
    const stepTotal = form.querySelector("input[name='step-TOTAL_FORMS']");
    const steps = stepTotal ? parseInt(stepTotal.value, 10) : 0;
    const adder = document.getElementById("add-step_map");
    for (let step = 0; step < steps; step++) {
      const del = form.querySelector("input[name='step-" + step + "-DELETE']");
      if (del && del.checked) continue;
      const model = io[stepModel(step)];
      if (!model) continue;
      [["input", model.inputs], ["output", model.outputs]].forEach(function (pair) {
        pair[1].forEach(function (tensor) {
          if (present.has([String(step), pair[0], tensor.name].join("|"))) return;
          adder.click();
          const row = mapRows().pop();
          field(row, "parent").value = String(step);
          field(row, "direction").value = pair[0];
          field(row, "key").value = tensor.name;
          field(row, "value").value = tensor.name;
          present.add([String(step), pair[0], tensor.name].join("|"));
        });
      });
    }
    suggest();
    form.dispatchEvent(new Event("change"));
  }

  if (mapBox) {
    form.addEventListener("change", suggest);
    form.addEventListener("input", function (event) {
      if (event.target.name && /^step-\d+-model_name$/.test(event.target.name)) suggest();
    });
    form.addEventListener("editor:row-added", suggest);
    suggest();
    const button = document.getElementById("complete-step-maps");
    if (button) button.addEventListener("click", complete);
  }
})();
