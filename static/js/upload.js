// Chunked, resumable uploads (protocol: docs/uploads.md). Each file is sent in chunks with
// its offset; the upload id is kept in localStorage under the file's name, size and mtime,
// so after a dropped connection or a reload the same file resumes at the server's offset.
"use strict";

(function () {
  const form = document.getElementById("upload-form");
  if (!form) return;
  const API = form.dataset.api;
  const rows = document.querySelector("#upload-rows tbody");
  const MAX_RETRIES = 10;

  function csrf() {
    const m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
    return m ? decodeURIComponent(m[1]) : "";
  }
  function sleep(ms) { return new Promise(function (r) { setTimeout(r, ms); }); }
  function bytes(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + " " + units[i];
  }
  function duration(s) {
    if (!isFinite(s)) return "…";
    if (s < 60) return Math.ceil(s) + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.round((s % 3600) / 60) + " min";
  }
  async function call(method, url, body) {
    const headers = { "X-CSRFToken": csrf(), "Accept": "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const r = await fetch(url, { method: method, headers: headers, credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body) });
    let data = {};
    try { data = await r.json(); } catch (e) { data = { message: r.status + " " + r.statusText }; }
    return { ok: r.ok, status: r.status, body: data };
  }

  function Row(file) {
    const tr = document.createElement("tr");
    tr.className = "upload-row";
    tr.dataset.file = file.name;
    tr.innerHTML = "<td><code></code><div class='small muted'></div></td>" +
      "<td><progress value='0' max='1' style='width:100%'></progress><div class='small'>" +
      "<span data-k='percent'>0 %</span> · <span data-k='speed'>–</span> · <span data-k='eta'>–</span> left</div></td>" +
      "<td data-k='status' class='small'>starting…</td><td><button type='button' class='secondary' data-k='abort'>Abort</button></td>";
    tr.querySelector("code").textContent = file.name;
    tr.querySelector("div.small.muted").textContent = bytes(file.size);
    rows.appendChild(tr);
    this.tr = tr;
    this.bar = tr.querySelector("progress");
    this.bar.max = file.size;
    this.samples = [];
    this.aborted = false;
    const self = this;
    tr.querySelector("[data-k=abort]").addEventListener("click", function () { self.aborted = true; });
  }
  Row.prototype.k = function (name) { return this.tr.querySelector("[data-k=" + name + "]"); };
  Row.prototype.status = function (text, cls) {
    const cell = this.k("status");
    cell.className = "small " + (cls || "");
    cell.textContent = text;
  };
  Row.prototype.progress = function (offset, total) {
    const now = performance.now();
    this.samples.push([now, offset]);
    while (this.samples.length > 2 && now - this.samples[0][0] > 5000) this.samples.shift();
    this.bar.value = offset;
    this.k("percent").textContent = (total ? (100 * offset / total).toFixed(1) : "100") + " %";
    const first = this.samples[0];
    const seconds = (now - first[0]) / 1000;
    if (seconds > 0.2) {
      const speed = (offset - first[1]) / seconds;
      this.k("speed").textContent = bytes(speed) + "/s";
      this.k("eta").textContent = duration(speed > 0 ? (total - offset) / speed : Infinity);
    }
  };
  Row.prototype.finish = function () { const b = this.k("abort"); if (b) b.remove(); };

  function storageKey(file, target) {
    return "upload:" + target + ":" + file.name + ":" + file.size + ":" + file.lastModified;
  }

  async function start(file, target, row) {
    const key = storageKey(file, target.model + "/" + (target.version || "next") + (target.new_model ? "/new" : ""));
    let upload = null;
    const saved = localStorage.getItem(key);
    if (saved) {
      const r = await call("GET", API + saved + "/");
      if (r.ok && r.body.state === "receiving" && r.body.size === file.size) {
        upload = r.body;
        row.status("resuming at " + bytes(upload.offset), "warning");
      } else {
        localStorage.removeItem(key);
      }
    }
    if (!upload) {
      const r = await call("POST", API, Object.assign({ filename: file.name, size: file.size }, target));
      if (!r.ok) { row.status(r.body.message, "error"); row.finish(); return; }
      upload = r.body;
      localStorage.setItem(key, upload.id);
    }
    row.tr.dataset.uploadId = upload.id;
    await send(file, upload, row, key);
  }

  async function send(file, upload, row, key) {
    let offset = upload.offset;
    let failures = 0;
    row.progress(offset, file.size);
    while (offset < file.size) {
      if (row.aborted) {
        await call("DELETE", upload.url);
        localStorage.removeItem(key);
        row.status("aborted", "warning"); row.finish();
        return;
      }
      const end = Math.min(offset + upload.chunk_size, file.size);
      let r = null;
      try {
        r = await fetch(upload.url, {
          method: "PATCH", credentials: "same-origin", body: file.slice(offset, end),
          headers: { "Upload-Offset": String(offset), "Content-Type": "application/octet-stream",
                     "X-CSRFToken": csrf(), "Accept": "application/json" },
        });
      } catch (e) { r = null; }
      if (r && r.ok) {
        offset = Number(r.headers.get("Upload-Offset"));
        failures = 0;
        row.status("uploading…");
        row.progress(offset, file.size);
        continue;
      }
      let body = {};
      if (r) { try { body = await r.json(); } catch (e) { body = {}; } }
      if (r && r.status === 409 && typeof body.expected_offset === "number") {
        offset = body.expected_offset;  // the server has more (or less) than we thought
        continue;
      }
      if (r && r.status >= 400 && r.status < 500 && r.status !== 408 && r.status !== 429) {
        row.status(body.message || (r.status + " " + r.statusText), "error");
        localStorage.removeItem(key); row.finish();
        return;
      }
      failures += 1;
      if (failures > MAX_RETRIES) {
        row.status("connection lost: choose the same file again (or reload) to resume", "error");
        row.finish();
        return;
      }
      const wait = Math.min(1000 * 2 ** (failures - 1), 15000);
      row.status("connection problem; retry " + failures + " in " + Math.round(wait / 1000) + " s", "warning");
      await sleep(wait);
      const head = await call("GET", upload.url).catch(function () { return null; });
      if (head && head.ok) offset = head.body.offset;
    }
    await publish(upload, row, key);
  }

  async function publish(upload, row, key) {
    row.finish();
    row.status("verifying sha256 and publishing…", "warning");
    let r = await call("POST", upload.url + "complete");
    if (!r.ok) {
      row.status(r.body.message, "error");
      if (r.status !== 409) localStorage.removeItem(key);
      return;
    }
    let state = r.body;
    while (state.state === "processing") {
      await sleep(500);
      r = await call("GET", upload.url);
      if (!r.ok) continue;
      state = r.body;
    }
    if (state.state === "published") {
      localStorage.removeItem(key);
      published(state.version);
      const cell = row.k("status");
      cell.className = "small";
      cell.textContent = "";
      const strong = document.createElement("span");
      strong.className = "ok upload-done";
      strong.textContent = "version " + state.version + " published";
      const link = document.createElement("a");
      link.href = state.model_url; link.className = "upload-model-link";
      link.textContent = "open " + state.model;
      const head = document.createElement("div");
      head.append(strong, " · ", link);
      cell.append(head);
      // The rest of the server's message ("stored as model.onnx, the name Triton loads",
      // "config.pbtxt generated ..."); its first clause is the line above.
      const notes = (state.message || "").split("; ").slice(1).join("; ");
      if (notes || state.editor_url) {
        const note = document.createElement("div");
        note.className = "upload-note";
        note.append(notes);
        if (state.editor_url) {
          const editor = document.createElement("a");
          editor.href = state.editor_url; editor.textContent = "open the config editor";
          editor.className = "upload-editor-link";
          note.append(notes ? " · " : "", editor);
        }
        cell.append(note);
      }
      if (state.new_model && form.dataset.loadUrl) {
        // A trial load through the model page's own load action (it then shows the outcome).
        const trial = document.createElement("form");
        trial.method = "post";
        trial.action = form.dataset.loadUrl.replace("MODEL_NAME", encodeURIComponent(state.model));
        trial.className = "upload-load";
        const token = document.createElement("input");
        token.type = "hidden"; token.name = "csrfmiddlewaretoken"; token.value = csrf();
        const button = document.createElement("button");
        button.type = "submit"; button.className = "upload-load-button";
        button.textContent = "Load it now";
        trial.append(token, button);
        cell.append(trial);
      }
      const sha = document.createElement("div");
      sha.innerHTML = "sha256 <code class='upload-sha256'></code>";
      sha.querySelector("code").textContent = state.sha256;
      cell.append(sha);
      if (state.editor_url && state.message.indexOf("skeleton") >= 0) {
        setTimeout(function () { location.href = state.editor_url; }, 1500);
      }
    } else if (state.state === "receiving") {
      // Retryable (e.g. the model was LOADING): the bytes are kept.
      row.status(state.message + " ", "error");
      const again = document.createElement("button");
      again.type = "button"; again.className = "secondary"; again.textContent = "Publish again";
      again.addEventListener("click", function () { again.remove(); publish(upload, row, key); });
      row.k("status").appendChild(again);
    } else {
      localStorage.removeItem(key);
      row.status(state.message || state.state, "error");
    }
  }

  // The version choice follows what this page published: the next free number is the
  // one after the highest version on disk, as the server picks it.
  const versionsData = document.getElementById("upload-versions");
  const versions = versionsData ? JSON.parse(versionsData.textContent) : [];
  function published(version) {
    const next = document.getElementById("next-version");
    if (!next || !version) return;
    if (versions.indexOf(version) < 0) versions.push(version);
    versions.sort(function (a, b) { return a - b; });
    const free = Math.max.apply(null, versions.concat([0])) + 1;
    next.textContent = String(free);
    document.getElementById("upload-version").placeholder = String(free);
    document.getElementById("versions-on-disk").textContent = versions.join(", ");
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    const input = document.getElementById("upload-file");
    const files = Array.prototype.slice.call(input.files);
    if (!files.length) return;
    const target = { new_model: form.dataset.newModel === "1" };
    const sha = document.getElementById("upload-sha256");
    if (target.new_model) {
      target.model = document.getElementById("upload-model").value.trim();
      target.backend = document.getElementById("upload-backend").value;
    } else {
      target.model = form.dataset.model;
      const mode = form.querySelector("input[name=version_mode]:checked");
      if (mode && mode.value === "chosen") target.version = document.getElementById("upload-version").value;
    }
    files.forEach(function (file, i) {
      const t = Object.assign({}, target);
      if (sha && sha.value && files.length === 1) t.sha256 = sha.value.trim();
      if (t.version && i > 0) t.version = String(Number(t.version) + i);
      const row = new Row(file);
      start(file, t, row).catch(function (e) { row.status(String(e), "error"); });
    });
    input.value = "";
  });
})();
