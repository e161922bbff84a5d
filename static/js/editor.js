// The config.pbtxt editor: CodeMirror with line numbers and server-side validation
// markers in text mode, "Add row" for the form's tables, and a size check before posting.
// Form mode's live validation is in editor_form.js.
"use strict";

(function () {
  const form = document.getElementById("editor-form");
  if (!form) return;
  const maxBytes = parseInt(form.dataset.maxBytes, 10);
  const validateUrl = form.dataset.validateUrl;

  function csrfToken() {
    const input = form.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  // --- form mode: "Add row" clones the table's empty row and bumps TOTAL_FORMS --------
  // (the formsets render no blank row of their own, so nothing looks like data that is not)
  document.querySelectorAll(".formset").forEach(function (box) {
    const prefix = box.dataset.prefix;
    const total = box.querySelector("input[name='" + prefix + "-TOTAL_FORMS']");
    const template = box.querySelector("template.row-template");
    const tbody = box.querySelector("tbody");
    box.querySelector("button.add-row").addEventListener("click", function () {
      const index = parseInt(total.value, 10);
      const html = template.innerHTML.replace(/__prefix__/g, String(index)).replace(/__num__/g, String(index + 1));
      tbody.insertAdjacentHTML("beforeend", html);
      total.value = String(index + 1);
      const empty = box.querySelector(".empty-note");
      if (empty) empty.remove();
      offerNewParent(prefix, index);
      const first = tbody.lastElementChild.querySelector("input:not([type=hidden]), select");
      if (first && first.dataset.parentSelect === undefined) first.focus();
      form.dispatchEvent(new CustomEvent("editor:row-added", { detail: { prefix: prefix, index: index } }));
    });
  });

  // A table whose rows belong to rows of another (rate-limiter resources to instance
  // groups, ...) names them in a "parent" select: a row added to the parent table becomes
  // a choice there too, in the rows shown and in the template of rows to come.
  function offerNewParent(parentPrefix, index) {
    document.querySelectorAll(".formset[data-parent-prefix='" + parentPrefix + "']").forEach(function (child) {
      const label = (index + 1) + ": (new row)";
      child.querySelectorAll("select[data-parent-select]").forEach(function (select) {
        if (select.querySelector("option[value='" + index + "']")) return;
        select.appendChild(new Option(label, String(index)));
      });
      const tpl = child.querySelector("template.row-template");
      if (tpl) {
        tpl.content.querySelectorAll("select[data-parent-select]").forEach(function (select) {
          if (!select.querySelector("option[value='" + index + "']")) select.appendChild(new Option(label, String(index)));
        });
      }
    });
  }

  // --- text mode: CodeMirror + validation markers ------------------------------------
  const textarea = document.getElementById("config-text");
  const status = document.getElementById("validate-status");
  let cm = null;

  function byteLength(text) { return new Blob([text]).size; }

  function renderFindings(findings) {
    const box = document.getElementById("findings-box");
    const list = document.getElementById("findings");
    if (!box || !list) return;
    list.innerHTML = "";
    findings.forEach(function (f) {
      const li = document.createElement("li");
      li.className = f.severity;
      li.dataset.rule = f.rule;
      if (f.line) {
        const a = document.createElement("a");
        a.href = "#"; a.className = "goto"; a.dataset.line = f.line; a.dataset.col = f.col || 1;
        a.textContent = "line " + f.line + (f.col ? ":" + f.col : "");
        li.appendChild(a);
        li.appendChild(document.createTextNode(" "));
      }
      li.appendChild(document.createTextNode(f.severity + (f.field ? " " + f.field : "") + ": " + f.message));
      list.appendChild(li);
    });
    box.hidden = findings.length === 0;
    const errors = findings.filter(function (f) { return f.severity === "error"; }).length;
    const heading = box.querySelector("h2");
    if (heading) heading.textContent = errors ? errors + " error" + (errors === 1 ? "" : "s") + " block saving" : "Warnings (they do not block saving)";
  }

  function annotations(findings) {
    if (!cm) return [];
    const last = cm.lastLine();
    return findings.map(function (f) {
      const line = Math.min(Math.max((f.line || 1) - 1, 0), last);
      const text = cm.getLine(line) || "";
      const col = Math.min(Math.max((f.col || 1) - 1, 0), text.length);
      let end = col;
      while (end < text.length && /[\w."\-\[]/.test(text[end])) end++;
      if (end === col) end = Math.min(col + 1, text.length);
      return {
        from: CodeMirror.Pos(line, col),
        to: CodeMirror.Pos(line, Math.max(end, col)),
        message: f.message + " [" + f.rule + "]",
        severity: f.severity === "error" ? "error" : "warning",
      };
    });
  }

  let lastFindings = JSON.parse(document.getElementById("initial-findings").textContent || "[]");

  async function validate(text) {
    if (byteLength(text) > maxBytes) {
      return [{ severity: "error", rule: "parse.too-large", field: "", line: 1, col: 1,
        message: "the text is over " + Math.round(maxBytes / 1048576) + " MiB: model configs are a few KB" }];
    }
    const response = await fetch(validateUrl, {
      method: "POST",
      headers: { "X-CSRFToken": csrfToken(), "Content-Type": "text/plain; charset=utf-8", "Accept": "application/json" },
      credentials: "same-origin",
      body: text,
    });
    const body = await response.json();
    return body.findings || [];
  }

  if (textarea && window.CodeMirror) {
    CodeMirror.defineSimpleMode("pbtxt", {
      start: [
        { regex: /#.*/, token: "comment" },
        { regex: /"(?:[^\\"]|\\.)*?(?:"|$)/, token: "string" },
        { regex: /'(?:[^\\']|\\.)*?(?:'|$)/, token: "string" },
        { regex: /[-+]?(?:\d+\.?\d*(?:e[-+]?\d+)?)/i, token: "number" },
        { regex: /(?:TYPE|KIND|FORMAT)_[A-Z0-9_]+|true|false/, token: "atom" },
        { regex: /[A-Za-z_][\w]*(?=\s*[:{<\[])/, token: "property" },
        { regex: /[{}\[\]<>]/, token: "bracket" },
      ],
    });
    cm = CodeMirror.fromTextArea(textarea, {
      lineNumbers: true,
      mode: "pbtxt",
      indentUnit: 2,
      gutters: ["CodeMirror-lint-markers", "CodeMirror-linenumbers"],
      lint: {
        async: true,
        delay: 500,
        getAnnotations: function (text, update) {
          if (status) status.textContent = "checking…";
          validate(text).then(function (findings) {
            lastFindings = findings;
            renderFindings(findings);
            update(annotations(findings));
            if (status) {
              const errors = findings.filter(function (f) { return f.severity === "error"; }).length;
              status.textContent = errors ? errors + " error(s)" : (findings.length ? "no errors, " + findings.length + " warning(s)" : "no problems found");
              status.className = "small " + (errors ? "error" : "ok");
            }
          }).catch(function () { if (status) status.textContent = "could not check (offline?)"; });
        },
      },
    });
    window.configEditor = cm;
  }

  document.addEventListener("click", function (event) {
    const link = event.target.closest("a.goto");
    if (!link || !cm) return;
    event.preventDefault();
    cm.focus();
    cm.setCursor({ line: parseInt(link.dataset.line, 10) - 1, ch: parseInt(link.dataset.col, 10) - 1 });
  });

  // --- before posting: never send more than the server accepts ------------------------
  form.addEventListener("submit", function (event) {
    if (cm) cm.save();
    if (textarea && byteLength(textarea.value) > maxBytes) {
      event.preventDefault();
      renderFindings([{ severity: "error", rule: "parse.too-large", field: "", line: 1, col: 1,
        message: "the text is " + (byteLength(textarea.value) / 1048576).toFixed(1) + " MiB, over the " + Math.round(maxBytes / 1048576) + " MiB limit; model configs are a few KB: nothing was sent or saved" }]);
    }
  });
})();
