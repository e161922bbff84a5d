// Form mode of the config editor: validate as the user types (debounced, as text mode
// does), keep the summary of findings at the top of the form up to date, and show each
// finding and format error at its field. The form's values are posted to the editor with
// action=check and Accept: application/json (repository_app/editor/views.py _form_check).
"use strict";

(function () {
  const form = document.getElementById("editor-form");
  if (!form || form.dataset.mode !== "form") return;
  const summary = document.getElementById("form-summary");
  const summaryText = document.getElementById("summary-text");
  const summaryFormat = document.getElementById("summary-format");
  const summaryStatus = document.getElementById("summary-status");
  const summaryList = document.getElementById("summary-findings");
  const DELAY_MS = 400;
  let timer = null;
  let sequence = 0;

  function csrfToken() {
    const input = form.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function plural(n, word) { return n + " " + word + (n === 1 ? "" : "s"); }

  // "input-0-dims" -> "input[0].dims", "cfg-max_batch_size" -> "max_batch_size"
  // (as form_mapping.field_label).
  function fieldLabel(key) {
    const m = /^(?:cfg-)?([a-z_]+)(?:-(\d+))?(?:-(\w+))?$/.exec(key);
    if (!m) return key;
    return m[1] + (m[2] !== undefined ? "[" + m[2] + "]" : "") + (m[3] ? "." + m[3] : "");
  }

  function summaryItem(className, target, prefix, code, message) {
    const li = document.createElement("li");
    li.className = className;
    li.dataset.target = target || "";
    li.appendChild(document.createTextNode(prefix + (code ? " " : "")));
    if (code) {
      const el = document.createElement("code");
      el.textContent = code;
      li.appendChild(el);
    }
    li.appendChild(document.createTextNode(": " + message));
    return li;
  }

  // Where a finding or error is shown: a field (data-field), a table row or a table.
  function placeFor(target) {
    if (!target) return null;
    if (target.indexOf("row:") === 0) {
      const row = form.querySelector("tr.ed-row[data-prefix='" + target.slice(4) + "']");
      return row ? row.lastElementChild : null;
    }
    if (target.indexOf("table:") === 0) {
      return form.querySelector(".table-findings[data-field='" + target.slice(6) + "']");
    }
    const byField = form.querySelector("[data-field='" + target + "']");
    if (byField) return byField;
    const row = form.querySelector("tr.ed-row[data-prefix='" + target + "']");
    return row ? row.lastElementChild : null;
  }

  function note(className, text, rule) {
    const div = document.createElement("div");
    div.className = className;
    if (rule) div.dataset.rule = rule;
    div.textContent = text;
    return div;
  }

  function clearInline() {
    form.querySelectorAll("#editor-form .finding, #editor-form .field-error").forEach(function (el) {
      if (!el.closest("#rewrite-note")) el.remove();
    });
    form.querySelectorAll(".has-error, .has-warning").forEach(function (el) {
      el.classList.remove("has-error", "has-warning");
    });
    form.querySelectorAll("tr.ed-row-findings").forEach(function (el) { el.remove(); });
  }

  // A folded section (<details>) opens when something in it needs attention.
  function reveal(place) {
    let details = place ? place.closest("details") : null;
    while (details) {
      details.open = true;
      details = details.parentElement ? details.parentElement.closest("details") : null;
    }
  }

  function render(body) {
    clearInline();
    summaryList.innerHTML = "";
    // Format errors first: the field could not be read, so a save is refused.
    const fieldErrors = body.field_errors || {};
    const labels = body.field_labels || {};
    Object.keys(fieldErrors).forEach(function (key) {
      const place = placeFor(key);
      if (place) {
        place.classList.add("has-error");
        reveal(place);
      }
      fieldErrors[key].forEach(function (message) {
        if (place) place.appendChild(note("field-error error", message));
        summaryList.appendChild(summaryItem("error format-error", key, "cannot read", labels[key] || fieldLabel(key), message));
      });
    });
    const findings = body.findings || [];
    findings.forEach(function (f) {
      const place = placeFor(f.target);
      if (place) {
        place.classList.add("has-" + f.severity);
        place.appendChild(note("finding " + f.severity, f.severity + ": " + f.message, f.rule));
      }
      const li = summaryItem(f.severity, f.target, f.severity, f.field, f.message);
      li.dataset.rule = f.rule;
      summaryList.appendChild(li);
    });
    const errors = body.errors || 0;
    const warnings = body.warnings || 0;
    let text = findings.length === 0 ? "No problems found"
      : (errors ? plural(errors, "error") + " block saving" : "No errors")
        + (warnings ? ", " + plural(warnings, "warning") : "");
    summaryText.textContent = text;
    const unreadable = Object.keys(fieldErrors).length;
    summaryFormat.hidden = unreadable === 0;
    summaryFormat.textContent = "· " + plural(unreadable, "field") + " cannot be read: fix "
      + (unreadable === 1 ? "it" : "them") + " to save";
    summary.classList.toggle("has-errors", errors > 0 || unreadable > 0);
  }

  async function check() {
    const mine = ++sequence;
    const data = new FormData(form);
    data.set("action", "check");
    summaryStatus.textContent = "checking…";
    try {
      const response = await fetch(location.pathname, {
        method: "POST",
        body: data,
        credentials: "same-origin",
        headers: { "Accept": "application/json", "X-CSRFToken": csrfToken() },
      });
      const body = await response.json();
      if (mine !== sequence) return; // a newer check is under way
      render(body);
      summaryStatus.textContent = "";
      form.dataset.checked = String(mine);
      // Others draw from the same answer (editor_graph.js: the ensemble graph).
      form.dispatchEvent(new CustomEvent("editor:checked", { detail: body }));
    } catch (err) {
      if (mine === sequence) summaryStatus.textContent = "could not check (offline?)";
    }
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(check, DELAY_MS);
  }

  // Errors the page came with (a refused save) are in view even inside folded sections.
  form.querySelectorAll(".field-error, .finding.error").forEach(reveal);

  form.addEventListener("input", schedule);
  form.addEventListener("change", schedule);
  // A new row (editor.js "Add row") changes what the form says once it is filled in.
  form.addEventListener("editor:row-added", schedule);

  // A summary entry takes you to its field.
  summaryList.addEventListener("click", function (event) {
    const li = event.target.closest("li[data-target]");
    if (!li || !li.dataset.target) return;
    const place = placeFor(li.dataset.target);
    reveal(place);
    const input = place && (place.querySelector("input:not([type=hidden]), select") || place);
    if (input && input.focus) {
      input.scrollIntoView({ block: "center" });
      input.focus();
    }
  });
})();
