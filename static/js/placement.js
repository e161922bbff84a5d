// Where a job's task went and why, and who claimed it (templates/profiler/_placement.html):
// the sweep and search pages call JobPlacement.render with the job's `placement` JSON.
window.JobPlacement = (function () {
  "use strict";
  function code(text) { const c = document.createElement("code"); c.textContent = text; return c; }
  function render(p) {
    const worker = document.getElementById("job-worker");
    if (!p || !worker) return;
    worker.textContent = "";
    if (p.worker || p.worker_host) {
      if (p.worker) { worker.appendChild(code(p.worker)); worker.appendChild(document.createTextNode(" on ")); }
      worker.appendChild(document.createTextNode("host "));
      worker.appendChild(code(p.worker_host || "?"));
    } else {
      worker.textContent = "not claimed yet";
    }
    document.getElementById("job-queue").textContent = p.queue || "(not sent)";
    const routing = document.getElementById("job-routing");
    routing.textContent = p.routing || "";
    routing.hidden = !p.routing;
    routing.className = "small " + (p.waiting_for_worker ? "warning" : "muted");
  }
  return { render: render };
})();
