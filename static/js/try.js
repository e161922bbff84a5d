// The Try page: the form's inputs as the API's body (a .npy file read as base64), one POST
// to /api/v1/models/<name>/try, and the answer: outputs, statistics, copies, downloads.
// A refusal lands on the field it names; Triton's own error is shown as it came.
(function () {
  "use strict";
  const form = document.getElementById("try-form");
  if (!form) return;
  const model = JSON.parse(document.getElementById("try-model").textContent);
  const api = "/api/v1/models/" + encodeURIComponent(model) + "/try";
  const status = document.getElementById("try-status");
  const answer = document.getElementById("try-answer");

  function csrfToken() {
    const m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }

  function readBase64(file) {
    return new Promise(function (resolve, reject) {
      const reader = new FileReader();
      reader.onload = function () { resolve(String(reader.result).split(",", 2)[1] || ""); };
      reader.onerror = function () { reject(reader.error); };
      reader.readAsDataURL(file);
    });
  }

  function showMode(row) {
    const mode = row.querySelector("select[name=mode]").value;
    row.querySelector("textarea[name=values]").hidden = !(mode === "values" || mode === "json");
    row.querySelector("input[name=npy]").hidden = mode !== "npy";
  }

  document.querySelectorAll("#try-inputs tr[data-input]").forEach(function (row) {
    row.querySelector("select[name=mode]").addEventListener("change", function () { showMode(row); });
    showMode(row);
  });

  async function body() {
    const inputs = {};
    for (const row of document.querySelectorAll("#try-inputs tr[data-input]")) {
      const mode = row.querySelector("select[name=mode]").value;
      const entry = { mode: mode, values: row.querySelector("textarea[name=values]").value };
      const dims = row.querySelector("input[name=dims]");
      if (dims) entry.dims = dims.value;
      if (mode === "npy") {
        const file = row.querySelector("input[name=npy]").files[0];
        entry.values = file ? await readBase64(file) : "";
      }
      inputs[row.dataset.input] = entry;
    }
    const out = { inputs: inputs };
    if (responses) {
      stream = (crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) + "-" + Math.random().toString(16).slice(2)).replace(/[^A-Za-z0-9-]/g, "");
      out.stream = stream;
      responses.replaceChildren();
    }
    const batch = document.getElementById("try-batch");
    if (batch) out.batch = batch.value;
    if (document.getElementById("try-sequence")) {
      out.sequence = {
        correlation_id: document.getElementById("try-correlation").value,
        start: document.getElementById("try-start").checked,
        end: document.getElementById("try-end").checked,
        steps: document.getElementById("try-steps").value,
      };
    }
    return out;
  }

  function clearErrors() {
    form.querySelectorAll(".field-error").forEach(function (el) { el.textContent = ""; });
    document.getElementById("try-error").hidden = true;
  }

  function cell(text) {
    const td = document.createElement("td");
    td.textContent = text;
    return td;
  }

  function link(href, text) {
    const a = document.createElement("a");
    a.href = href;
    a.textContent = text;
    return a;
  }

  function showAnswer(data) {
    answer.hidden = false;
    lastResult = data.result;
    (data.responses || []).forEach(showResponse);
    document.getElementById("try-latency").textContent = data.latency_ms.toFixed(2) + " ms round trip";
    const outputs = document.querySelector("#try-outputs tbody");
    outputs.replaceChildren();
    data.outputs.forEach(function (o) {
      const tr = document.createElement("tr");
      tr.dataset.output = o.name;
      const shown = JSON.stringify(o.values) + (o.truncated ? " … (" + o.count + " values)" : "");
      [o.name, o.datatype, JSON.stringify(o.shape), shown].forEach(function (t) { tr.appendChild(cell(t)); });
      const whole = document.createElement("td");
      const base = "/api/v1/try-results/" + data.result + "/" + encodeURIComponent(o.name);
      whole.appendChild(link(base, ".npy"));
      whole.appendChild(document.createTextNode(" · "));
      whole.appendChild(link(base + "?as=json", "JSON"));
      tr.appendChild(whole);
      outputs.appendChild(tr);
    });
    const stats = document.querySelector("#try-statistics tbody");
    stats.replaceChildren();
    data.statistics.forEach(function (s) {
      const tr = document.createElement("tr");
      [s.model, s.requests, s.queue_us, s.compute_input_us, s.compute_infer_us, s.compute_output_us]
        .forEach(function (t) { tr.appendChild(cell(String(t))); });
      stats.appendChild(tr);
    });
    const copy = data.copy || {};
    document.getElementById("try-copy-refused").hidden = !copy.refused;
    document.getElementById("try-copy-refused").textContent = copy.refused || "";
    document.getElementById("try-copy-curl").textContent = copy.curl || "";
    document.getElementById("try-copy-python").textContent = copy.python || "";
    const perf = copy.perf_analyzer ? JSON.stringify(copy.perf_analyzer, null, 1) : "";
    document.getElementById("try-copy-perf").textContent = perf;
    document.getElementById("try-benchmark-input").value = perf;
    document.getElementById("try-benchmark").disabled = !perf;
  }

  function showRefusal(data) {
    const field = data.field && form.querySelector('.field-error[data-field="' + CSS.escape(data.field) + '"]');
    if (field) {
      field.textContent = data.message;
    } else {
      answer.hidden = false;
      const error = document.getElementById("try-error");
      error.hidden = false;
      error.textContent = data.message || "the request failed";
    }
  }

  let lastResult = "";
  // A decoupled model's responses, as they arrive (the user's own socket), by stream id.
  const responses = document.querySelector("#try-responses tbody");
  let stream = "";
  function showResponse(r) {
    if (!responses || responses.querySelector('tr[data-index="' + r.index + '"]')) return;
    const tr = document.createElement("tr");
    tr.dataset.index = r.index;
    tr.appendChild(cell(String(r.index + 1)));
    tr.appendChild(cell(r.t_ms.toFixed(1)));
    tr.appendChild(cell(r.outputs.map(function (o) { return o.name + " " + JSON.stringify(o.values); }).join("; ")));
    responses.appendChild(tr);
  }
  if (responses) {
    Live.connect("/ws/notifications/", {
      "try.response": function (e) {
        if (e.stream === stream) { answer.hidden = false; showResponse(e); }
      },
    });
  }
  const keep = document.getElementById("try-keep");
  if (keep) keep.addEventListener("submit", async function (event) {
    event.preventDefault();
    const said = document.getElementById("try-keep-status");
    const error = keep.querySelector('[data-field="keep"]');
    error.textContent = "";
    const response = await fetch("/api/v1/models/" + encodeURIComponent(model) + "/checks" + window.location.search, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "Accept": "application/json", "X-CSRFToken": csrfToken() },
      body: JSON.stringify({ name: document.getElementById("try-check-name").value, result: lastResult }),
    });
    let data = {};
    try { data = await response.json(); } catch (e) { data = { message: response.statusText }; }
    if (response.ok) {
      said.textContent = "kept as check " + JSON.stringify(data.check.name);
      Checks.refresh();
    } else {
      said.textContent = "";
      error.textContent = data.message;
    }
  });
  Live.connect("/ws/models/" + encodeURIComponent(model) + "/", {
    "check.result": function (e) { if (e.model === model) Checks.refresh(); },
  }, function () { Checks.refresh(); });

  form.addEventListener("submit", async function (event) {
    event.preventDefault();
    clearErrors();
    status.textContent = "sending…";
    let response;
    try {
      response = await fetch(api + window.location.search, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "Accept": "application/json", "X-CSRFToken": csrfToken() },
        body: JSON.stringify(await body()),
      });
    } catch (e) {
      status.textContent = "not sent: " + e;
      return;
    }
    let data = {};
    try { data = await response.json(); } catch (e) { data = { message: response.statusText }; }
    status.textContent = response.ok ? "answered" : "refused";
    if (response.ok) showAnswer(data); else showRefusal(data);
  });
})();
